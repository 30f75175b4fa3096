//! The rendering of `top`: one screen (a [`Frame`]) as plain lines: the table of agents with
//! their rates, the node total, errors by status and notes.

use nixl_telemetry::EventType;

use crate::top::rates::Rates;

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// The agent (and the labels telling its series apart).
    pub name: String,
    /// Its rates; `None` before the first full interval or while it cannot be read.
    pub rates: Option<Rates>,
    /// Why it shows no rates, or a warning.
    pub note: Option<String>,
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
    let units = ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"];
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

impl Frame {
    /// The frame's lines (without escapes).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.title.clone(), String::new()];
        let width = self
            .rows
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(0)
            .clamp(12, 40);
        lines.push(format!(
            "{:<width$} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
            "AGENT",
            "TX",
            "RX",
            "TX req/s",
            "RX req/s",
            "xfer p50",
            "xfer p99",
            "post p50",
            "err/s",
            "drops/s"
        ));
        let mut node: Option<Rates> = None;
        let mut counted = 0;
        let mut error_lines = Vec::new();
        let row_line = |name: &str, rates: Option<&Rates>, note: Option<&str>| {
            let Some(r) = rates else {
                return format!("{name:<width$} {}", note.unwrap_or("-"));
            };
            let p = |t: EventType| r.per_s[t as usize];
            let mut line = format!(
                "{name:<width$} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
                bytes_per_s(p(EventType::AgentTxBytes)),
                bytes_per_s(p(EventType::AgentRxBytes)),
                per_s(p(EventType::AgentTxRequestsNum)),
                per_s(p(EventType::AgentRxRequestsNum)),
                micros(r.xfer.quantile(0.5)),
                micros(r.xfer.quantile(0.99)),
                micros(r.post.quantile(0.5)),
                per_s(r.errors()),
                per_s(p(EventType::AgentTelemetryEventsDropped)),
            );
            if let Some(note) = note {
                line.push_str("  ");
                line.push_str(note);
            }
            line
        };
        for row in &self.rows {
            let shown = if row.aggregate {
                format!("{} (sum)", row.name)
            } else {
                row.name.clone()
            };
            lines.push(row_line(&shown, row.rates.as_ref(), row.note.as_deref()));
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
            }
        }
        if self.rows.len() > 1 {
            let name = format!("node ({counted} agents)");
            lines.push(row_line(&name, node.as_ref(), None));
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
                    aggregate: false,
                },
                Row {
                    name: "b".into(),
                    rates: Some(r),
                    note: None,
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
    }
}
