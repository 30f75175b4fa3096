//! Criterion benches of the producer hot path: `add_xfer_stats` and `update_data` in the append
//! regime (room in the queue), the drop regime (queue full), the deactivated-metric gate, and
//! with two producer threads; plus a flush of a full queue into a ring, and its parts (ring
//! push and pop, staging drain).
//!
//! Run with `cargo bench --bench hot_path`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use nixl_telemetry_core::{Collector, Config, EventType, ExporterChoice, MetricMask};

/// A NOP collector whose flush thread never runs during a measurement.
fn collector(buffer_size: usize, mask: MetricMask) -> Collector {
    Collector::new(
        "bench",
        Config {
            buffer_size,
            run_interval: Duration::from_secs(3600),
            exporter: ExporterChoice::Nop,
            enabled_metrics: mask,
        },
    )
    .unwrap()
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_xfer_stats");
    g.bench_function("append", |b| {
        let col = collector(1 << 16, MetricMask::ALL);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                // Stay in the append regime: flush (untimed) before the queue fills.
                let n = left.min((1 << 16) / 4);
                col.flush();
                let start = Instant::now();
                for i in 0..n {
                    black_box(col.add_xfer_stats(black_box(i), true, 4096, 3));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    g.bench_function("drop", |b| {
        let col = collector(64, MetricMask::ALL);
        while col.update_data(EventType::AgentTxBytes, 1) != nixl_telemetry_core::Recorded::Dropped
        {
        }
        b.iter(|| black_box(col.add_xfer_stats(black_box(10), true, 4096, 3)))
    });
    g.bench_function("deactivated", |b| {
        let col = collector(64, MetricMask::NONE);
        b.iter(|| black_box(col.add_xfer_stats(black_box(10), true, 4096, 3)))
    });
    g.finish();

    let mut g = c.benchmark_group("update_data");
    g.bench_function("append", |b| {
        let col = collector(1 << 16, MetricMask::ALL);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(1 << 16);
                col.flush();
                let start = Instant::now();
                for i in 0..n {
                    black_box(col.update_data(EventType::AgentTxBytes, black_box(i)));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_xfer_stats_2_threads");
    g.bench_function("append_with_drain", |b| {
        let col = Arc::new(collector(1 << 16, MetricMask::ALL));
        b.iter_custom(|iters| {
            // Each of two producers does `iters` calls while this thread drains; the time per
            // iteration is the wall time of both (so it is per pair of calls).
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let start = Instant::now();
            let producers: Vec<_> = (0..2)
                .map(|_| {
                    let col = col.clone();
                    std::thread::spawn(move || {
                        for i in 0..iters {
                            black_box(col.add_xfer_stats(i, true, 4096, 3));
                        }
                    })
                })
                .collect();
            let drainer = {
                let (col, done) = (col.clone(), done.clone());
                std::thread::spawn(move || {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        col.flush();
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            };
            for p in producers {
                p.join().unwrap();
            }
            let elapsed = start.elapsed();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            drainer.join().unwrap();
            elapsed
        })
    });
    g.finish();
}

fn flush_into_ring(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let col = Collector::new(
        "ring",
        Config {
            buffer_size: 4096,
            run_interval: Duration::from_secs(3600),
            exporter: ExporterChoice::Buffer(
                dir.path().to_owned(),
                nixl_telemetry_core::ring::layout::V4,
            ),
            enabled_metrics: MetricMask::ALL,
        },
    )
    .unwrap();
    let mut reader = nixl_telemetry_core::RingReader::open(dir.path().join("ring")).unwrap();
    c.bench_function("flush_4095_events_into_ring", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for i in 0..4095 {
                    col.update_data(EventType::AgentTxBytes, i);
                }
                let start = Instant::now();
                col.flush();
                total += start.elapsed();
                while reader.pop().is_some() {}
            }
            total
        })
    });
}

fn ring_and_queue_parts(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let ring = nixl_telemetry_core::RingWriter::create(dir.path(), "parts", 4096).unwrap();
    let mut reader = nixl_telemetry_core::RingReader::open(dir.path().join("parts")).unwrap();
    let events: Vec<nixl_telemetry_core::Event> = (0..4095)
        .map(|i| nixl_telemetry_core::Event::new(EventType::AgentTxBytes, i))
        .collect();
    c.bench_function("ring_push_4095", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                black_box(ring.push_batch(&events));
                total += start.elapsed();
                while reader.pop().is_some() {}
            }
            total
        })
    });
    c.bench_function("ring_pop_4095", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ring.push_batch(&events);
                let start = Instant::now();
                while let Some(e) = reader.pop() {
                    black_box(e);
                }
                total += start.elapsed();
            }
            total
        })
    });
    let queue = nixl_telemetry_core::staging::StagingQueue::new(4096).unwrap();
    c.bench_function("staging_drain_4095", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for e in &events {
                    queue.try_push(*e);
                }
                let start = Instant::now();
                black_box(queue.drain(|runs| runs.iter().map(|r| r.len()).sum::<usize>()));
                total += start.elapsed();
            }
            total
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = single_thread, two_threads, flush_into_ring, ring_and_queue_parts
}
criterion_main!(benches);
