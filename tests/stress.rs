//! Concurrency: several producer threads against a small staging queue and a live ring
//! reader. Every event is accounted for and no transfer batch is ever split.

use std::sync::Arc;
use std::time::Duration;

use nixl_telemetry_core::exporter::BufferExporter;
use nixl_telemetry_core::{
    Collector, Config, Event, ExporterChoice, MetricMask, Recorded, RingReader,
};

/// Checks that `read` holds whole transfers, each producer's in the order it recorded them,
/// with drop reports between them: producer `t` records its `i`-th transfer as
/// `add_xfer_stats(id, t % 2 == 0, id, id)` with `id = t << 32 | i`. Returns the transfers read
/// and the drops the reports carried.
fn whole_transfers_in_order(read: &[Event]) -> (u64, u64) {
    let mut reported_drops = 0u64;
    let mut last_seen = std::collections::HashMap::new();
    let mut i = 0;
    let mut quads = 0u64;
    while i < read.len() {
        if read[i].event_type == 20 {
            reported_drops += read[i].value;
            i += 1;
            continue;
        }
        let quad = &read[i..i + 4];
        let id = quad[0].value;
        let tx = (id >> 32).is_multiple_of(2);
        let kinds: Vec<u32> = quad.iter().map(|e| e.event_type).collect();
        assert_eq!(
            kinds,
            if tx { [7, 6, 0, 2] } else { [7, 6, 1, 3] },
            "at {i}"
        );
        assert_eq!([quad[1].value, quad[2].value, quad[3].value], [id, id, 1]);
        // Per producer, transfers arrive in the order they were recorded.
        if let Some(prev) = last_seen.insert(id >> 32, id) {
            assert!(id > prev, "producer {} out of order", id >> 32);
        }
        quads += 1;
        i += 4;
    }
    (quads, reported_drops)
}

#[test]
fn eight_producers_conserve_events_and_keep_batches_whole() {
    const THREADS: u64 = 8;
    const TRANSFERS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        buffer_size: 256,
        run_interval: Duration::from_millis(1),
        exporter: ExporterChoice::Buffer(
            dir.path().to_owned(),
            nixl_telemetry_core::ring::layout::V4,
        ),
        enabled_metrics: MetricMask::ALL,
    };
    // A ring much larger than what a flush carries (the queue's 256 events and a block of 256
    // for each of the other 7 threads: 2048), read concurrently, so the ring never overflows
    // however long the reader is descheduled on a loaded machine (32 flushes), and every
    // accepted event must arrive (ring losses are tested elsewhere).
    let ring_exporter = BufferExporter::create(
        dir.path(),
        "stress",
        1 << 16,
        nixl_telemetry_core::ring::layout::V4,
    )
    .unwrap();
    let collector =
        Arc::new(Collector::with_exporter("stress", config, Box::new(ring_exporter)).unwrap());
    let mut ring = RingReader::open(dir.path().join("stress")).unwrap();
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = collector.clone();
            std::thread::spawn(move || {
                let mut accepted = 0u64;
                for i in 0..TRANSFERS {
                    // Encode the producer and sequence number in the values.
                    let id = (t << 32) | i;
                    if c.add_xfer_stats(id, t % 2 == 0, id, id) == Recorded::Accepted {
                        accepted += 1;
                    }
                }
                accepted
            })
        })
        .collect();
    let mut read: Vec<Event> = Vec::new();
    while producers.iter().any(|p| !p.is_finished()) {
        read.extend(ring.by_ref());
        std::thread::yield_now();
    }
    let accepted_by_threads: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    let collector = Arc::into_inner(collector).unwrap();
    // Keep draining while the final flush runs.
    let stats = collector.close();
    read.extend(ring.by_ref());

    assert_eq!(stats.events_accepted, accepted_by_threads * 4);
    assert_eq!(
        stats.events_accepted + stats.events_dropped,
        THREADS * TRANSFERS * 4
    );
    assert_eq!(stats.events_dropped % 4, 0);
    assert_eq!(
        stats.events_exported + stats.events_lost,
        stats.events_accepted + stats.drop_reports
    );
    assert_eq!(read.len() as u64, stats.events_exported);

    let (quads, reported_drops) = whole_transfers_in_order(&read);
    assert_eq!(stats.events_lost, 0);
    assert_eq!(reported_drops, stats.events_dropped);
    assert_eq!(quads * 4, stats.events_accepted);
    assert!(
        stats.events_dropped > 0,
        "the small queue must have overflowed"
    );
}

