//! The Prometheus text exposition format 0.0.4: an encoder over agent snapshots, and a small
//! parser of the same format for tests and tools.
//!
//! Output, for every family of [`families`] that has at least one agent:
//! `# HELP` and `# TYPE` lines, then one sample per agent (twelve for `agent_errors_total`,
//! one per `status`; for a histogram the cumulative `_bucket{le}` lines ending with `+Inf`,
//! then `_sum` and `_count`). Labels: `agent_name`, `hostname`, then the workload labels when
//! configured ([`crate::labels`], in their configured order), then `le` or `status`. Values are integers printed as integers; `le` bounds are printed in their
//! shortest form (`10`, `2.5`, `1e-7`, `+Inf`). No timestamps. [`encode_rows_into`] is the
//! same encoder over rows that bring their own labels and family kinds (the multi-process
//! exporter's per-rank `pid`/`local_rank` series and counter-only node totals).
//!
//! OpenMetrics is deliberately not produced: OpenMetrics names a counter family without its
//! `_total` suffix, so NIXL's counter `agent_xfer_time_total` would become family
//! `agent_xfer_time`, colliding with NIXL's gauge of that name. Scrapers that ask for
//! OpenMetrics accept this format as a fallback.

use crate::engine::AgentSnapshot;
use crate::{families, FamilyKind};

