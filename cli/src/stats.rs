//! `nixl-telemetry stats`: per-event counts and sums, cumulative totals, last values and, for
//! the transfer times, min/mean/p50/p99/max.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use nixl_telemetry::{Event, EventType, RingReader};
use serde_json::{json, Value};

use crate::output::CliResult;

/// Aggregates of one event name.
#[derive(Clone, Debug, Default)]
pub struct EventSummary {
    /// Number of events.
    pub count: u64,
    /// Sum of values (saturating).
    pub sum: u64,
    /// Most recent value.
    pub last: u64,
    /// Every value, kept for the distributions of transfer times only.
    samples: Vec<u64>,
}

/// Distribution of one transfer-time event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Distribution {
    /// Smallest value.
    pub min: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: u64,
    /// 99th percentile (nearest rank).
    pub p99: u64,
    /// Largest value.
    pub max: u64,
}

/// Per-event aggregates, in event-type order (unknown types last, by name).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    by_event: BTreeMap<(u32, String), EventSummary>,
}

impl Summary {
    /// Adds one event.
    pub fn add(&mut self, event: &Event) {
        let entry = self
            .by_event
            .entry((event.event_type, event.name()))
            .or_default();
        entry.count += 1;
        entry.sum = entry.sum.saturating_add(event.value);
        entry.last = event.value;
        if matches!(
            event.kind(),
            Some(EventType::AgentXferTime | EventType::AgentXferPostTime)
        ) {
            entry.samples.push(event.value);
        }
    }

    /// Total number of events added.
    pub fn total(&self) -> u64 {
        self.by_event.values().map(|s| s.count).sum()
    }

    /// The distribution of a transfer-time event, if any were seen.
    pub fn distribution(summary: &EventSummary) -> Option<Distribution> {
        let mut v = summary.samples.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Distribution {
            min: v[0],
            mean: v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64,
            p50: rank(0.50),
            p99: rank(0.99),
            max: v[v.len() - 1],
        })
    }

    /// The summary as a JSON value.
    pub fn to_json(&self) -> Value {
        let events: Vec<Value> = self
            .by_event
            .iter()
            .map(|((t, name), s)| {
                let mut o = json!({"event": name, "type": t, "count": s.count, "sum": s.sum, "last": s.last});
                if let Some(d) = Summary::distribution(s) {
                    o["distribution"] = json!({"min": d.min, "mean": d.mean, "p50": d.p50, "p99": d.p99, "max": d.max});
                }
                o
            })
            .collect();
        json!({"total_events": self.total(), "events": events})
    }

    /// Writes the summary as an aligned table.
    pub fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{:<32} {:>10} {:>20} {:>14}",
            "event", "count", "sum (total)", "last"
        )?;
        for ((_, name), s) in &self.by_event {
            writeln!(
                out,
                "{name:<32} {:>10} {:>20} {:>14}",
                s.count, s.sum, s.last
            )?;
        }
        let distributions: Vec<_> = self
            .by_event
            .iter()
            .filter_map(|((_, name), s)| Summary::distribution(s).map(|d| (name, d)))
            .collect();
        if !distributions.is_empty() {
            writeln!(out)?;
            writeln!(
                out,
                "{:<32} {:>10} {:>12} {:>10} {:>10} {:>10}",
                "transfer time (us)", "min", "mean", "p50", "p99", "max"
            )?;
            for (name, d) in distributions {
                writeln!(
                    out,
                    "{name:<32} {:>10} {:>12.1} {:>10} {:>10} {:>10}",
                    d.min, d.mean, d.p50, d.p99, d.max
                )?;
            }
        }
        writeln!(out, "total events: {}", self.total())
    }
}

/// Drains `path` and prints its summary.
pub fn run(path: &Path, json: bool) -> CliResult {
    let ring = RingReader::open(path)?;
    let mut summary = Summary::default();
    for event in ring {
        summary.add(&event);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        writeln!(out, "{}", summary.to_json())?;
    } else {
        summary.write_table(&mut out)?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_last_values_and_percentiles() {
        let mut s = Summary::default();
        for v in [10, 20, 35] {
            s.add(&Event::new(EventType::AgentTxBytes, v));
        }
        for v in 1..=100 {
            s.add(&Event::new(EventType::AgentXferTime, v));
        }
        let j = s.to_json();
        assert_eq!(j["total_events"], 103);
        assert_eq!(j["events"][0]["sum"], 65);
        assert_eq!(j["events"][0]["last"], 35);
        let d = &j["events"][1]["distribution"];
        assert_eq!((d["min"].clone(), d["p50"].clone()), (json!(1), json!(50)));
        assert_eq!(
            (d["p99"].clone(), d["max"].clone()),
            (json!(99), json!(100))
        );
        assert_eq!(d["mean"], 50.5);
    }
}