#[test]
fn thirty_two_producers_overflowing_a_ring_lose_whole_transfers_and_its_reader_counts_them() {
    const THREADS: u64 = 32;
    const TRANSFERS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        buffer_size: 4096,
        run_interval: Duration::from_millis(1),
        exporter: ExporterChoice::Buffer(
            dir.path().to_owned(),
            nixl_telemetry_core::ring::layout::V4,
        ),
        enabled_metrics: MetricMask::ALL,
    };
    let collector = Arc::new(Collector::new("overflow", config).unwrap());
    let mut ring = RingReader::open(dir.path().join("overflow")).unwrap();
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = collector.clone();
            std::thread::spawn(move || {
                for i in 0..TRANSFERS {
                    let id = (t << 32) | i;
                    c.add_xfer_stats(id, t % 2 == 0, id, id);
                }
            })
        })
        .collect();
    // A reader that falls behind: it reads every 5 ms.
    let mut read: Vec<Event> = Vec::new();
    while producers.iter().any(|p| !p.is_finished()) {
        read.extend(ring.by_ref());
        std::thread::sleep(Duration::from_millis(5));
    }
    for p in producers {
        p.join().unwrap();
    }
    collector.flush();
    read.extend(ring.by_ref());
    // An idle flush writes a loss count a lossy one left unwritten.
    collector.flush();
    let stats = collector.stats();
    assert!(stats.events_lost > 0, "the ring must have overflowed");
    // (Lost events are whole transfers and, when not even one slot was free, drop reports:
    // checked below through what was read, which holds no piece of a transfer.)
    assert_eq!(
        ring.lost_events(),
        nixl_telemetry_core::ring::loss_file::LossCount::Counted(stats.events_lost),
        "the reader sees the loss"
    );
    // Every transfer read is whole: drop reports between them, never a piece.
    whole_transfers_in_order(&read);
    let stats = Arc::into_inner(collector).unwrap().close();
    assert_eq!(
        stats.events_exported + stats.events_lost,
        stats.events_accepted + stats.drop_reports
    );
}

/// An exporter keeping every event it is given, shared with the test.
struct Keep(Arc<std::sync::Mutex<Vec<Event>>>);

impl nixl_telemetry_core::exporter::Exporter for Keep {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        self.0.lock().unwrap().extend_from_slice(events);
        events.len()
    }

    fn name(&self) -> &str {
        "keep"
    }
}

#[test]
fn two_collectors_under_thread_churn_conserve_events_per_thread_in_order() {
    // Four workers each run short-lived threads that record transfers into both collectors
    // (one lane per thread per collector) while both flush every millisecond.
    const WORKERS: u64 = 4;
    const THREADS: u64 = 50;
    const TRANSFERS: u64 = 40;
    let kept: Vec<_> = (0..2)
        .map(|_| Arc::new(std::sync::Mutex::new(Vec::new())))
        .collect();
    let collectors: Vec<_> = kept
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let config = Config {
                buffer_size: 64,
                run_interval: Duration::from_millis(1),
                exporter: ExporterChoice::Nop,
                enabled_metrics: MetricMask::ALL,
            };
            let name = format!("agent-{i}");
            Arc::new(Collector::with_exporter(&name, config, Box::new(Keep(k.clone()))).unwrap())
        })
        .collect();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let collectors = collectors.clone();
            std::thread::spawn(move || {
                let mut accepted = [0u64; 2];
                for t in 0..THREADS {
                    let collectors = collectors.clone();
                    let got = std::thread::spawn(move || {
                        let mut accepted = [0u64; 2];
                        for i in 0..TRANSFERS {
                            let id = ((w * THREADS + t) << 32) | i;
                            for (c, n) in collectors.iter().zip(accepted.iter_mut()) {
                                if c.add_xfer_stats(id, true, id, id) == Recorded::Accepted {
                                    *n += 1;
                                }
                            }
                        }
                        accepted
                    })
                    .join()
                    .unwrap();
                    accepted[0] += got[0];
                    accepted[1] += got[1];
                }
                accepted
            })
        })
        .collect();
    let mut accepted = [0u64; 2];
    for w in workers {
        let got = w.join().unwrap();
        accepted[0] += got[0];
        accepted[1] += got[1];
    }
    for (i, (collector, kept)) in collectors.into_iter().zip(kept).enumerate() {
        let stats = Arc::into_inner(collector).unwrap().close();
        assert_eq!(stats.events_accepted, accepted[i] * 4);
        assert_eq!(
            stats.events_accepted + stats.events_dropped,
            WORKERS * THREADS * TRANSFERS * 4
        );
        assert_eq!(stats.events_lost, 0);
        let events = kept.lock().unwrap();
        assert_eq!(
            events.len() as u64,
            stats.events_accepted + stats.drop_reports
        );
        let mut last = std::collections::HashMap::new();
        let data: Vec<&Event> = events.iter().filter(|e| e.event_type != 20).collect();
        assert_eq!(data.len() as u64, accepted[i] * 4);
        for quad in data.chunks(4) {
            let id = quad[0].value;
            let kinds: Vec<u32> = quad.iter().map(|e| e.event_type).collect();
            assert_eq!(kinds, [7, 6, 0, 2], "whole, contiguous batches");
            if let Some(prev) = last.insert(id >> 32, id) {
                assert!(id > prev, "thread {} out of order", id >> 32);
            }
        }
        let reported: u64 = events
            .iter()
            .filter(|e| e.event_type == 20)
            .map(|e| e.value)
            .sum();
        assert_eq!(reported, stats.events_dropped);
    }
}

