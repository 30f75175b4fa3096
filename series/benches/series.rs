//! Criterion benches of the series engine (applying flushed batches to an agent's series) and
//! of a scrape (snapshot plus Prometheus text encoding) for 1 and 8 agents; and the same with
//! native histograms kept (`native`: the cost per recorded transfer beside the classic buckets
//! alone, and the protobuf scrape). The size of each scrape is printed once (`scrape bytes`).
//!
//! Run with `cargo bench -p nixl-telemetry-series --bench series`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_series::native::{DEFAULT_MAX_BUCKETS, DEFAULT_SCHEMA};
use nixl_telemetry_series::{text, AgentSeries, Buckets, Registry};

/// One transfer as `add_xfer_stats` stages it (sizes from 4 KiB to 64 MiB).
fn transfer(i: u64) -> [Event; 4] {
    [
        Event::new(EventType::AgentXferPostTime, 3 + i % 40),
        Event::new(EventType::AgentXferTime, 5 + (i * 37) % 20_000),
        Event::new(EventType::AgentTxBytes, 4096 << (i % 15)),
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

/// [`agent`] with native histograms kept (the exporters' defaults).
fn native_agent(name: &str) -> AgentSeries {
    agent(name).with_native_histograms(true, DEFAULT_SCHEMA, DEFAULT_MAX_BUCKETS)
}

/// Applying batches, classic buckets alone and with native histograms, side by side.
fn update(c: &mut Criterion) {
    let mut g = c.benchmark_group("series_apply");
    let one = transfer(7);
    let batch = flush_batch();
    for (kind, s) in [("classic", agent("a")), ("native", native_agent("a"))] {
        g.throughput(Throughput::Elements(4));
        g.bench_function(BenchmarkId::new("transfer_4_events", kind), |b| {
            b.iter(|| s.apply(black_box(&one)))
        });
        g.throughput(Throughput::Elements(batch.len() as u64));
        g.bench_function(BenchmarkId::new("flush_4096_events", kind), |b| {
            b.iter(|| s.apply(black_box(&batch)))
        });
    }
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

/// Scrapes of 8 agents without and with native histograms kept: the text page (the same page
/// either way) and, with them, the protobuf answer (without them a protobuf `Accept` gets text).
fn native_scrape(c: &mut Criterion) {
    let mut g = c.benchmark_group("scrape_8_agents");
    for (kind, native) in [("classic", false), ("native", true)] {
        let registry = Registry::new();
        for i in 0..8 {
            let name = format!("agent-{i}");
            let s = if native {
                native_agent(&name)
            } else {
                agent(&name)
            };
            s.apply(&flush_batch());
            registry.add(Arc::new(s)).unwrap();
        }
        let text_bytes = registry.encode(false).1.len();
        println!("scrape bytes, 8 agents, {kind}: text {text_bytes}");
        g.bench_with_input(BenchmarkId::new("text", kind), &registry, |b, r| {
            b.iter(|| black_box(r.encode(false)))
        });
        if native {
            let protobuf_bytes = registry.encode(true).1.len();
            println!("scrape bytes, 8 agents, {kind}: protobuf {protobuf_bytes}");
            g.bench_with_input(BenchmarkId::new("protobuf", kind), &registry, |b, r| {
                b.iter(|| black_box(r.encode(true)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, update, scrape, native_scrape);
criterion_main!(benches);
