//! Concurrency: several producer threads against a small staging queue and a live ring
//! reader. Every event is accounted for and no transfer batch is ever split.

use std::sync::Arc;
use std::time::Duration;

use nixl_telemetry::exporter::BufferExporter;
use nixl_telemetry::{Collector, Config, Event, ExporterChoice, MetricMask, Recorded, RingReader};

#[test]
fn eight_producers_conserve_events_and_keep_batches_whole() {
    const THREADS: u64 = 8;
    const TRANSFERS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        buffer_size: 256,
        run_interval: Duration::from_millis(1),
        exporter: ExporterChoice::Buffer(dir.path().to_owned()),
        enabled_metrics: MetricMask::ALL,
    };
    // A ring much larger than the staging queue, read concurrently, so the ring never
    // overflows and every accepted event must arrive (ring losses are tested elsewhere).
    let ring_exporter = BufferExporter::create(dir.path(), "stress", 8192).unwrap();
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
        let tx = (id >> 32) % 2 == 0;
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
    assert_eq!(stats.events_lost, 0);
    assert_eq!(reported_drops, stats.events_dropped);
    assert_eq!(quads * 4, stats.events_accepted);
    assert!(
        stats.events_dropped > 0,
        "the small queue must have overflowed"
    );
}

/// An exporter keeping every event it is given, shared with the test.
struct Keep(Arc<std::sync::Mutex<Vec<Event>>>);

impl nixl_telemetry::exporter::Exporter for Keep {
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
