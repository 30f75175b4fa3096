//! Criterion benches of the FPM trace:
//!
//! - `record`: the producer's cost of one record call (msgpack bytes or a typed payload) while
//!   the queue has room, and with the queue full (each record then drops the oldest entry);
//! - `writer`: the segment writer's sustained throughput on realistic rows (envelope encoding,
//!   gzip level 6, file writes), against `gzip -6` run on the very same JSONL bytes (the
//!   practical limit on this machine) and against flate2's level-6 compression alone.
//!
//! Run with `cargo bench --bench fpm_trace`. Throughput is reported in uncompressed bytes; the
//! setup line printed first gives the average row size to turn it into rows per second.

use std::hint::black_box;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nixl_telemetry_core::fpm::{
    CaptureMode, FpmConfig, FpmPayload, FpmRecord, FpmTrace, QueuedRequests, ScheduledRequests,
    Source, ValidPayload,
};
use nixl_telemetry_core::segments::{
    ManualClock, SegmentNaming, SegmentWriter, SystemClock, WriterOptions,
};

/// A realistic busy payload of one decode-heavy iteration.
fn payload(rank: i64, counter: i64) -> FpmPayload {
    FpmPayload {
        version: 1,
        worker_id: "7587890123456789012".into(),
        dp_rank: rank,
        counter_id: counter,
        wall_time: 0.012_345 + (counter % 97) as f64 * 1.3e-4,
        scheduled_requests: ScheduledRequests {
            num_prefill_requests: counter % 3,
            sum_prefill_tokens: 512 * (counter % 3),
            var_prefill_length: 1234.5 + (counter % 11) as f64,
            sum_prefill_kv_tokens: 64 * (counter % 5),
            num_decode_requests: 48 + counter % 16,
            sum_decode_kv_tokens: 98_304 + counter * 17 % 4096,
            var_decode_kv_tokens: 40_321.25 + (counter % 13) as f64,
        },
        queued_requests: QueuedRequests {
            num_prefill_requests: counter % 4,
            sum_prefill_tokens: 700 * (counter % 4),
            var_prefill_length: 88.0,
            num_decode_requests: 0,
            sum_decode_kv_tokens: 0,
            var_decode_kv_tokens: 0.0,
        },
    }
}

fn record(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let config = FpmConfig {
        output_path: dir.path().join("bench"),
        mode: CaptureMode::Sampled,
        sample_interval: Duration::from_secs(3600),
        ..FpmConfig::default()
    };
    let clock = Arc::new(ManualClock::new(0));
    let bytes = payload(0, 1).to_msgpack();
    let mut g = c.benchmark_group("record");
    g.bench_function("msgpack_append", |b| {
        let trace = FpmTrace::open_manual(
            Source::new("ns", "c", "append"),
            &config,
            clock.clone(),
            8192,
        )
        .unwrap();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                // Stay in the append regime: drain (untimed) before the queue fills.
                let n = left.min(4096);
                trace.pump();
                let start = Instant::now();
                for _ in 0..n {
                    trace.record_msgpack(black_box(&bytes));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    g.bench_function("msgpack_full_queue", |b| {
        let trace =
            FpmTrace::open_manual(Source::new("ns", "c", "full"), &config, clock.clone(), 8192)
                .unwrap();
        for _ in 0..8192 {
            trace.record_msgpack(&bytes);
        }
        b.iter(|| trace.record_msgpack(black_box(&bytes)))
    });
    g.bench_function("typed_append", |b| {
        let trace = FpmTrace::open_manual(
            Source::new("ns", "c", "typed"),
            &config,
            clock.clone(),
            8192,
        )
        .unwrap();
        let p = payload(0, 1);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(4096);
                trace.pump();
                let start = Instant::now();
                for _ in 0..n {
                    trace.record(black_box(p.clone()));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    g.finish();
}

const ROWS: i64 = 20_000;

fn writer(c: &mut Criterion) {
    let source = Source::new("default", "backend", "7587890123456789012");
    let payloads: Vec<ValidPayload> = (0..ROWS)
        .map(|i| payload(i % 8, i / 8).validate().unwrap())
        .collect();
    let records: Vec<FpmRecord> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| FpmRecord::new(&source, CaptureMode::Full, 1_782_777_600_000 + i as u64, p))
        .collect();

    // The same JSONL bytes the writer produces (timestamps aside), for the gzip comparisons.
    let dir = tempfile::tempdir().unwrap();
    let mut jsonl = Vec::new();
    for r in &records {
        nixl_telemetry_core::segments::row::encode_row(&mut jsonl, 1_234, r).unwrap();
    }
    let jsonl_path = dir.path().join("rows.jsonl");
    std::fs::write(&jsonl_path, &jsonl).unwrap();
    eprintln!(
        "fpm_trace writer input: {ROWS} rows, {} bytes, {:.0} bytes per row",
        jsonl.len(),
        jsonl.len() as f64 / ROWS as f64
    );

    let mut g = c.benchmark_group("writer");
    g.throughput(Throughput::Bytes(jsonl.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    let out = dir.path().join("segments");
    g.bench_function("segment_writer_rows", |b| {
        b.iter(|| {
            let mut w = SegmentWriter::open(
                SegmentNaming::new(&out.join("fpm"), "bench"),
                WriterOptions::new(268_435_456, 4),
                Arc::new(SystemClock::new()),
            )
            .unwrap();
            for r in &records {
                w.push(r);
            }
            black_box(w.close())
        })
    });
    g.bench_function("flate2_gzip6_only", |b| {
        b.iter(|| {
            // The writer compresses in 1 MiB batches, one member each.
            let mut total = 0;
            for chunk in jsonl.chunks(1 << 20) {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
                e.write_all(chunk).unwrap();
                total += e.finish().unwrap().len();
            }
            black_box(total)
        })
    });
    let gzip_available = Command::new("gzip")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if gzip_available {
        g.bench_function("gzip_cli_-6", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let input = std::fs::File::open(&jsonl_path).unwrap();
                    let start = Instant::now();
                    let status = Command::new("gzip")
                        .args(["-6", "-c"])
                        .stdin(input)
                        .stdout(Stdio::null())
                        .status()
                        .unwrap();
                    total += start.elapsed();
                    assert!(status.success());
                }
                total
            })
        });
    } else {
        eprintln!("gzip not found: skipping the gzip -6 comparison");
    }
    g.finish();
}

criterion_group!(benches, record, writer);
criterion_main!(benches);
