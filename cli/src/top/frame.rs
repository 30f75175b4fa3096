//! The rendering of `top`: one screen (a [`Frame`]) as plain lines: the table of agents with
//! their rates, the node total, errors by status and notes.

use nixl_telemetry_core::EventType;

use crate::top::rates::{Dist, Quantile, Rates};

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
    /// The screen's width in columns: the table keeps the columns that fit (see
    /// [`COLUMNS`]); `None` shows them all.
    pub width: Option<usize>,
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

/// `v` with three significant digits (`123`, `12.3`, `1.23`), for `v` below 1000.
fn three_digits(v: f64) -> String {
    match v {
        v if v >= 99.95 => format!("{v:.0}"),
        v if v >= 9.995 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

/// `v` in the largest of `units` (each 1000 times the one before) that keeps it at least 1,
/// with three significant digits (`1.23 ms`, `12.3 MB`).
fn scaled(v: f64, units: &[&str]) -> String {
    let mut v = v;
    let mut unit = 0;
    // 999.95 would round to "1000": the next unit's "1.00" reads better.
    while v >= 999.5 && unit + 1 < units.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{} {}", three_digits(v), units[unit])
}

/// A duration in microseconds, in us, ms or s with three significant digits.
fn micros(v: f64) -> String {
    scaled(v, &["us", "ms", "s"])
}

/// A size in bytes with a decimal unit and three significant digits (`4.10 KB`).
fn size(v: f64) -> String {
    scaled(v, &["B", "KB", "MB", "GB", "TB"])
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

/// A percentile in `unit`: a value, or the bound of the histogram bucket holding it
/// (`<=1.00 ms`, or `>10.0 s` for the overflow bucket); `-` for none. The second element
/// says whether it is a bucket.
fn percentile(q: Option<Quantile>, unit: fn(f64) -> String) -> (String, bool) {
    match q {
        None => ("-".into(), false),
        Some(Quantile::Interpolated(v)) => (unit(v), false),
        Some(Quantile::AtMost(b)) => (format!("<={}", unit(b)), true),
        Some(Quantile::Above(b)) => (format!(">{}", unit(b)), true),
    }
}

/// The line under the table explaining a row marked `(sum)`.
pub const SUM_LEGEND: &str = "(sum): a total its exporter adds beside the series it sums (those \
whose labels include its labels): prometheus_mp's node total, named \"all agents\" as it sums \
agents of every name; shown, not added into the node row";

/// The line under the table explaining `<=` and `>` percentiles.
pub const BUCKET_LEGEND: &str = "<=x, >x: the percentile lies in the histogram bucket ending at \
x (or above the last bound): this scrape has classic buckets only (the prometheus exporter \
serves native histograms with NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true)";

/// How a row's numbers read: rates of the last interval, or totals so far.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    Rates,
    Totals,
}

/// One column of the table after the agent's name: header, width, and its rank among the
/// columns kept as the screen narrows (0 is kept first).
struct Column {
    header: &'static str,
    width: usize,
    keep: u8,
}

/// The columns after the agent's name, in display order. From 80 columns on, the TX and RX
/// rates and the transfer-time p50/p90/p99 are shown, then (in this order, as the screen
/// widens) the size p50, p99 and p90, errors, the request rates, the post-time p50 and drops.
const COLUMNS: [Column; 13] = [
    Column {
        header: "TX",
        width: 11,
        keep: 0,
    },
    Column {
        header: "RX",
        width: 11,
        keep: 1,
    },
    Column {
        header: "TX req",
        width: 9,
        keep: 9,
    },
    Column {
        header: "RX req",
        width: 9,
        keep: 10,
    },
    Column {
        header: "xfer p50",
        width: 9,
        keep: 2,
    },
    Column {
        header: "xfer p90",
        width: 9,
        keep: 4,
    },
    Column {
        header: "xfer p99",
        width: 9,
        keep: 3,
    },
    Column {
        header: "size p50",
        width: 9,
        keep: 5,
    },
    Column {
        header: "size p90",
        width: 9,
        keep: 7,
    },
    Column {
        header: "size p99",
        width: 9,
        keep: 6,
    },
    Column {
        header: "post p50",
        width: 9,
        keep: 11,
    },
    Column {
        header: "errors",
        width: 7,
        keep: 8,
    },
    Column {
        header: "drops",
        width: 8,
        keep: 12,
    },
];

/// The columns of ranks below this one are kept however narrow the screen: the rates and the
/// transfer-time p50.
const ALWAYS_KEPT: u8 = 3;

/// The narrowest name column.
const MIN_NAME: usize = 12;

/// The name column's width for names at most `longest` wide: all of it, but on a screen
/// `width` wide at most what the columns always kept leave (at least [`MIN_NAME`]).
fn name_width(longest: usize, width: Option<usize>) -> usize {
    let kept: usize = COLUMNS
        .iter()
        .filter(|c| c.keep < ALWAYS_KEPT)
        .map(|c| 1 + c.width)
        .sum();
    match width {
        None => longest.max(MIN_NAME),
        Some(w) => longest.min(w.saturating_sub(kept)).max(MIN_NAME),
    }
}

/// `name` in `width` columns: whole when it fits, else its start and end around `…` (an agent
/// name comes first, the labels that tell ranks apart, such as `pid`, last).
fn fit_name(name: &str, width: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= width {
        return name.to_owned();
    }
    let tail = width.saturating_sub(1) / 2;
    let head = width.saturating_sub(1) - tail;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// `text` as lines starting with `indent`, broken between words so that each fits in `width`
/// (a word longer than that alone on its line); one line without a width.
fn wrapped(text: &str, indent: &str, width: Option<usize>) -> Vec<String> {
    let Some(width) = width else {
        return vec![format!("{indent}{text}")];
    };
    let mut lines = Vec::new();
    let mut current = indent.to_owned();
    for word in text.split(' ') {
        let used = current.chars().count();
        if used > indent.len() && used + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut current, indent.to_owned()));
        }
        if current.len() > indent.len() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(current);
    lines
}

/// `line` with `note` after it when both fit in `width` (always without a width); else `line`,
/// then the note on lines of its own, indented by two columns and wrapped at `width`.
fn with_note(line: String, note: Option<&str>, width: Option<usize>) -> Vec<String> {
    let Some(note) = note else {
        return vec![line];
    };
    let inline = line.chars().count() + 2 + note.chars().count();
    if width.is_some_and(|w| inline > w) {
        let mut lines = vec![line];
        lines.extend(wrapped(note, "  ", width));
        return lines;
    }
    vec![format!("{line}  {note}")]
}

/// Which of [`COLUMNS`] fit in `width` screen columns after a name `name_width` wide (all of
/// them without a width), keeping them by rank; at least the first [`ALWAYS_KEPT`] ranks.
fn fitting(name_width: usize, width: Option<usize>) -> [bool; COLUMNS.len()] {
    let Some(width) = width else {
        return [true; COLUMNS.len()];
    };
    let mut shown = [false; COLUMNS.len()];
    let mut used = name_width;
    for rank in 0..COLUMNS.len() as u8 {
        let i = COLUMNS
            .iter()
            .position(|c| c.keep == rank)
            .expect("every rank");
        if used + 1 + COLUMNS[i].width > width && rank >= ALWAYS_KEPT {
            break;
        }
        used += 1 + COLUMNS[i].width;
        shown[i] = true;
    }
    shown
}

impl Frame {
    /// The frame's lines (without escapes), the table cut to the columns that fit in
    /// [`Frame::width`]: the name column as wide as the longest name, but narrower when the
    /// screen is (names are then shortened in the middle); a row's note after its numbers when
    /// it fits, else on lines of its own below the row.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.title.clone(), String::new()];
        // The node row's name counts too, so that its numbers line up with the others'.
        let node_name = format!(
            "node ({} agents)",
            self.rows.iter().filter(|r| !r.aggregate).count()
        );
        let longest = self
            .rows
            .iter()
            .map(|r| r.name.chars().count() + if r.aggregate { " (sum)".len() } else { 0 })
            .chain((self.rows.len() > 1).then(|| node_name.chars().count()))
            .max()
            .unwrap_or(0);
        let width = name_width(longest, self.width);
        let shown = fitting(width, self.width);
        let line_of = |name: &str, cells: &[String]| {
            let name = fit_name(name, width);
            let mut line = format!("{name:<width$}");
            for ((c, cell), show) in COLUMNS.iter().zip(cells).zip(shown) {
                if show {
                    line.push_str(&format!(" {cell:>w$}", w = c.width));
                }
            }
            line
        };
        let headers: Vec<String> = COLUMNS.iter().map(|c| c.header.to_owned()).collect();
        lines.push(line_of("AGENT", &headers));
        let mut node: Option<Rates> = None;
        let mut counted = 0;
        let mut error_lines = Vec::new();
        let mut bucketed = false;
        let mut row_lines = |name: &str, rates: Option<&Rates>, note: Option<&str>, how| {
            let Some(r) = rates else {
                let name = fit_name(name, width);
                return vec![format!("{name:<width$} {}", note.unwrap_or("-"))];
            };
            let p = |t: EventType| r.per_s[t as usize];
            let amount = |v: f64| match how {
                Shown::Rates => bytes_per_s(v),
                Shown::Totals => bytes(v),
            };
            // Rates say `/s`, totals do not: the headers name the quantity, the cells its unit.
            let number = |v: f64| match how {
                Shown::Rates => format!("{}/s", per_s(v)),
                Shown::Totals => count(v),
            };
            let mut quantile = |d: &Dist, q: f64, unit: fn(f64) -> String| {
                let (text, bucket) = percentile(d.quantile(q), unit);
                bucketed |= bucket;
                text
            };
            let cells = [
                amount(p(EventType::AgentTxBytes)),
                amount(p(EventType::AgentRxBytes)),
                number(p(EventType::AgentTxRequestsNum)),
                number(p(EventType::AgentRxRequestsNum)),
                quantile(&r.xfer, 0.5, micros),
                quantile(&r.xfer, 0.9, micros),
                quantile(&r.xfer, 0.99, micros),
                quantile(&r.size, 0.5, size),
                quantile(&r.size, 0.9, size),
                quantile(&r.size, 0.99, size),
                quantile(&r.post, 0.5, micros),
                number(r.errors()),
                number(p(EventType::AgentTelemetryEventsDropped)),
            ];
            with_note(line_of(name, &cells), note, self.width)
        };
        let mut node_totals: Option<Rates> = None;
        for row in &self.rows {
            let shown = if row.aggregate {
                format!("{} (sum)", row.name)
            } else {
                row.name.clone()
            };
            match &row.totals {
                Some(t) => lines.extend(row_lines(
                    &shown,
                    Some(t),
                    row.note.as_deref(),
                    Shown::Totals,
                )),
                None => lines.extend(row_lines(
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
                Some(t) => lines.extend(row_lines(
                    &name,
                    Some(&t),
                    Some("idle: totals"),
                    Shown::Totals,
                )),
                None => lines.extend(row_lines(&name, node.as_ref(), None, Shown::Rates)),
            }
        }
        let summed = self.rows.iter().any(|r| r.aggregate);
        if bucketed || summed {
            lines.push(String::new());
        }
        if bucketed {
            lines.extend(wrapped(BUCKET_LEGEND, "", self.width));
        }
        if summed {
            lines.extend(wrapped(SUM_LEGEND, "", self.width));
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
    use crate::top::rates::{two_scrapes, Observed};
    use nixl_telemetry_core::Event;
    use nixl_telemetry_series::native::NativeHistogram;

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
            width: None,
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
        assert_eq!(micros(150.0), "150 us");
        assert_eq!(micros(2500.0), "2.50 ms");
        assert_eq!(micros(12.345), "12.3 us");
        assert_eq!(micros(999.7), "1.00 ms");
        assert_eq!(micros(123_456_789.0), "123 s");
        assert_eq!(size(4100.0), "4.10 KB");
        assert_eq!(size(512.0), "512 B");
        assert_eq!(size(16_777_216.0), "16.8 MB");
        assert_eq!(per_s(12345.0), "12.3k");
        assert_eq!((count(13.0), count(12345.0)), ("13".into(), "12.3k".into()));
        assert_eq!(
            percentile(Some(Quantile::AtMost(1000.0)), micros).0,
            "<=1.00 ms"
        );
        assert_eq!(percentile(Some(Quantile::Above(1e7)), micros).0, ">10.0 s");
        assert_eq!(
            percentile(Some(Quantile::Interpolated(1234.0)), size).0,
            "1.23 KB"
        );
        assert_eq!(percentile(None, size).0, "-");
    }

    /// A row named `name` with rates of `events`.
    fn row(name: &str, events: &[Event]) -> Row {
        let mut seen = Observed::default();
        events.iter().for_each(|e| seen.add(e));
        Row {
            name: name.into(),
            rates: Some(Rates::from_events(&seen, 1.0)),
            note: None,
            totals: None,
            aggregate: false,
        }
    }

    #[test]
    fn percentiles_of_ranks_and_of_the_node_from_merged_histograms() {
        let slow: Vec<Event> = (0..10)
            .flat_map(|_| {
                [
                    Event::new(EventType::AgentXferTime, 50_000),
                    Event::new(EventType::AgentTxBytes, 1 << 20),
                ]
            })
            .collect();
        let fast: Vec<Event> = (0..30)
            .flat_map(|_| {
                [
                    Event::new(EventType::AgentXferTime, 100),
                    Event::new(EventType::AgentRxBytes, 4000),
                ]
            })
            .collect();
        let frame = Frame {
            title: "t".into(),
            rows: vec![row("slow", &slow), row("fast", &fast)],
            notes: vec![],
            width: None,
        };
        let lines = frame.lines();
        let header = lines.iter().find(|l| l.starts_with("AGENT")).unwrap();
        let cell = |row: &str, column: &str| {
            let line = lines.iter().find(|l| l.starts_with(row)).unwrap();
            let end = header.find(column).unwrap() + column.len();
            line[end - 9..end].trim().to_owned()
        };
        // One value per rank: PromQL's interpolation puts the p50 of 10 equal observations
        // halfway through their bucket, the p90 at 9/10 of it.
        let time = |q: f64, v: u64| {
            let mut h = NativeHistogram::default();
            (0..10).for_each(|_| h.observe(v));
            micros(h.histogram_quantile(q).unwrap())
        };
        assert_eq!(cell("slow", "xfer p50"), time(0.5, 50_000));
        assert_eq!(cell("slow", "xfer p90"), time(0.9, 50_000));
        assert_eq!(cell("fast", "xfer p99"), time(0.99, 100));
        let mut fast_sizes = NativeHistogram::default();
        (0..30).for_each(|_| fast_sizes.observe(4000));
        let fast_p50 = fast_sizes.histogram_quantile(0.5).unwrap();
        assert_eq!(cell("fast", "size p50"), size(fast_p50));
        assert!((fast_p50 - 4000.0).abs() / 4000.0 < 0.0905, "{fast_p50}");
        // The node's p50 is among the fast transfers (3 of 4), not an average of the ranks'.
        let node_p50 = cell("node (2 agents)", "xfer p50");
        assert!(node_p50.ends_with(" us"), "{node_p50}");
        let mut union = NativeHistogram::default();
        (0..10).for_each(|_| union.observe(50_000));
        (0..30).for_each(|_| union.observe(100));
        for (q, column) in [(0.5, "xfer p50"), (0.9, "xfer p90"), (0.99, "xfer p99")] {
            let expected = micros(union.histogram_quantile(q).unwrap());
            assert_eq!(cell("node (2 agents)", column), expected, "{column}");
        }
        // Sizes: TX and RX requests together.
        let mut sizes = NativeHistogram::default();
        (0..10).for_each(|_| sizes.observe(1 << 20));
        (0..30).for_each(|_| sizes.observe(4000));
        assert_eq!(
            cell("node (2 agents)", "size p90"),
            size(sizes.histogram_quantile(0.9).unwrap())
        );
        assert!(!lines.iter().any(|l| l == BUCKET_LEGEND));
    }

    /// Two idle ranks with 66-character names (a `prometheus_mp` page's labels), the page's node
    /// total and the idle note of a scrape: at 200 columns every column, the names whole and the
    /// note whole (below its row); narrower, the first columns, the names shortened in the
    /// middle, the note and the legend wrapped; every line within the width.
    #[test]
    fn long_names_and_idle_notes_fit_the_screen() {
        let names = [
            "prefill pid=1234567 agent_instance=0 local_rank=0 slurm_job_id=100",
            "prefill pid=1234568 agent_instance=0 local_rank=1 slurm_job_id=100",
        ];
        assert_eq!(names[0].chars().count(), 66);
        let note = "idle for 12.3 s: totals since the exporter started";
        let idle = |name: &str, aggregate| Row {
            note: Some(note.into()),
            totals: row(name, &[Event::new(EventType::AgentTxBytes, 1 << 20)]).rates,
            rates: Some(Rates::from_events(&Observed::default(), 1.0)),
            aggregate,
            name: name.into(),
        };
        let frame = |width| Frame {
            title: "t".into(),
            rows: vec![
                idle(names[0], false),
                idle(names[1], false),
                idle("all agents slurm_job_id=100", true),
            ],
            notes: vec![],
            width,
        };
        let words = |lines: &[String]| {
            lines
                .join(" ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        for width in [None, Some(200), Some(120), Some(80), Some(50)] {
            let lines = frame(width).lines();
            if let Some(w) = width {
                for l in &lines {
                    assert!(l.chars().count() <= w, "{w}: {l:?}");
                }
            }
            // Each row's note, whole, on its row or below it.
            assert_eq!(
                words(&lines).matches(note).count(),
                3,
                "{width:?}: {lines:#?}"
            );
            assert!(words(&lines).contains(&words(&[SUM_LEGEND.to_owned()])));
            let header = &lines[2];
            let kept = COLUMNS.iter().filter(|c| header.contains(c.header)).count();
            let name_shown = fit_name(names[0], name_width(66, width));
            let rank = lines.iter().find(|l| l.starts_with(&name_shown)).unwrap();
            match width {
                None => {
                    assert_eq!(kept, COLUMNS.len());
                    assert!(rank.starts_with(names[0]) && rank.ends_with(note), "{rank}");
                }
                Some(200) => {
                    assert_eq!(kept, COLUMNS.len(), "{header}");
                    assert!(
                        rank.starts_with(names[0]) && !rank.contains("idle"),
                        "{rank}"
                    );
                    assert!(
                        lines.iter().any(|l| l == &format!("  {note}")),
                        "{lines:#?}"
                    );
                    assert!(lines
                        .iter()
                        .any(|l| l.starts_with("all agents slurm_job_id=100 (sum) ")));
                }
                Some(w) => {
                    // 120 columns keep the names whole; 80 and 50 shorten them.
                    assert_eq!(
                        name_shown.contains('…') && name_shown.ends_with("id=100"),
                        w < 100,
                        "{w}: {name_shown}"
                    );
                    assert!(kept >= usize::from(ALWAYS_KEPT), "{w}: {header}");
                    assert!(header.contains("xfer p50"), "{w}: {header}");
                }
            }
        }
    }

    #[test]
    fn names_are_shortened_in_the_middle_and_text_wrapped_between_words() {
        assert_eq!(fit_name("rank-0", 12), "rank-0");
        assert_eq!(fit_name("abcdefghijkl", 7), "abc…jkl");
        assert_eq!(fit_name("abcdefghijkl", 6).chars().count(), 6);
        assert_eq!(
            wrapped("one two three four", "  ", Some(11)),
            ["  one two", "  three", "  four"]
        );
        assert_eq!(
            wrapped("a verylongword b", "", Some(5)),
            ["a", "verylongword", "b"]
        );
        assert_eq!(wrapped("x y", "  ", None), ["  x y"]);
    }

    #[test]
    fn narrow_screens_keep_the_rates_and_transfer_time_percentiles() {
        let frame = |width| Frame {
            title: "t".into(),
            rows: vec![row("rank-0", &[Event::new(EventType::AgentXferTime, 9)])],
            notes: vec![],
            width,
        };
        let header = |width| frame(width).lines()[2].clone();
        let all = header(None);
        for h in COLUMNS.iter().map(|c| c.header) {
            assert!(all.contains(h), "{all}");
        }
        let at_80 = header(Some(80));
        assert!(at_80.chars().count() <= 80, "{at_80}");
        assert_eq!(
            at_80.split_whitespace().collect::<Vec<_>>().join(" "),
            "AGENT TX RX xfer p50 xfer p90 xfer p99 size p50"
        );
        let at_100 = header(Some(100));
        assert!(at_100.ends_with("size p50  size p90  size p99"), "{at_100}");
        assert_eq!(header(Some(150)), all);
        assert!(all.chars().count() <= 150, "{all}");
        // Never fewer than the rates and the median.
        assert!(header(Some(20)).ends_with("xfer p50"));
        // Rows have the header's columns.
        let lines = frame(Some(80)).lines();
        assert!(lines[3].chars().count() <= 80, "{}", lines[3]);
    }
}
