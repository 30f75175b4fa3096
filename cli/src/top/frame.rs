//! The rendering of `top`: one screen (a [`Frame`]) as plain lines: the table of agents with
//! their rates, the node total, errors by status and notes.

use nixl_telemetry::EventType;

use crate::top::rates::{Quantile, Rates};

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// The agent (and the labels telling its series apart).
    pub name: String,
    /// Its rates; `None` before the first full interval or while it cannot be read.
    pub rates: Option<Rates>,
    /// Why it shows no rates, or a warning.
    pub note: Option<String>,
    /// Everything seen so far (sums, not rates), shown instead of the rates when the interval
    /// had no activity (a finished ring, an idle agent); the note then says so.
    pub totals: Option<Rates>,
    /// A sum of other rows (a `prometheus_mp` node total): left out of the node total.
    pub aggregate: bool,
}

/// One screen.
pub struct Frame {
    /// The first line.
    pub title: String,
    /// One row per agent.
    pub rows: Vec<Row>,
    /// Lines shown below the table.
    pub notes: Vec<String>,
}

/// A byte rate with a decimal unit (`12.3 MB/s`).
fn bytes_per_s(v: f64) -> String {
    bytes_in(v, ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"])
}

/// A number of bytes with a decimal unit (`12.3 MB`).
fn bytes(v: f64) -> String {
    bytes_in(v, ["B", "KB", "MB", "GB", "TB"])
}

fn bytes_in(v: f64, units: [&str; 5]) -> String {
    let mut v = v;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < units.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} {}", units[0])
    } else {
        format!("{v:.1} {}", units[unit])
    }
}

/// A count, shortened with `k` and `M` (`12`, `12.3k`).
fn count(v: f64) -> String {
    if v >= 1e4 {
        per_s(v)
    } else {
        format!("{v:.0}")
    }
}

/// A rate per second, shortened with `k` and `M`.
fn per_s(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e4 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.1}"),
    }
}

/// A duration in microseconds, in us, ms or s (`-` for none).
fn micros(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 1000.0 => format!("{v:.0} us"),
        Some(v) if v < 1e6 => format!("{:.1} ms", v / 1e3),
        Some(v) => format!("{:.2} s", v / 1e6),
    }
}

/// A percentile: a value, or the bound of the histogram bucket holding it (`<=1.0 ms`, or
/// `>10.00 s` for the overflow bucket). The second element says whether it is a bucket.
fn percentile(q: Option<Quantile>) -> (String, bool) {
    match q {
        None => (micros(None), false),
        Some(Quantile::Value(v)) => (micros(Some(v)), false),
        Some(Quantile::AtMost(b)) => (format!("<={}", micros(Some(b))), true),
        Some(Quantile::Above(b)) => (format!(">{}", micros(Some(b))), true),
    }
}

/// The line under the table explaining `<=` and `>` percentiles.
pub const BUCKET_LEGEND: &str = "<=x, >x: the percentile lies in the histogram bucket ending at \
x (or above the last bound): a scrape has bucket counts, not values; `nixl-telemetry stats` on \
a ring gives exact ones";

/// How a row's numbers read: rates of the last interval, or totals so far.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    Rates,
    Totals,
}

