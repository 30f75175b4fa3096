//! Criterion benches of one push for 8 ranks' series (one agent each, after a full default-size
//! flush): building the request from the snapshots, encoding and compressing it, for both
//! protocols (remote-write with snappy; OTLP without and with gzip). The size of each body on
//! the wire is printed once per case (`wire bytes`).
//!
//! Run with `cargo bench -p nixl-telemetry-push --bench push`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use nixl_telemetry::{Event, EventType};
use nixl_telemetry_push::otlp::{self, OwnPoints, Row, Temporality};
use nixl_telemetry_push::remote_write::{self, OwnSeries};
use nixl_telemetry_push::PushStatsSnapshot;
use nixl_telemetry_series::{AgentSeries, AgentSnapshot, Buckets};

/// Ranks on the node.
const RANKS: usize = 8;

/// 8 ranks' snapshots after 1,024 transfers each, with their labels.
fn ranks() -> Vec<(AgentSnapshot, Vec<(String, String)>)> {
    (0..RANKS)
        .map(|rank| {
            let series =
                AgentSeries::new(&format!("agent-{rank}"), "bench-host", Buckets::default());
            let batch: Vec<Event> = (0..1024u64)
                .flat_map(|i| {
                    [
                        Event::new(EventType::AgentXferPostTime, 3 + i % 40),
                        Event::new(EventType::AgentXferTime, 5 + (i * 37) % 20_000),
                        Event::new(EventType::AgentTxBytes, 4096),
                        Event::new(EventType::AgentTxRequestsNum, 1),
                    ]
                })
                .collect();
            series.apply(&batch);
            let labels = vec![
                ("agent_name".to_owned(), format!("agent-{rank}")),
                ("hostname".to_owned(), "bench-host".to_owned()),
                ("local_rank".to_owned(), rank.to_string()),
            ];
            (series.snapshot(), labels)
        })
        .collect()
}

fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

const PUSHES: PushStatsSnapshot = PushStatsSnapshot {
    attempts: 10,
    successes: 9,
    failures: 1,
    bytes: 60_000,
};

fn remote_write_push(c: &mut Criterion) {
    let ranks = ranks();
    let labels: Vec<Vec<(&str, &str)>> = ranks.iter().map(|(_, l)| pairs(l)).collect();
    let rows: Vec<(&AgentSnapshot, &[(&str, &str)])> = ranks
        .iter()
        .zip(&labels)
        .map(|((s, _), l)| (s, l.as_slice()))
        .collect();
    let own = OwnSeries {
        labels: &[("hostname", "bench-host"), ("pusher", "serve")],
        pushes: &PUSHES,
    };
    let size = remote_write::body(&rows, Some(own), 1).bytes.len();
    println!("remote_write 8 ranks: {size} wire bytes (snappy)");
    c.bench_function("push/remote_write_8_ranks", |b| {
        b.iter(|| black_box(remote_write::body(black_box(&rows), Some(own), 1)))
    });
}

fn otlp_push(c: &mut Criterion) {
    let ranks = ranks();
    let attrs: Vec<Vec<(&str, &str)>> = ranks.iter().map(|(_, l)| pairs(&l[..1])).collect();
    let rows: Vec<Row> = ranks
        .iter()
        .zip(&attrs)
        .map(|((snapshot, _), attributes)| Row {
            snapshot,
            attributes,
            start_ns: 1,
        })
        .collect();
    let own = OwnPoints {
        attributes: &[("pusher", "serve")],
        pushes: &PUSHES,
        start_ns: 1,
    };
    let resource = otlp::resource(&[("service.name".into(), "nixl".into())], "bench-host");
    for gzip in [false, true] {
        let name = if gzip {
            "otlp_gzip_8_ranks"
        } else {
            "otlp_8_ranks"
        };
        let build = || {
            let request = otlp::request(
                &rows,
                Some(own),
                resource.clone(),
                Temporality::Cumulative,
                2,
            );
            otlp::body(&request, gzip)
        };
        println!("{name}: {} wire bytes", build().bytes.len());
        c.bench_function(&format!("push/{name}"), |b| b.iter(|| black_box(build())));
    }
}

criterion_group!(benches, remote_write_push, otlp_push);
criterion_main!(benches);