/// The queue's bound with many threads: 64 producer threads, alive together, record 4-event
/// batches into a small queue while one thread drains it. What one drain takes, and the
/// queue's own account of its room in use, never exceed the capacity plus one block per thread
/// beyond the first; blocks are reused rather than grown; every event is accounted for.
#[test]
fn sixty_four_threads_never_stage_more_than_capacity_plus_a_block_each() {
    use nixl_telemetry_core::staging::{StagingQueue, BLOCK_EVENTS};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Barrier;

    const THREADS: u64 = 64;
    const BATCHES: u64 = 2_000;
    const CAPACITY: u64 = 256;
    let bound = CAPACITY + (THREADS - 1) * BLOCK_EVENTS as u64;
    let q = Arc::new(StagingQueue::new(CAPACITY as usize).unwrap());
    let batch = |id: u64| {
        [0, 1, 2, 3].map(|t| Event {
            event_type: t,
            value: id,
        })
    };

    // Phase 1, nothing drains: every thread records until it is refused once, then waits for
    // the others.
    let together = Arc::new(Barrier::new(THREADS as usize));
    let fill: Vec<_> = (0..THREADS)
        .map(|t| {
            let (q, together) = (q.clone(), together.clone());
            std::thread::spawn(move || {
                together.wait();
                let mut accepted = 0;
                while q.try_push_batch(&batch(t << 32 | accepted)) {
                    accepted += 1;
                }
                together.wait();
                accepted
            })
        })
        .collect();
    let filled: u64 = fill.into_iter().map(|t| t.join().unwrap()).sum::<u64>() * 4;
    assert_eq!(q.len() as u64, filled);
    // Credit comes in multiples of 4 here, so a refused thread held none unused, and the last
    // refusal came after every thread had joined: the staged events are exactly the bound.
    assert_eq!(filled, bound, "refused before the bound, or past it");
    let got = q.drain(|runs| runs.iter().map(|r| r.len() as u64).sum::<u64>());
    assert_eq!(got, filled);
    assert_eq!(q.reserved(), 0, "exited threads gave their credit back");

    // Phase 2: the 64 threads record while a drainer empties the queue continuously and checks,
    // at every drain, what it takes and what the queue accounts as reserved.
    let done = Arc::new(AtomicBool::new(false));
    let max_drained = Arc::new(AtomicU64::new(0));
    let drainer = {
        let (q, done, max_drained) = (q.clone(), done.clone(), max_drained.clone());
        std::thread::spawn(move || {
            let mut got: Vec<Event> = Vec::new();
            let mut max_reserved = 0;
            loop {
                let finished = done.load(Ordering::Acquire);
                max_reserved = max_reserved.max(q.reserved());
                let n = q.drain(|runs| {
                    let n = runs.iter().map(|r| r.len() as u64).sum::<u64>();
                    runs.iter().for_each(|r| got.extend_from_slice(r));
                    n
                });
                max_drained.fetch_max(n, Ordering::Relaxed);
                if finished {
                    return (got, max_reserved);
                }
                std::thread::yield_now();
            }
        })
    };
    let together = Arc::new(Barrier::new(THREADS as usize));
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (q, together) = (q.clone(), together.clone());
            std::thread::spawn(move || {
                together.wait();
                let mut accepted = 0;
                for b in 0..BATCHES {
                    if b % 64 == 0 {
                        // Each sample of the queue's own account is a consistent snapshot.
                        assert!(q.reserved() <= bound, "{} reserved", q.reserved());
                    }
                    accepted += q.try_push_batch(&batch(t << 32 | b)) as u64;
                }
                together.wait();
                accepted
            })
        })
        .collect();
    let accepted: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    done.store(true, Ordering::Release);
    let (got, max_reserved) = drainer.join().unwrap();
    assert!(
        max_reserved <= bound,
        "{max_reserved} reserved, bound {bound}"
    );
    let max_drained = max_drained.load(Ordering::Relaxed);
    assert!(
        max_drained <= bound,
        "one drain took {max_drained}, bound {bound}"
    );

    let counts = q.counts();
    assert_eq!(got.len() as u64, accepted * 4);
    assert_eq!(counts.accepted, filled + accepted * 4);
    assert_eq!(
        counts.accepted + counts.dropped,
        filled + 4 * THREADS + THREADS * BATCHES * 4
    );
    let mut last = std::collections::HashMap::new();
    for quad in got.chunks(4) {
        let kinds: Vec<u32> = quad.iter().map(|e| e.event_type).collect();
        assert_eq!(kinds, [0, 1, 2, 3], "whole, contiguous batches");
        assert!(quad.iter().all(|e| e.value == quad[0].value));
        if let Some(prev) = last.insert(quad[0].value >> 32, quad[0].value) {
            assert!(quad[0].value > prev, "per-thread order");
        }
    }
    // Memory: every block but the last of each chain is full but for at most 3 slots; a lane
    // has at most its current block, its oldest partly drained one and one spare beside them
    // (65 lanes with the shared one).
    let b = BLOCK_EVENTS as u64;
    let blocks_bound = bound.div_ceil(b - 3) + 3 * (THREADS + 1);
    assert!(
        q.blocks_allocated() as u64 <= blocks_bound,
        "{} blocks, bound {blocks_bound}",
        q.blocks_allocated()
    );
}