/// The `Content-Type` of the text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Appends `value` to `out` escaped as a label value (`\` -> `\\`, `"` -> `\"`, newline ->
/// `\n`).
pub fn escape_label_value(value: &str, out: &mut String) {
    if !value.contains(['\\', '"', '\n']) {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends `help` escaped for a `# HELP` line (`\` -> `\\`, newline -> `\n`).
pub fn escape_help(help: &str, out: &mut String) {
    if !help.contains(['\\', '\n']) {
        out.push_str(help);
        return;
    }
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A histogram bound as an `le` value: integers without a fraction (`10`, `1000000`), other
/// numbers in the shorter of plain and exponent notation (`2.5`, `1e-7`), `+Inf`.
pub fn format_le(bound: f64) -> String {
    LeFormatter::default().format(bound).to_owned()
}

/// [`format_le`] for one bound after another without allocating for the usual integral bounds
/// (the encoders format every bucket of every histogram at every scrape).
#[derive(Default)]
pub struct LeFormatter {
    digits: itoa::Buffer,
    other: String,
}

impl LeFormatter {
    /// `bound` as [`format_le`] prints it.
    pub fn format(&mut self, bound: f64) -> &str {
        if bound == f64::INFINITY {
            return "+Inf";
        }
        if bound.fract() == 0.0 && bound.abs() < 1e15 {
            return self.digits.format(bound as i64);
        }
        let plain = format!("{bound}");
        let exp = format!("{bound:e}");
        self.other = if exp.len() < plain.len() { exp } else { plain };
        &self.other
    }
}

/// Encodes every agent's series (see the module documentation). No agents: empty output.
pub fn encode(agents: &[AgentSnapshot]) -> String {
    let mut out = String::with_capacity(agents.len() * 12 * 1024);
    encode_into(agents, &mut out);
    out
}

/// Like [`encode`], appending to `out`.
pub fn encode_into(agents: &[AgentSnapshot], out: &mut String) {
    with_agent_rows(agents, |rows| encode_rows_into(rows, out));
}

/// Calls `f` with one row per agent snapshot: its labels (`agent_name`, `hostname`, then its
/// workload labels) and every kind of series; the form both encoders take.
pub fn with_agent_rows<R>(agents: &[AgentSnapshot], f: impl FnOnce(&[Row]) -> R) -> R {
    let labels: Vec<Vec<(&str, &str)>> = agents
        .iter()
        .map(|a| {
            [("agent_name", &*a.agent_name), ("hostname", &*a.hostname)]
                .into_iter()
                .chain(a.labels.iter())
                .collect()
        })
        .collect();
    let rows: Vec<Row> = agents
        .iter()
        .zip(&labels)
        .map(|(snapshot, labels)| Row {
            snapshot,
            labels,
            kinds: &ALL_KINDS,
        })
        .collect();
    f(&rows)
}

/// Every family kind: an agent's series appear in all of them.
pub const ALL_KINDS: [FamilyKind; 3] = [
    FamilyKind::Counter,
    FamilyKind::Gauge,
    FamilyKind::Histogram,
];

/// One set of series for [`encode_rows_into`]: the values of `snapshot` (its own
/// `agent_name`/`hostname` fields are not used), labelled with `labels` in that order (`le` or
/// `status` follow them), in the families of the given `kinds` only (`agent_errors_total` is a
/// counter family).
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// The values.
    pub snapshot: &'a AgentSnapshot,
    /// Label names and (unescaped) values, in output order. Names must be valid label names.
    pub labels: &'a [(&'a str, &'a str)],
    /// The kinds of family this row appears in.
    pub kinds: &'a [FamilyKind],
}

/// Encodes rows of series with their own labels, in the order of [`families`] and, within a
/// family, of `rows`; a family without any row is left out, and no rows give empty output.
/// [`encode_into`] is this with the rows `agent_name`, `hostname` of every agent.
pub fn encode_rows_into(rows: &[Row], out: &mut String) {
    // `k="v",...`, escaped once per row.
    let labels: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut l = String::new();
            for (i, (name, value)) in r.labels.iter().enumerate() {
                if i > 0 {
                    l.push(',');
                }
                l.push_str(name);
                l.push_str("=\"");
                escape_label_value(value, &mut l);
                l.push('"');
            }
            l
        })
        .collect();
    for family in families() {
        if !rows.iter().any(|r| r.kinds.contains(&family.kind)) {
            continue;
        }
        out.push_str("# HELP ");
        out.push_str(family.name);
        out.push(' ');
        escape_help(family.help, out);
        out.push_str("\n# TYPE ");
        out.push_str(family.name);
        out.push(' ');
        out.push_str(family.kind.as_str());
        out.push('\n');
        let mut digits = itoa::Buffer::new();
        for (row, labels) in rows.iter().zip(&labels) {
            if !row.kinds.contains(&family.kind) {
                continue;
            }
            crate::for_each_sample(family, row.snapshot, |suffix, extra, value| {
                out.push_str(family.name);
                out.push_str(suffix);
                out.push('{');
                out.push_str(labels);
                if let Some((name, v)) = extra {
                    out.push(',');
                    out.push_str(name);
                    out.push_str("=\"");
                    out.push_str(v);
                    out.push('"');
                }
                out.push_str("} ");
                out.push_str(digits.format(value));
                out.push('\n');
            });
        }
    }
}

/// One parsed sample: metric name, labels in their order, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's metric name (`agent_xfer_time_us_bucket`, ...).
    pub name: String,
    /// Label names and (unescaped) values, in their order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the samples of a text-format 0.0.4 body: comment and blank lines are skipped, a
/// sample is `name{label="value",...} value [timestamp]` (the timestamp is ignored; values may
/// be `+Inf`, `-Inf` or `NaN`). Public API: the tests check the exporters' output with it and
/// `nixl-telemetry top` reads scrape endpoints with it. Any line it cannot read is an error
/// naming the line.
pub fn parse(body: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for (n, line) in body.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fail = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        let name_end = line.find(['{', ' ']).ok_or_else(|| fail("no value"))?;
        let name = &line[..name_end];
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(r) = rest.strip_prefix('{') {
            rest = r;
            loop {
                if let Some(r) = rest.strip_prefix('}') {
                    rest = r;
                    break;
                }
                let eq = rest.find("=\"").ok_or_else(|| fail("bad label"))?;
                let key = rest[..eq].to_owned();
                let mut value = String::new();
                let mut chars = rest[eq + 2..].char_indices();
                let end = loop {
                    match chars.next() {
                        None => return Err(fail("unterminated label value")),
                        Some((i, '"')) => break eq + 2 + i + 1,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c)) => value.push(c),
                            None => return Err(fail("dangling escape")),
                        },
                        Some((_, c)) => value.push(c),
                    }
                };
                labels.push((key, value));
                rest = &rest[end..];
                rest = rest.strip_prefix(',').unwrap_or(rest);
            }
        }
        // The value, then an optional timestamp.
        let mut fields = rest.split_ascii_whitespace();
        let value = fields.next().unwrap_or("");
        if let Some(timestamp) = fields.next() {
            if fields.next().is_some() || timestamp.parse::<i64>().is_err() {
                return Err(fail("bad timestamp"));
            }
        }
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| fail("bad value"))?,
        };
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentSeries, Buckets};
    use nixl_telemetry_base::event::{Event, EventType};
    use std::collections::BTreeSet;

    fn agent(name: &str) -> AgentSeries {
        AgentSeries::new(name, "node-1", Buckets::default())
    }

    #[test]
    fn a_new_agent_exposes_every_series_at_zero() {
        let text = encode(&[agent("a").snapshot()]);
        let samples = parse(&text).unwrap();
        assert!(samples.iter().all(|s| s.value == 0.0), "{text}");
        let names: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
        let mut expected: BTreeSet<String> = [
            "agent_tx_bytes_total",
            "agent_rx_bytes_total",
            "agent_tx_requests_num_total",
            "agent_rx_requests_num_total",
            "agent_memory_registered_total",
            "agent_memory_deregistered_total",
            "agent_xfer_time_total",
            "agent_xfer_post_time_total",
            "agent_telemetry_events_dropped_total",
            "agent_tx_last_bytes",
            "agent_rx_last_bytes",
            "agent_memory_registered_last_bytes",
            "agent_memory_deregistered_last_bytes",
            "agent_xfer_time",
            "agent_xfer_post_time",
            "agent_errors_total",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for h in ["agent_xfer_time_us", "agent_xfer_post_time_us"] {
            for s in ["_bucket", "_sum", "_count"] {
                expected.insert(format!("{h}{s}"));
            }
        }
        assert_eq!(
            names,
            expected.iter().map(String::as_str).collect::<BTreeSet<_>>()
        );
        // 15 plain samples + 12 error statuses + 2 x (19 buckets + sum + count).
        assert_eq!(samples.len(), 15 + 12 + 2 * 21);
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        assert_eq!(types.len(), 18);
        assert_eq!(types.iter().filter(|l| l.ends_with(" counter")).count(), 10);
        assert_eq!(types.iter().filter(|l| l.ends_with(" gauge")).count(), 6);
        assert_eq!(
            types.iter().filter(|l| l.ends_with(" histogram")).count(),
            2
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("# HELP")).count(), 18);
        assert!(!text.contains("agent_err_"), "legacy per-type error series");
    }

    #[test]
    fn exact_lines_for_known_values() {
        let a = AgentSeries::new("a", "h", Buckets::parse("10,100,250,1000").unwrap());
        let ev = |t, v| Event::new(t, v);
        a.apply(&[
            ev(EventType::AgentXferTime, 5),
            ev(EventType::AgentXferTime, 30),
            ev(EventType::AgentXferTime, 200),
            ev(EventType::AgentXferTime, 700),
            ev(EventType::AgentTxBytes, 1000),
            ev(EventType::AgentTxBytes, 2000),
            ev(EventType::AgentTxBytes, 3500),
            ev(EventType::AgentErrBackend, 1),
            ev(EventType::AgentTelemetryEventsDropped, 7),
            ev(EventType::AgentTelemetryEventsDropped, 5),
        ]);
        let text = encode(&[a.snapshot()]);
        for line in [
            "# HELP agent_tx_bytes_total Number of bytes sent by the agent",
            "# TYPE agent_tx_bytes_total counter",
            "agent_tx_bytes_total{agent_name=\"a\",hostname=\"h\"} 6500",
            "# TYPE agent_tx_last_bytes gauge",
            "agent_tx_last_bytes{agent_name=\"a\",hostname=\"h\"} 3500",
            "# TYPE agent_xfer_time_us histogram",
            "agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"10\"} 1",
            "agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"100\"} 2",
            "agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"250\"} 3",
            "agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"1000\"} 4",
            "agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"+Inf\"} 4",
            "agent_xfer_time_us_sum{agent_name=\"a\",hostname=\"h\"} 935",
            "agent_xfer_time_us_count{agent_name=\"a\",hostname=\"h\"} 4",
            "agent_xfer_time_total{agent_name=\"a\",hostname=\"h\"} 935",
            "agent_xfer_time{agent_name=\"a\",hostname=\"h\"} 700",
            "# TYPE agent_errors_total counter",
            "agent_errors_total{agent_name=\"a\",hostname=\"h\",status=\"backend\"} 1",
            "agent_errors_total{agent_name=\"a\",hostname=\"h\",status=\"no_telemetry\"} 0",
            "agent_telemetry_events_dropped_total{agent_name=\"a\",hostname=\"h\"} 12",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Buckets, then _sum, then _count, for each histogram.
        let pos = |s: &str| text.find(s).unwrap();
        assert!(pos("agent_xfer_time_us_bucket") < pos("agent_xfer_time_us_sum"));
        assert!(pos("agent_xfer_time_us_sum") < pos("agent_xfer_time_us_count"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn label_values_are_escaped() {
        let a = AgentSeries::new("we\"ird\\na\nme", "h\"ost", Buckets::default());
        let text = encode(&[a.snapshot()]);
        assert!(
            text.contains(
                "agent_tx_bytes_total{agent_name=\"we\\\"ird\\\\na\\nme\",hostname=\"h\\\"ost\"} 0"
            ),
            "{text}"
        );
        // Every sample line is a single line, and the parser recovers the original values.
        let samples = parse(&text).unwrap();
        assert!(samples
            .iter()
            .all(|s| s.label("agent_name") == Some("we\"ird\\na\nme")
                && s.label("hostname") == Some("h\"ost")));
        let mut help = String::new();
        escape_help("a\\b\nc\"", &mut help);
        assert_eq!(help, "a\\\\b\\nc\"");
    }

    #[test]
    fn workload_labels_follow_the_agent_labels_escaped() {
        let labels = crate::WorkloadLabels::from_pairs(vec![
            ("slurm_job_id".into(), "42".into()),
            ("team".into(), "a\"b\\c".into()),
        ])
        .unwrap();
        let a = AgentSeries::new("a", "h", Buckets::parse("10").unwrap()).with_labels(labels);
        let text = encode(&[a.snapshot()]);
        let with = "agent_name=\"a\",hostname=\"h\",slurm_job_id=\"42\",team=\"a\\\"b\\\\c\"";
        assert!(
            text.contains(&format!("agent_tx_bytes_total{{{with}}} 0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "agent_xfer_time_us_bucket{{{with},le=\"+Inf\"}} 0\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "agent_errors_total{{{with},status=\"backend\"}} 0\n"
            )),
            "{text}"
        );
        let samples = parse(&text).unwrap();
        assert!(samples
            .iter()
            .all(|s| s.label("team") == Some("a\"b\\c") && s.label("slurm_job_id") == Some("42")));
    }

    #[test]
    fn bounds_are_formatted_canonically() {
        let cases = [
            (10.0, "10"),
            (2.5, "2.5"),
            (1000000.0, "1000000"),
            (10000000.0, "10000000"),
            (0.1, "0.1"),
            (1e-7, "1e-7"),
            (1e21, "1e21"),
            (123.456, "123.456"),
            (f64::INFINITY, "+Inf"),
        ];
        let mut formatter = LeFormatter::default();
        for (b, s) in cases {
            assert_eq!(format_le(b), s);
            assert_eq!(formatter.format(b), s);
            if b.is_finite() {
                assert_eq!(s.parse::<f64>().unwrap(), b);
            }
        }
    }

    #[test]
    fn two_agents_each_get_their_series_and_no_agents_nothing() {
        let a = agent("a");
        let b = agent("b");
        b.observe(Event::new(EventType::AgentRxBytes, 9));
        let samples = parse(&encode(&[a.snapshot(), b.snapshot()])).unwrap();
        let rx: Vec<(String, f64)> = samples
            .iter()
            .filter(|s| s.name == "agent_rx_bytes_total")
            .map(|s| (s.label("agent_name").unwrap().to_owned(), s.value))
            .collect();
        assert_eq!(rx, [("a".to_owned(), 0.0), ("b".to_owned(), 9.0)]);
        assert_eq!(samples.len(), 2 * (15 + 12 + 42));
        assert_eq!(encode(&[]), "");
    }

    #[test]
    fn rows_carry_their_own_labels_and_kinds() {
        let a = agent("a");
        a.apply(&[
            Event::new(EventType::AgentTxBytes, 5),
            Event::new(EventType::AgentXferTime, 30),
        ]);
        let snap = a.snapshot();
        let rank = [("hostname", "h"), ("agent_name", "a"), ("pid", "7")];
        let total = [("hostname", "h"), ("agent_name", "a")];
        let mut text = String::new();
        encode_rows_into(
            &[
                Row {
                    snapshot: &snap,
                    labels: &rank,
                    kinds: &ALL_KINDS,
                },
                Row {
                    snapshot: &snap,
                    labels: &total,
                    kinds: &[FamilyKind::Counter],
                },
            ],
            &mut text,
        );
        for line in [
            "agent_tx_bytes_total{hostname=\"h\",agent_name=\"a\",pid=\"7\"} 5",
            "agent_tx_bytes_total{hostname=\"h\",agent_name=\"a\"} 5",
            "agent_tx_last_bytes{hostname=\"h\",agent_name=\"a\",pid=\"7\"} 5",
            "agent_xfer_time_us_bucket{hostname=\"h\",agent_name=\"a\",pid=\"7\",le=\"50\"} 1",
            "agent_errors_total{hostname=\"h\",agent_name=\"a\",status=\"backend\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // The counter-only row is in no gauge or histogram family.
        let samples = parse(&text).unwrap();
        let of_total = |name: &str| {
            samples
                .iter()
                .filter(|s| s.name == name && s.label("pid").is_none())
                .count()
        };
        assert_eq!(of_total("agent_tx_last_bytes"), 0);
        assert_eq!(of_total("agent_xfer_time_us_count"), 0);
        assert_eq!(of_total("agent_errors_total"), 12);
        // A family no row appears in is left out entirely.
        let mut only_counters = String::new();
        encode_rows_into(
            &[Row {
                snapshot: &snap,
                labels: &total,
                kinds: &[FamilyKind::Counter],
            }],
            &mut only_counters,
        );
        assert!(!only_counters.contains("# TYPE agent_tx_last_bytes"));
        assert!(!only_counters.contains("histogram"));
        // Agents encode exactly as rows labelled agent_name, hostname.
        let names = [("agent_name", "a"), ("hostname", "node-1")];
        let mut as_rows = String::new();
        encode_rows_into(
            &[Row {
                snapshot: &snap,
                labels: &names,
                kinds: &ALL_KINDS,
            }],
            &mut as_rows,
        );
        assert_eq!(as_rows, encode(std::slice::from_ref(&snap)));
    }

    #[test]
    fn the_parser_rejects_garbage() {
        assert!(parse("x{a=\"1} 2").is_err());
        assert!(parse("x 1 2 zz").is_err());
        assert!(parse("novalue").is_err());
        assert_eq!(parse("# only a comment\n\n").unwrap(), []);
        let s = parse("x{le=\"+Inf\"} +Inf").unwrap();
        assert_eq!(s[0].value, f64::INFINITY);
    }

    #[test]
    fn parse_reads_other_endpoints_samples_too() {
        let body = "# HELP x A thing\n\nx_total{a=\"1\",b=\"q\\\"x\"} 3 1700000000000\n\
                    y NaN\nz{le=\"+Inf\"} +Inf\n";
        let samples = parse(body).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].value, 3.0);
        assert_eq!(samples[0].label("b"), Some("q\"x"));
        assert!(samples[1].value.is_nan());
        assert_eq!(samples[2].value, f64::INFINITY);
        for bad in ["x 1 2 3", "x 1 soon", "x{a=\"1\" 2", "x"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
