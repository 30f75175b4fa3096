//! The data sources of `top`: rings (peeked or consumed, picked up as they appear) and scrape
//! endpoints, each turned into the rows of one interval.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nixl_telemetry_core::ring::loss_file::LossCount;

use crate::rings::{Mode, RingSet};
use crate::scrape::{self, Identity, Totals, Url};
use crate::top::frame::Row;
use crate::top::rates::{Observed, Rates};

/// What `top` saw of one ring.
#[derive(Default)]
pub struct Seen {
    /// The events since the last frame.
    interval: Observed,
    /// Every event seen since `top` started (the ring's backlog included).
    all: Observed,
    /// When an interval after the first last had events (the first one's are the ring's
    /// backlog, however old).
    active: Option<Instant>,
    /// Whether the first interval was sampled.
    sampled: bool,
}

/// How long ago the ring at `path` was last written, as far as `top` can tell: the latest of
/// the file's modification time (a shared mapping's writes update it, at the latest when their
/// pages are written back) and the last interval in which `top` saw new events.
fn writer_idle(path: &std::path::Path, active: Option<Instant>) -> Option<Duration> {
    let by_file = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| std::time::SystemTime::now().duration_since(t).ok());
    let by_events = active.map(|a| a.elapsed());
    match (by_file, by_events) {
        (Some(f), Some(e)) => Some(f.min(e)),
        (f, e) => f.or(e),
    }
}

/// Where rows come from.
pub enum Source {
    /// Rings, and what `top` saw of each one.
    Rings(RingSet, Vec<Seen>),
    /// A scrape endpoint: its last scrape, and when each series last changed (or was first
    /// seen).
    Url {
        url: Url,
        last: Option<(Instant, BTreeMap<Identity, Totals>)>,
        active: BTreeMap<Identity, Instant>,
    },
}

/// `idle for 1.5 s`, `idle for 3 min 20 s`.
fn idle_for(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("idle for {s:.1} s")
    } else {
        format!("idle for {} min {} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// Joins an existing note and another one.
fn with_note(note: Option<String>, more: String) -> Option<String> {
    Some(match note {
        Some(n) => format!("{n}; {more}"),
        None => more,
    })
}

/// The display name of a scraped series: `agent_name`, with the other labels (but `hostname`,
/// unless the hosts differ) as `k=v`. A series without `agent_name` is `all agents` when it is
/// a sum of others (`aggregate`: `prometheus_mp`'s node total, over agents of any name), else
/// `(no agent_name)`.
fn series_name(id: &Identity, show_host: bool, aggregate: bool) -> String {
    let agent = id.iter().find(|(k, _)| k == "agent_name").map_or(
        if aggregate {
            "all agents"
        } else {
            "(no agent_name)"
        },
        |(_, v)| v.as_str(),
    );
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
        Source::Url {
            url,
            last: None,
            active: BTreeMap::new(),
        }
    }

    /// Takes the rings' new events into the current frame's summaries. Called often between
    /// frames: a peeked ring shows only events still unread, so looking often sees the events
    /// another reader consumes soon after they arrive.
    pub fn collect(&mut self, mode: Mode) {
        let Source::Rings(set, seen) = self else {
            return;
        };
        seen.resize_with(set.rings.len(), Seen::default);
        for (ring, seen) in set.rings.iter_mut().zip(seen) {
            let limit = ring.reader().map_or(0, |r| r.capacity() as usize);
            let _ = ring.take_batches(mode, limit, true, |events| {
                events.iter().for_each(|e| seen.interval.add(e));
                Ok(())
            });
        }
    }

    /// Rows of the activity since the last call, which took `seconds` (no rates with
    /// `baseline`; a scrape endpoint's first call gives none either). A row whose interval had
    /// no activity carries the totals seen so far instead, and a note saying so: for a ring,
    /// every event `top` saw of it (its backlog at the first look included); for a scrape,
    /// the cumulative counters.
    pub fn sample(&mut self, mode: Mode, seconds: f64, baseline: bool) -> Vec<Row> {
        self.collect(mode);
        match self {
            Source::Rings(set, seen) => {
                set.rescan();
                let mut rows = Vec::new();
                seen.resize_with(set.rings.len(), Seen::default);
                for (ring, seen) in set.rings.iter_mut().zip(seen) {
                    let observed = std::mem::take(&mut seen.interval);
                    seen.all.merge(&observed);
                    if observed.total() > 0 && seen.sampled {
                        seen.active = Some(Instant::now());
                    }
                    seen.sampled = true;
                    let note = match ring.reader() {
                        None => Some("waiting for the ring".to_owned()),
                        Some(r) if mode == Mode::Peek && r.len() + 1 >= r.capacity() => Some(
                            "ring full: nothing drains it, its writer is losing events \
                             (use --consume to be its reader)"
                                .to_owned(),
                        ),
                        Some(r) => match r.lost_events() {
                            LossCount::Counted(n) if n > 0 => Some(format!(
                                "{n} events lost at the ring (its reader was behind)"
                            )),
                            LossCount::Untrusted(why) => {
                                Some(format!("loss count untrusted: {why}"))
                            }
                            _ => None,
                        },
                    };
                    let rates = (!baseline && ring.reader().is_some())
                        .then(|| Rates::from_events(&observed, seconds));
                    let mut row = Row {
                        name: ring.name.clone(),
                        rates,
                        note,
                        totals: None,
                        aggregate: false,
                    };
                    if row.rates.as_ref().is_some_and(Rates::is_idle) && seen.all.total() > 0 {
                        row.totals = Some(Rates::from_events(&seen.all, 1.0));
                        row.note = with_note(
                            row.note,
                            match writer_idle(&ring.path, seen.active) {
                                Some(idle) => format!(
                                    "{}: totals of the {} events seen",
                                    idle_for(idle),
                                    seen.all.total()
                                ),
                                None => {
                                    format!("idle: totals of the {} events seen", seen.all.total())
                                }
                            },
                        );
                    }
                    rows.push(row);
                }
                rows
            }
            Source::Url { url, last, active } => match scrape::scrape(url) {
                Err(e) => vec![Row {
                    name: url.to_string(),
                    rates: None,
                    note: Some(format!("cannot scrape: {e}")),
                    totals: None,
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
                            let since = active.entry(id.clone()).or_insert(at);
                            if rates.as_ref().is_some_and(|r| !r.is_idle()) {
                                *since = at;
                            }
                            // A label set contained in another one is a sum over it.
                            let aggregate = now.keys().any(|other| {
                                other.len() > id.len() && id.iter().all(|l| other.contains(l))
                            });
                            let mut row = Row {
                                name: series_name(id, hosts.len() > 1, aggregate),
                                rates,
                                note: None,
                                totals: None,
                                aggregate,
                            };
                            let sums = Rates::from_scrapes(None, totals, 1.0);
                            if row.rates.as_ref().is_some_and(Rates::is_idle) && !sums.is_idle() {
                                row.totals = Some(sums);
                                row.note = Some(format!(
                                    "{}: totals since the exporter started",
                                    idle_for(at.duration_since(*since))
                                ));
                            }
                            row
                        })
                        .collect::<Vec<_>>();
                    *last = Some((at, now));
                    if rows.is_empty() {
                        return vec![Row {
                            name: url.to_string(),
                            rates: None,
                            note: Some("no NIXL telemetry series at this endpoint".into()),
                            totals: None,
                            aggregate: false,
                        }];
                    }
                    rows
                }
            },
        }
    }
}
