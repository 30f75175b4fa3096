//! The Prometheus protobuf exposition format: length-delimited `io.prometheus.client.MetricFamily`
//! messages, the only scrape format that carries native histograms.
//!
//! The messages are declared for prost from Prometheus's `metrics.proto` (client_model), with
//! its field numbers; only the fields this exporter fills are declared (a decoder skips what
//! it does not know, and fields left out are absent on the wire). No maintained crate offers
//! these definitions for prost: the `prometheus` crate generates them with rust-protobuf, and
//! `prometheus-client`'s protobuf is OpenMetrics' data model, which Prometheus does not scrape.
//!
//! The families, labels and values are the text format's ([`crate::text`]), in the same order;
//! with native histograms on, the transfer-time histograms carry their native buckets beside
//! the classic ones (Prometheus 2.42 with `--enable-feature=native-histograms` keeps the native
//! ones; later versions can keep both with `scrape_classic_histograms`), and the families of
//! [`crate::NATIVE_SIZE_FAMILIES`] follow `agent_errors_total`.

use crate::engine::AgentSnapshot;
use crate::native::{NativeHistogram, ZERO_THRESHOLD};
use crate::text::Row;
use crate::{families, FamilyKind, FamilySource, NATIVE_SIZE_FAMILIES};

/// The `Content-Type` of the protobuf exposition (and what a scraper's `Accept` names).
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// `io.prometheus.client.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `io.prometheus.client.Gauge`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Counter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Counter {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Bucket`: a classic bucket.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    /// Observations at or below `upper_bound`.
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    /// The bound (`le`).
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
}

/// `io.prometheus.client.BucketSpan`: consecutive native buckets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    /// Gap from the previous span's end (the first span: the index of its first bucket).
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    /// Buckets in the span.
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// `io.prometheus.client.Histogram`: classic buckets and, for a native histogram, the schema,
/// zero bucket and positive spans with their count deltas.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    /// Observations.
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    /// Their sum.
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    /// Classic buckets (without `+Inf`).
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    /// Native: the schema.
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    /// Native: the zero bucket's threshold (non-zero marks the histogram native).
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    /// Native: observations in the zero bucket.
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    /// Native: spans of positive buckets.
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Native: positive bucket counts, each as the delta from the previous one.
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

impl Histogram {
    /// Whether it carries a native histogram (client_golang's test: a zero threshold, a zero
    /// count or spans; a classic-only histogram has none of them).
    pub fn is_native(&self) -> bool {
        self.zero_threshold != 0.0 || self.zero_count != 0 || !self.positive_span.is_empty()
    }

    /// Its native histogram (positive buckets: NIXL's values are never negative), if it
    /// carries one; an error for a malformed one.
    pub fn native(&self) -> Option<Result<NativeHistogram, String>> {
        self.is_native().then(|| {
            let spans: Vec<(i32, u32)> = self
                .positive_span
                .iter()
                .map(|s| (s.offset, s.length))
                .collect();
            NativeHistogram::from_sparse(
                self.schema,
                self.zero_count,
                self.sample_count,
                self.sample_sum.max(0.0) as u64,
                &spans,
                &self.positive_delta,
            )
        })
    }
}

/// `io.prometheus.client.Metric`: labels and one value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    /// The labels.
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    /// A gauge's value.
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    /// A counter's value.
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    /// A histogram's value.
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

/// `io.prometheus.client.MetricType` values used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    /// A counter.
    Counter = 0,
    /// A gauge.
    Gauge = 1,
    /// A histogram (classic, native or both).
    Histogram = 4,
}

/// `io.prometheus.client.MetricFamily`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    /// The family name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// HELP text.
    #[prost(string, tag = "2")]
    pub help: String,
    /// The type.
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    /// One metric per series.
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

/// `h`'s native fields set on `out`, with its own count and sum (a reader checks the count
/// against the native buckets, whatever the classic ones say).
fn set_native(out: &mut Histogram, h: &NativeHistogram) {
    let (spans, deltas) = h.spans_and_deltas();
    (out.sample_count, out.sample_sum) = (h.count(), h.sum() as f64);
    out.schema = i32::from(h.schema());
    out.zero_threshold = ZERO_THRESHOLD;
    out.zero_count = h.zero_count();
    out.positive_span = spans
        .into_iter()
        .map(|(offset, length)| BucketSpan { offset, length })
        .collect();
    out.positive_delta = deltas;
}

/// Every agent's families as messages, in the text format's order (then the size families when
/// any agent keeps native histograms): [`families_of_rows`] with the rows `agent_name`,
/// `hostname` (and the workload labels) of every agent, as [`crate::text::encode`] has them.
pub fn families_of(agents: &[AgentSnapshot]) -> Vec<MetricFamily> {
    crate::text::with_agent_rows(agents, families_of_rows)
}

