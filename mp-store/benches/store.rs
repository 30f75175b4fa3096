//! Criterion benches of the `prometheus_mp` store: the flush thread's update of a store per
//! event (a full flush of 1024 transfers, 4096 events, and one transfer's 4 events), and a scrape of 8 processes'
//! stores (read every file of the directory, check liveness, decode, optionally sum the node
//! totals, encode the page); the same with native histograms kept in the stores (the update,
//! and the scrape as text and in the protobuf exposition).
//!
//! Run with `cargo bench -p nixl-telemetry-mp-store --bench store`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_series::Buckets;

/// `n` transfers as `add_xfer_stats` stages them: post time, transfer time, bytes, 1 request.
fn transfers(n: usize) -> Vec<Event> {
    use EventType::*;
    let kinds = [
        AgentXferPostTime,
        AgentXferTime,
        AgentTxBytes,
        AgentTxRequestsNum,
    ];
    (0..4 * n)
        .map(|i| {
            let t = (i / 4) as u64;
            let value = match i % 4 {
                0 => 3 + t % 40,
                1 => 5 + (t * 37) % 20_000,
                2 => 4096,
                _ => 1,
            };
            Event::new(kinds[i % 4], value)
        })
        .collect()
}

fn store(dir: &std::path::Path, rank: u64) -> StoreWriter {
    store_with(dir, rank, false)
}

/// A store, keeping native histograms when `native`.
fn store_with(dir: &std::path::Path, rank: u64, native: bool) -> StoreWriter {
    let id = Identity {
        agent_name: format!("agent-{rank}"),
        hostname: "bench-host".into(),
        local_rank: rank.to_string(),
        pid: 1000 + rank as i64,
        run_marker: 1,
        instance: 0,
        labels: Default::default(),
    };
    StoreWriter::create_with(dir, &id, &Buckets::default(), native).unwrap()
}

fn update(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let w = store(dir.path(), 0);
    let mut g = c.benchmark_group("store_update");
    let batch = transfers(1024);
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("flush_4096_events", |b| {
        b.iter(|| w.apply(black_box(&batch)))
    });
    let one = transfers(1);
    g.throughput(Throughput::Elements(4));
    g.bench_function("transfer_4_events", |b| b.iter(|| w.apply(black_box(&one))));
    // The same with native histograms kept in the store.
    let n = store_with(dir.path(), 1, true);
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("flush_4096_events_native", |b| {
        b.iter(|| n.apply(black_box(&batch)))
    });
    g.throughput(Throughput::Elements(4));
    g.bench_function("transfer_4_events_native", |b| {
        b.iter(|| n.apply(black_box(&one)))
    });
    g.finish();
}

fn scrape(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // 8 live writers (this process holds their locks), each with a flush of data.
    let writers: Vec<StoreWriter> = (0..8).map(|r| store(dir.path(), r)).collect();
    for w in &writers {
        w.apply(&transfers(1024));
    }
    let mut g = c.benchmark_group("mp_scrape");
    g.throughput(Throughput::Elements(writers.len() as u64));
    for aggregate in [Aggregate::None, Aggregate::Sum] {
        let scan = StoreScan::new(ScanConfig {
            dir: dir.path().to_owned(),
            stale_ttl: Duration::from_secs(30),
            aggregate,
        });
        assert_eq!(scan.live_stores().len(), 8);
        let name = match aggregate {
            Aggregate::None => "read_and_encode",
            Aggregate::Sum => "read_sum_and_encode",
        };
        g.bench_with_input(BenchmarkId::new(name, 8), &scan, |b, c| {
            b.iter(|| black_box(c.scrape()))
        });
        if aggregate == Aggregate::None {
            g.bench_with_input(BenchmarkId::new("read_only", 8), &scan, |b, c| {
                b.iter(|| black_box(c.live_stores()))
            });
        }
    }
    // 8 stores with native histograms: the text page, and the protobuf exposition.
    let native_dir = tempfile::tempdir().unwrap();
    let natives: Vec<StoreWriter> = (0..8)
        .map(|r| store_with(native_dir.path(), r, true))
        .collect();
    for w in &natives {
        w.apply(&transfers(1024));
    }
    let scan = StoreScan::new(ScanConfig {
        dir: native_dir.path().to_owned(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    });
    g.bench_with_input(BenchmarkId::new("native_text", 8), &scan, |b, c| {
        b.iter(|| black_box(c.scrape_as(false)))
    });
    g.bench_with_input(BenchmarkId::new("native_protobuf", 8), &scan, |b, c| {
        b.iter(|| black_box(c.scrape_as(true)))
    });
    g.finish();
    drop((writers, natives));
}

criterion_group!(benches, update, scrape);
criterion_main!(benches);
