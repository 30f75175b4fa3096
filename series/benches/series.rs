//! Criterion benches of the series engine (applying flushed batches to an agent's series) and
//! of a scrape (snapshot plus Prometheus text encoding) for 1 and 8 agents.
//!
//! Run with `cargo bench -p nixl-telemetry-series --bench series`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nixl_telemetry::{Event, EventType};
use nixl_telemetry_series::{text, AgentSeries, Buckets, Registry};

/// One transfer as `add_xfer_stats` stages it.
fn transfer(i: u64) -> [Event; 4] {
    [
        Event::new(EventType::AgentXferPostTime, 3 + i % 40),
        Event::new(EventType::AgentXferTime, 5 + (i * 37) % 20_000),
        Event::new(EventType::AgentTxBytes, 4096),
        Event::new(EventType::AgentTxRequestsNum, 1),
    ]
}

/// A full default-size flush: 1024 transfers.
fn flush_batch() -> Vec<Event> {
    (0..1024).flat_map(transfer).collect()
}

fn agent(name: &str) -> AgentSeries {
    AgentSeries::new(name, "bench-host", Buckets::default())
}

fn update(c: &mut Criterion) {
    let mut g = c.benchmark_group("series_apply");
    let s = agent("a");
    let one = transfer(7);
    g.throughput(Throughput::Elements(4));
    g.bench_function("transfer_4_events", |b| b.iter(|| s.apply(black_box(&one))));
    let batch = flush_batch();
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("flush_4096_events", |b| {
        b.iter(|| s.apply(black_box(&batch)))
    });
    g.finish();
}

fn scrape(c: &mut Criterion) {
    let mut g = c.benchmark_group("scrape");
    g.bench_function("snapshot_1_agent", |b| {
        let s = agent("a");
        s.apply(&flush_batch());
        b.iter(|| black_box(s.snapshot()))
    });
    for agents in [1usize, 8] {
        let registry = Registry::new();
        for i in 0..agents {
            let s = Arc::new(agent(&format!("agent-{i}")));
            s.apply(&flush_batch());
            registry.add(s).unwrap();
        }
        let bytes = registry.encode_text().len();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_with_input(
            BenchmarkId::new("snapshot_and_encode", agents),
            &registry,
            |b, r| b.iter(|| black_box(r.encode_text())),
        );
        let snaps = registry.snapshot();
        g.bench_with_input(BenchmarkId::new("encode_only", agents), &snaps, |b, s| {
            b.iter(|| black_box(text::encode(s)))
        });
    }
    g.finish();
}

criterion_group!(benches, update, scrape);
criterion_main!(benches);