/// Rows of series with their own labels and family kinds (the multi-process exporter's
/// per-rank series and node totals) as messages: the families of
/// [`crate::text::encode_rows_into`], in its order (a family without any row left out), then
/// the size families of the rows that are in histogram families and keep native histograms.
pub fn families_of_rows(rows: &[Row]) -> Vec<MetricFamily> {
    let labels: Vec<Vec<LabelPair>> = rows
        .iter()
        .map(|r| {
            r.labels
                .iter()
                .map(|&(n, v)| LabelPair {
                    name: n.to_owned(),
                    value: v.to_owned(),
                })
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    for family in families() {
        let mut f = MetricFamily {
            name: family.name.to_owned(),
            help: family.help.to_owned(),
            r#type: match family.kind {
                FamilyKind::Counter => MetricType::Counter,
                FamilyKind::Gauge => MetricType::Gauge,
                FamilyKind::Histogram => MetricType::Histogram,
            } as i32,
            metric: Vec::new(),
        };
        for (row, labels) in rows.iter().zip(&labels) {
            if !row.kinds.contains(&family.kind) {
                continue;
            }
            let agent = row.snapshot;
            let plain = |value: u64| Metric {
                label: labels.clone(),
                counter: (family.kind == FamilyKind::Counter).then_some(Counter {
                    value: value as f64,
                }),
                gauge: (family.kind == FamilyKind::Gauge).then_some(Gauge {
                    value: value as f64,
                }),
                histogram: None,
            };
            match family.source {
                FamilySource::Counter(t) => f.metric.push(plain(agent.counters[t as usize])),
                FamilySource::Gauge(t) => f.metric.push(plain(agent.gauges[t as usize])),
                FamilySource::Errors => {
                    for (t, status) in crate::error_statuses(agent) {
                        let mut m = plain(agent.counters[t as usize]);
                        m.label.push(LabelPair {
                            name: "status".into(),
                            value: status.into(),
                        });
                        f.metric.push(m);
                    }
                }
                FamilySource::Histogram(t) => {
                    let h = agent.histogram(t).expect("histogram event");
                    let mut hist = Histogram {
                        sample_count: h.count(),
                        sample_sum: h.sum as f64,
                        bucket: h
                            .bounds
                            .bounds()
                            .iter()
                            .zip(h.cumulative_counts())
                            .map(|(&upper_bound, cumulative_count)| Bucket {
                                cumulative_count,
                                upper_bound,
                            })
                            .collect(),
                        ..Histogram::default()
                    };
                    if let Some(n) = agent.native_histogram(t) {
                        set_native(&mut hist, n);
                    }
                    f.metric.push(Metric {
                        label: labels.clone(),
                        histogram: Some(hist),
                        ..Metric::default()
                    });
                }
            }
        }
        if !f.metric.is_empty() {
            out.push(f);
        }
    }
    for (name, help, t) in NATIVE_SIZE_FAMILIES {
        let metric: Vec<Metric> = rows
            .iter()
            .zip(&labels)
            .filter(|(row, _)| row.kinds.contains(&FamilyKind::Histogram))
            .filter_map(|(row, labels)| {
                let n = row.snapshot.native_histogram(t)?;
                let mut hist = Histogram {
                    sample_count: n.count(),
                    sample_sum: n.sum() as f64,
                    ..Histogram::default()
                };
                set_native(&mut hist, n);
                Some(Metric {
                    label: labels.clone(),
                    histogram: Some(hist),
                    ..Metric::default()
                })
            })
            .collect();
        if !metric.is_empty() {
            out.push(MetricFamily {
                name: name.to_owned(),
                help: help.to_owned(),
                r#type: MetricType::Histogram as i32,
                metric,
            });
        }
    }
    out
}

/// Encodes rows (see [`families_of_rows`]), each family length-delimited (no rows: empty
/// output).
pub fn encode_rows(rows: &[Row]) -> Vec<u8> {
    encode_families(families_of_rows(rows))
}

fn encode_families(families: Vec<MetricFamily>) -> Vec<u8> {
    use prost::Message;
    let mut out = Vec::new();
    for f in families {
        f.encode_length_delimited(&mut out)
            .expect("a Vec grows as needed");
    }
    out
}

/// Encodes every agent's families, each message length-delimited (no agents: empty output).
pub fn encode(agents: &[AgentSnapshot]) -> Vec<u8> {
    encode_families(families_of(agents))
}

/// Decodes a body of length-delimited families (for tests and tools).
pub fn decode(mut body: &[u8]) -> Result<Vec<MetricFamily>, prost::DecodeError> {
    use prost::Message;
    let mut out = Vec::new();
    while !body.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut body)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::ALL_KINDS;
    use crate::{AgentSeries, Buckets};
    use nixl_telemetry_base::{Event, EventType};

    fn agent(native: bool) -> AgentSeries {
        AgentSeries::new("a0", "h", Buckets::default()).with_native_histograms(native, 3, 160)
    }

    #[test]
    fn the_families_of_the_text_format_and_the_size_families() {
        let s = agent(true);
        s.apply(&[
            Event::new(EventType::AgentXferPostTime, 7),
            Event::new(EventType::AgentXferTime, 100),
            Event::new(EventType::AgentTxBytes, 4096),
            Event::new(EventType::AgentTxRequestsNum, 1),
        ]);
        let body = encode(&[s.snapshot()]);
        let fams = decode(&body).unwrap();
        let names: Vec<&str> = fams.iter().map(|f| f.name.as_str()).collect();
        let text_names: Vec<&str> = families().iter().map(|f| f.name).collect();
        assert_eq!(names[..text_names.len()], text_names[..]);
        assert_eq!(
            names[text_names.len()..],
            ["agent_tx_request_size_bytes", "agent_rx_request_size_bytes"]
        );
        let by = |n: &str| fams.iter().find(|f| f.name == n).unwrap();
        let errors = by("agent_errors_total");
        assert_eq!(errors.metric.len(), 12);
        assert_eq!(errors.metric[0].label.len(), 3);
        let time = by("agent_xfer_time_us").metric[0]
            .histogram
            .clone()
            .unwrap();
        assert_eq!((time.sample_count, time.sample_sum), (1, 100.0));
        assert_eq!(time.bucket.len(), 18);
        assert_eq!(time.bucket[3].upper_bound, 100.0);
        assert_eq!(time.bucket[3].cumulative_count, 1);
        assert_eq!(time.bucket[2].cumulative_count, 0);
        assert_eq!((time.schema, time.zero_threshold), (3, ZERO_THRESHOLD));
        assert_eq!(
            time.positive_span,
            [BucketSpan {
                offset: 54,
                length: 1
            }]
        );
        assert_eq!(time.positive_delta, [1]);
        let native = time.native().unwrap().unwrap();
        let sent = s.snapshot();
        assert_eq!(
            &native,
            sent.native_histogram(EventType::AgentXferTime).unwrap()
        );
        let tx = by("agent_tx_request_size_bytes").metric[0]
            .histogram
            .clone()
            .unwrap();
        assert_eq!((tx.sample_count, tx.sample_sum), (1, 4096.0));
        assert_eq!(tx.positive_span[0].offset, 96);
        assert!(tx.bucket.is_empty());
        assert_eq!(
            by("agent_tx_bytes_total").metric[0].counter,
            Some(Counter { value: 4096.0 })
        );
        assert_eq!(
            by("agent_tx_last_bytes").metric[0].gauge,
            Some(Gauge { value: 4096.0 })
        );
    }

    #[test]
    fn the_text_page_is_the_same_with_native_histograms_on() {
        let (on, off) = (agent(true), agent(false));
        for s in [&on, &off] {
            s.apply(&[
                Event::new(EventType::AgentXferTime, 100),
                Event::new(EventType::AgentRxBytes, 4096),
            ]);
        }
        assert_eq!(
            crate::text::encode(&[on.snapshot()]),
            crate::text::encode(&[off.snapshot()])
        );
    }

    #[test]
    fn rows_bring_their_labels_and_kinds() {
        let s = agent(true);
        s.apply(&[
            Event::new(EventType::AgentXferTime, 100),
            Event::new(EventType::AgentTxBytes, 4096),
        ]);
        let snap = s.snapshot();
        let rank = [("hostname", "h"), ("pid", "7")];
        let total = [("hostname", "h")];
        let rows = [
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
        ];
        let fams = decode(&encode_rows(&rows)).unwrap();
        let by = |n: &str| fams.iter().find(|f| f.name == n).unwrap();
        let labels = |m: &Metric| -> Vec<(String, String)> {
            m.label
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect()
        };
        let tx = &by("agent_tx_bytes_total").metric;
        assert_eq!(tx.len(), 2);
        assert_eq!(
            labels(&tx[0]),
            [("hostname".into(), "h".into()), ("pid".into(), "7".into())]
        );
        assert_eq!(labels(&tx[1]), [("hostname".into(), "h".into())]);
        // The counter-only row is in no gauge, histogram or size family.
        assert_eq!(by("agent_tx_last_bytes").metric.len(), 1);
        assert_eq!(by("agent_xfer_time_us").metric.len(), 1);
        assert_eq!(by("agent_tx_request_size_bytes").metric.len(), 1);
        assert!(fams
            .iter()
            .all(|f| f.name != "agent_rx_request_size_bytes" || f.metric.len() == 1));
        // Only counter rows: no gauge or histogram family at all.
        let fams = decode(&encode_rows(&rows[1..])).unwrap();
        assert!(fams.iter().all(|f| f.r#type == MetricType::Counter as i32));
        assert!(encode_rows(&[]).is_empty());
    }

    #[test]
    fn without_native_histograms_only_the_classic_ones() {
        let fams = decode(&encode(&[agent(false).snapshot()])).unwrap();
        assert_eq!(fams.len(), families().len());
        let time = fams
            .iter()
            .find(|f| f.name == "agent_xfer_time_us")
            .unwrap();
        let h = time.metric[0].histogram.as_ref().unwrap();
        assert_eq!((h.zero_threshold, h.positive_span.len()), (0.0, 0));
        assert!(!h.is_native() && h.native().is_none());
        assert!(encode(&[]).is_empty());
    }
}
