//! The unit tests of the protobuf exposition (`protobuf/mod.rs`), with the prost-built messages
//! as the oracle of the hand-written encoder.

use super::*;
use crate::text::ALL_KINDS;
use crate::{AgentSeries, Buckets};
use nixl_telemetry_base::{Event, EventType};

fn agent(native: bool) -> AgentSeries {
    AgentSeries::new("a0", "h", Buckets::default()).with_native_histograms(native, 3, 160)
}

/// The oracle: the rows as prost messages, built as the encoder's documentation says, and
/// encoded by prost (the encoder's output before it wrote the wire format itself).
fn prost_encoded(rows: &[Row]) -> Vec<u8> {
    use prost::Message;
    let native = |out: &mut Histogram, h: &NativeHistogram| {
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
    };
    let labels = |row: &Row| -> Vec<LabelPair> {
        row.labels
            .iter()
            .map(|&(n, v)| LabelPair {
                name: n.to_owned(),
                value: v.to_owned(),
            })
            .collect()
    };
    let mut families_out = Vec::new();
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
        for row in rows.iter().filter(|r| r.kinds.contains(&family.kind)) {
            let agent = row.snapshot;
            if let FamilySource::Histogram(t) = family.source {
                let h = agent.histogram(t).unwrap();
                let mut hist = Histogram {
                    sample_count: h.count(),
                    sample_sum: h.sum as f64,
                    bucket: (h.bounds.bounds().iter())
                        .zip(h.cumulative_counts())
                        .map(|(&upper_bound, cumulative_count)| Bucket {
                            cumulative_count,
                            upper_bound,
                        })
                        .collect(),
                    ..Histogram::default()
                };
                if let Some(n) = agent.native_histogram(t) {
                    native(&mut hist, n);
                }
                f.metric.push(Metric {
                    label: labels(row),
                    histogram: Some(hist),
                    ..Metric::default()
                });
                continue;
            }
            crate::for_each_sample(family, agent, |_, extra, value| {
                let mut m = Metric {
                    label: labels(row),
                    ..Metric::default()
                };
                m.label.extend(extra.map(|(name, value)| LabelPair {
                    name: name.into(),
                    value: value.into(),
                }));
                let value = value as f64;
                match family.kind {
                    FamilyKind::Counter => m.counter = Some(Counter { value }),
                    _ => m.gauge = Some(Gauge { value }),
                }
                f.metric.push(m);
            });
        }
        families_out.push(f);
    }
    for (name, help, t) in NATIVE_SIZE_FAMILIES {
        let metric = rows
            .iter()
            .filter(|row| row.kinds.contains(&FamilyKind::Histogram))
            .filter_map(|row| {
                let n = row.snapshot.native_histogram(t)?;
                let mut hist = Histogram {
                    sample_count: n.count(),
                    sample_sum: n.sum() as f64,
                    ..Histogram::default()
                };
                native(&mut hist, n);
                Some(Metric {
                    label: labels(row),
                    histogram: Some(hist),
                    ..Metric::default()
                })
            })
            .collect();
        families_out.push(MetricFamily {
            name: name.to_owned(),
            help: help.to_owned(),
            r#type: MetricType::Histogram as i32,
            metric,
        });
    }
    let mut out = Vec::new();
    for f in families_out.iter().filter(|f| !f.metric.is_empty()) {
        f.encode_length_delimited(&mut out).unwrap();
    }
    out
}

/// The encoder writes what prost writes for the same messages, byte for byte: zeros and
/// empty label values (left out), labels of every length and character, counter-only and
/// histogram-only rows, native histograms with several spans, a zero bucket and a schema
/// below 0 (and classic buckets that disagree with them), and rows without native
/// histograms beside rows with them.
#[test]
fn the_encoding_is_prosts_byte_for_byte() {
    let long = "v".repeat(200);
    let labels = crate::WorkloadLabels::from_pairs(vec![
        ("team".into(), "é \"q\" \\".into()),
        ("long".into(), long.clone()),
    ])
    .unwrap();
    let fresh = agent(true).with_labels(labels.clone());
    let classic = agent(false);
    classic.apply(&[
        Event::new(EventType::AgentXferTime, 100),
        Event::new(EventType::AgentErrInvalidParam, 2),
    ]);
    let native = agent(true).with_labels(labels);
    let wide =
        AgentSeries::new("a1", "h", Buckets::default()).with_native_histograms(true, -2, 160);
    for s in [&native, &wide] {
        let values = (0..64).map(|k| 1u64 << k).chain([0, 0, 7, 300, 300]);
        let batch: Vec<Event> = values
            .flat_map(|v| {
                [
                    Event::new(EventType::AgentXferTime, v),
                    Event::new(EventType::AgentXferPostTime, v / 3),
                    Event::new(EventType::AgentTxBytes, v),
                    Event::new(EventType::AgentRxBytes, v.wrapping_mul(5)),
                    Event::new(EventType::AgentTxRequestsNum, 1),
                ]
            })
            .collect();
        s.apply(&batch);
    }
    let mut snapshots = [fresh, classic, native, wide].map(|s| s.snapshot());
    // Classic values of another moment than the native ones (a store read mid-update).
    snapshots[3].histograms[0].buckets[0] += 2;
    snapshots[3].histograms[0].sum += 7;
    assert_eq!(
        encode(&snapshots),
        crate::text::with_agent_rows(&snapshots, prost_encoded)
    );
    let own = [
        ("hostname", "h"),
        ("empty", ""),
        ("", "no name"),
        ("long", &*long),
    ];
    let kinds: [&[FamilyKind]; 4] = [
        &ALL_KINDS,
        &[FamilyKind::Counter],
        &[FamilyKind::Histogram],
        &[FamilyKind::Counter, FamilyKind::Histogram],
    ];
    let rows: Vec<Row> = (snapshots.iter().zip(kinds))
        .map(|(snapshot, kinds)| Row {
            snapshot,
            labels: &own,
            kinds,
        })
        .collect();
    for n in 0..=rows.len() {
        assert_eq!(
            encode_rows(&rows[n..]),
            prost_encoded(&rows[n..]),
            "rows {n}.."
        );
    }
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
