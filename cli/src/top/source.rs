//! The data sources of `top`: rings (peeked or consumed, picked up as they appear) and scrape
//! endpoints, each turned into the rows of one interval.

use std::time::Instant;

use crate::rings::{Mode, RingSet};
use crate::scrape::{self, Identity, Totals, Url};
use crate::stats::Summary;
use crate::top::frame::Row;
use crate::top::rates::Rates;

/// Where rows come from.
pub enum Source {
    /// Rings, and what each one got since the last frame.
    Rings(RingSet, Vec<Summary>),
    /// A scrape endpoint, and its last scrape.
    Url {
        url: Url,
        last: Option<(Instant, std::collections::BTreeMap<Identity, Totals>)>,
    },
}

/// The display name of a scraped series: `agent_name`, with the other labels (but `hostname`,
/// unless the hosts differ) as `k=v`.
fn series_name(id: &Identity, show_host: bool) -> String {
    let agent = id
        .iter()
        .find(|(k, _)| k == "agent_name")
        .map_or("?", |(_, v)| v.as_str());
    let mut name = agent.to_owned();
    for (k, v) in id {
        if k == "agent_name" || (k == "hostname" && !show_host) {
            continue;
        }
        name.push_str(&format!(" {k}={v}"));
    }
    name
}

impl Source {
    /// A scrape endpoint.
    pub fn url(url: Url) -> Source {
        Source::Url { url, last: None }
    }

    /// Takes the rings' new events into the current frame's summaries. Called often between
    /// frames: a peeked ring shows only events still unread, so looking often sees the events
    /// another reader consumes soon after they arrive.
    pub fn collect(&mut self, mode: Mode) {
        let Source::Rings(set, summaries) = self else {
            return;
        };
        summaries.resize_with(set.rings.len(), Summary::default);
        for (ring, summary) in set.rings.iter_mut().zip(summaries) {
            let limit = ring.reader().map_or(0, |r| r.capacity() as usize);
            let _ = ring.take_batches(mode, limit, true, |events| {
                events.iter().for_each(|e| summary.add(e));
                Ok(())
            });
        }
    }

    /// Rows of the activity since the last call, which took `seconds` (no rates with
    /// `baseline`; a scrape endpoint's first call gives none either).
    pub fn sample(&mut self, mode: Mode, seconds: f64, baseline: bool) -> Vec<Row> {
        self.collect(mode);
        match self {
            Source::Rings(set, summaries) => {
                set.rescan();
                let mut rows = Vec::new();
                summaries.resize_with(set.rings.len(), Summary::default);
                for (ring, summary) in set.rings.iter_mut().zip(summaries) {
                    let summary = std::mem::take(summary);
                    let note = match ring.reader() {
                        None => Some("waiting for the ring".to_owned()),
                        Some(r) if mode == Mode::Peek && r.len() + 1 >= r.capacity() => Some(
                            "ring full: nothing drains it, its writer is losing events \
                             (use --consume to be its reader)"
                                .to_owned(),
                        ),
                        Some(_) => None,
                    };
                    let rates = (!baseline && ring.reader().is_some())
                        .then(|| Rates::from_summary(&summary, seconds));
                    rows.push(Row {
                        name: ring.name.clone(),
                        rates,
                        note,
                        aggregate: false,
                    });
                }
                rows
            }
            Source::Url { url, last } => match scrape::scrape(url) {
                Err(e) => vec![Row {
                    name: url.to_string(),
                    rates: None,
                    note: Some(format!("cannot scrape: {e}")),
                    aggregate: false,
                }],
                Ok(now) => {
                    let at = Instant::now();
                    let hosts: std::collections::BTreeSet<&str> = now
                        .keys()
                        .filter_map(|id| id.iter().find(|(k, _)| k == "hostname"))
                        .map(|(_, v)| v.as_str())
                        .collect();
                    let previous = last.as_ref();
                    let rows = now
                        .iter()
                        .map(|(id, totals)| {
                            let rates = previous.map(|(then, before)| {
                                let secs = at.duration_since(*then).as_secs_f64().max(1e-3);
                                Rates::from_scrapes(before.get(id), totals, secs)
                            });
                            // A label set contained in another one is a sum over it.
                            let aggregate = now.keys().any(|other| {
                                other.len() > id.len() && id.iter().all(|l| other.contains(l))
                            });
                            Row {
                                name: series_name(id, hosts.len() > 1),
                                rates,
                                note: None,
                                aggregate,
                            }
                        })
                        .collect::<Vec<_>>();
                    *last = Some((at, now));
                    if rows.is_empty() {
                        return vec![Row {
                            name: url.to_string(),
                            rates: None,
                            note: Some("no NIXL telemetry series at this endpoint".into()),
                            aggregate: false,
                        }];
                    }
                    rows
                }
            },
        }
    }
}