impl Frame {
    /// The frame's lines (without escapes).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.title.clone(), String::new()];
        // The node row's name counts too, so that its numbers line up with the others'.
        let node_name = format!(
            "node ({} agents)",
            self.rows.iter().filter(|r| !r.aggregate).count()
        );
        let width = self
            .rows
            .iter()
            .map(|r| r.name.chars().count() + if r.aggregate { " (sum)".len() } else { 0 })
            .chain((self.rows.len() > 1).then(|| node_name.chars().count()))
            .max()
            .unwrap_or(0)
            .clamp(12, 40);
        lines.push(format!(
            "{:<width$} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
            "AGENT",
            "TX",
            "RX",
            "TX req",
            "RX req",
            "xfer p50",
            "xfer p99",
            "post p50",
            "errors",
            "drops"
        ));
        let mut node: Option<Rates> = None;
        let mut counted = 0;
        let mut error_lines = Vec::new();
        let mut bucketed = false;
        let mut row_line = |name: &str, rates: Option<&Rates>, note: Option<&str>, shown| {
            let Some(r) = rates else {
                return format!("{name:<width$} {}", note.unwrap_or("-"));
            };
            let p = |t: EventType| r.per_s[t as usize];
            let amount = |v: f64| match shown {
                Shown::Rates => bytes_per_s(v),
                Shown::Totals => bytes(v),
            };
            // Rates say `/s`, totals do not: the headers name the quantity, the cells its unit.
            let number = |v: f64| match shown {
                Shown::Rates => format!("{}/s", per_s(v)),
                Shown::Totals => count(v),
            };
            let mut quantile = |d: &crate::top::rates::Dist, q: f64| {
                let (text, bucket) = percentile(d.quantile(q));
                bucketed |= bucket;
                text
            };
            let mut line = format!(
                "{name:<width$} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
                amount(p(EventType::AgentTxBytes)),
                amount(p(EventType::AgentRxBytes)),
                number(p(EventType::AgentTxRequestsNum)),
                number(p(EventType::AgentRxRequestsNum)),
                quantile(&r.xfer, 0.5),
                quantile(&r.xfer, 0.99),
                quantile(&r.post, 0.5),
                number(r.errors()),
                number(p(EventType::AgentTelemetryEventsDropped)),
            );
            if let Some(note) = note {
                line.push_str("  ");
                line.push_str(note);
            }
            line
        };
        let mut node_totals: Option<Rates> = None;
        for row in &self.rows {
            let shown = if row.aggregate {
                format!("{} (sum)", row.name)
            } else {
                row.name.clone()
            };
            match &row.totals {
                Some(t) => lines.push(row_line(
                    &shown,
                    Some(t),
                    row.note.as_deref(),
                    Shown::Totals,
                )),
                None => lines.push(row_line(
                    &shown,
                    row.rates.as_ref(),
                    row.note.as_deref(),
                    Shown::Rates,
                )),
            }
            let Some(r) = &row.rates else { continue };
            let by_status: Vec<String> = EventType::ALL
                .iter()
                .filter(|t| t.is_error() && r.per_s[**t as usize] > 0.0)
                .map(|t| {
                    format!(
                        "{} {}",
                        t.status_label().unwrap_or("?"),
                        per_s(r.per_s[*t as usize])
                    )
                })
                .collect();
            if !by_status.is_empty() {
                error_lines.push(format!("  {}: {}", row.name, by_status.join(", ")));
            }
            if !row.aggregate {
                counted += 1;
                match &mut node {
                    Some(n) => n.add(r),
                    None => node = Some(r.clone()),
                }
                let total = row.totals.as_ref().unwrap_or(r);
                match &mut node_totals {
                    Some(n) => n.add(total),
                    None => node_totals = Some(total.clone()),
                }
            }
        }
        if self.rows.len() > 1 {
            let name = node_name;
            debug_assert_eq!(name, format!("node ({counted} agents)"));
            let idle = node.as_ref().is_some_and(Rates::is_idle);
            match node_totals.filter(|t| idle && !t.is_idle()) {
                Some(t) => lines.push(row_line(
                    &name,
                    Some(&t),
                    Some("idle: totals"),
                    Shown::Totals,
                )),
                None => lines.push(row_line(&name, node.as_ref(), None, Shown::Rates)),
            }
        }
        if bucketed {
            lines.push(String::new());
            lines.push(BUCKET_LEGEND.to_owned());
        }
        if !error_lines.is_empty() {
            lines.push(String::new());
            lines.push("errors/s by status:".into());
            lines.extend(error_lines);
        }
        if !self.notes.is_empty() {
            lines.push(String::new());
            lines.extend(self.notes.iter().cloned());
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::rates::two_scrapes;

    #[test]
    fn rows_sum_into_the_node() {
        let (before, now) = two_scrapes();
        let r = Rates::from_scrapes(Some(&before), &now, 2.0);
        let frame = Frame {
            title: "t".into(),
            rows: vec![
                Row {
                    name: "a".into(),
                    rates: Some(r.clone()),
                    note: None,
                    totals: None,
                    aggregate: false,
                },
                Row {
                    name: "b".into(),
                    rates: Some(r),
                    note: None,
                    totals: None,
                    aggregate: false,
                },
            ],
            notes: vec![],
        };
        let lines = frame.lines();
        let node = lines
            .iter()
            .find(|l| l.starts_with("node (2 agents)"))
            .unwrap();
        assert!(node.contains("2.0 KB/s"), "{node}");
        assert!(lines.iter().any(|l| l == "  a: backend 2.0"), "{lines:?}");
    }

    #[test]
    fn units() {
        assert_eq!(bytes_per_s(999.0), "999 B/s");
        assert_eq!(bytes_per_s(12_345_678.0), "12.3 MB/s");
        assert_eq!(micros(Some(150.0)), "150 us");
        assert_eq!(micros(Some(2500.0)), "2.5 ms");
        assert_eq!(micros(None), "-");
        assert_eq!(per_s(12345.0), "12.3k");
        assert_eq!((count(13.0), count(12345.0)), ("13".into(), "12.3k".into()));
        assert_eq!(percentile(Some(Quantile::AtMost(1000.0))).0, "<=1.0 ms");
        assert_eq!(percentile(Some(Quantile::Above(1e7))).0, ">10.00 s");
    }
}
