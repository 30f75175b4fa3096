//! The unit tests of the collector (`collector/mod.rs`).

use super::*;
use crate::exporter::ExporterChoice;
use crate::ring::RingReader;
use std::time::Duration;

fn buffer_config(dir: &std::path::Path, size: usize, interval_ms: u64) -> Config {
    Config {
        buffer_size: size,
        run_interval: Duration::from_millis(interval_ms),
        exporter: ExporterChoice::Buffer(dir.to_owned(), crate::ring::layout::V4),
        enabled_metrics: MetricMask::ALL,
    }
}

fn drain(r: &mut RingReader) -> Vec<(u32, u64)> {
    r.by_ref().map(|e| (e.event_type, e.value)).collect()
}

#[test]
fn every_staged_transfer_follows_the_transfer_order_whatever_the_mask() {
    use crate::event::TRANSFER_ORDER;
    // Every subset of the transfer events' bits, both directions.
    let types: Vec<EventType> = TRANSFER_ORDER.concat();
    for bits in 0u32..(1 << types.len()) {
        let names: Vec<&str> = (0..types.len())
            .filter(|i| bits & (1 << i) != 0)
            .map(|i| types[i].name())
            .collect();
        let mask = MetricMask::from_allowlist(&names.join(","));
        for is_write in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut config = buffer_config(dir.path(), 64, 3_600_000);
            config.enabled_metrics = mask;
            let c = Collector::new("agent", config).unwrap();
            let mut r = RingReader::open(dir.path().join("agent")).unwrap();
            c.add_xfer_stats(1, is_write, 2, 3);
            c.flush();
            let staged: Vec<Event> = r.by_ref().collect();
            for pair in staged.windows(2) {
                assert!(pair[0].may_continue_with(&pair[1]), "{mask:?}: {staged:?}");
            }
        }
    }
}

#[test]
fn exact_order_for_updates_then_transfers() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("agent", buffer_config(dir.path(), 4096, 3_600_000)).unwrap();
    let mut r = RingReader::open(dir.path().join("agent")).unwrap();
    use EventType::*;
    c.update_data(AgentTxBytes, 100);
    c.update_data(AgentRxBytes, 200);
    c.update_data(AgentTxRequestsNum, 1);
    c.update_data(AgentMemoryRegistered, 4096);
    c.update_data(AgentMemoryDeregistered, 2048);
    c.update_error(-3).unwrap();
    c.add_xfer_stats(500, true, 1024, 50);
    c.add_xfer_stats(700, false, 2048, 70);
    c.flush();
    assert_eq!(
        drain(&mut r),
        [
            (0, 100),
            (1, 200),
            (2, 1),
            (4, 4096),
            (5, 2048),
            (10, 1),
            (7, 50),
            (6, 500),
            (0, 1024),
            (2, 1),
            (7, 70),
            (6, 700),
            (1, 2048),
            (3, 1)
        ]
    );
}

#[test]
fn one_drop_report_of_forty_after_ten_rejected_batches() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("a", buffer_config(dir.path(), 1024, 3_600_000)).unwrap();
    let mut r = RingReader::open(dir.path().join("a")).unwrap();
    for i in 0..1022 {
        assert_eq!(
            c.update_data(EventType::AgentTxBytes, i),
            Recorded::Accepted
        );
    }
    for _ in 0..10 {
        assert_eq!(c.add_xfer_stats(1, true, 1, 1), Recorded::Dropped);
    }
    c.flush();
    let events = drain(&mut r);
    // The ring keeps 1023 of the 1023 exported events (1022 + the drop report).
    assert_eq!(events.len(), 1023);
    assert_eq!(events.last(), Some(&(20, 40)));
    assert_eq!(events.iter().filter(|e| e.0 == 20).count(), 1);
    let s = c.stats();
    assert_eq!(
        (
            s.events_accepted,
            s.events_dropped,
            s.events_exported,
            s.events_lost
        ),
        (1022, 40, 1023, 0)
    );
    c.flush();
    assert!(drain(&mut r).is_empty(), "no report without new drops");
}

#[test]
fn ring_overflow_is_counted_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("a", buffer_config(dir.path(), 4, 3_600_000)).unwrap();
    for i in 0..6 {
        c.update_data(EventType::AgentTxBytes, i);
    }
    let ((), logged) = crate::logging::capture(|| c.flush());
    let s = c.stats();
    assert_eq!((s.events_accepted, s.events_dropped), (4, 2));
    // 4 staged + 1 drop report, 3 usable ring slots.
    assert_eq!((s.events_exported, s.events_lost), (3, 2));
    // Nobody has read the ring: reported once at INFO, not warned.
    assert!(crate::logging::warnings(&logged).is_empty(), "{logged:?}");
    assert!(logged
        .iter()
        .any(|(l, m)| *l == log::Level::Info && m.contains("2 events")));
}

#[test]
fn the_drop_report_reaches_the_reader_when_the_queue_overflowed_exactly() {
    // A queue full of 4-event batches holds exactly the ring's capacity, one more than the
    // ring's usable slots: a slot is kept for the report, so the report is not what is lost;
    // the last transfer does not fit whole and is lost whole (63 transfers are written).
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("a", buffer_config(dir.path(), 256, 3_600_000)).unwrap();
    let mut r = RingReader::open(dir.path().join("a")).unwrap();
    for i in 0..65 {
        let expected = if i < 64 {
            Recorded::Accepted
        } else {
            Recorded::Dropped
        };
        assert_eq!(c.add_xfer_stats(i, true, i, i), expected);
    }
    c.flush();
    let events = drain(&mut r);
    assert_eq!(events.len(), 253);
    assert_eq!(
        events.last(),
        Some(&(20, 4)),
        "the report comes last, as in NIXL"
    );
    let s = c.stats();
    assert_eq!(
        (
            s.events_accepted,
            s.events_dropped,
            s.events_exported,
            s.events_lost
        ),
        (256, 4, 253, 4)
    );
    // The ring's readers see the ring's loss too, through its loss file.
    assert_eq!(
        r.lost_events(),
        crate::ring::loss_file::LossCount::Counted(4)
    );
}

#[test]
fn the_loss_warning_names_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("a", buffer_config(dir.path(), 4, 3_600_000)).unwrap();
    // A reader has read (without one, a loss is only INFO: see below).
    c.update_data(EventType::AgentRxBytes, 1);
    c.flush();
    let mut reader = RingReader::open(dir.path().join("a")).unwrap();
    assert!(reader.try_pop().unwrap().is_some());
    // Two threads recording at once may stage the capacity plus one block of slack: 4 events
    // each, one flush of 8 events meets an empty 4-slot ring. (Alive together: a thread
    // that exits hands its lane and its slack on.)
    let together = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for i in 0..4 {
                    let recorded = c.update_data(EventType::AgentTxBytes, i);
                    assert_eq!(recorded, Recorded::Accepted);
                }
                together.wait();
            });
        }
    });
    let ((), logged) = crate::logging::capture(|| c.flush());
    let warnings = crate::logging::warnings(&logged);
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("the ring was empty") && warnings[0].contains("3 usable slots"),
        "{}",
        warnings[0]
    );
    // A full ring nobody has ever read: counted, said once at INFO, never a warning (NIXL's
    // suite fails a run on any unexpected warning), including at destroy's final flush.
    let d = tempfile::tempdir().unwrap();
    let c = Collector::new("b", buffer_config(d.path(), 4, 3_600_000)).unwrap();
    let ((), logged) = crate::logging::capture(|| {
        for round in 0..3 {
            for i in 0..3 {
                c.update_data(EventType::AgentTxBytes, round * 10 + i);
            }
            c.flush();
        }
    });
    assert!(crate::logging::warnings(&logged).is_empty(), "{logged:?}");
    let infos: Vec<_> = logged
        .iter()
        .filter(|(l, m)| *l == log::Level::Info && m.contains("no reader has read"))
        .collect();
    assert_eq!(infos.len(), 1, "{logged:?}");
    assert_eq!(c.stats().events_lost, 6);
    // Once a reader has read, a full ring means it is behind: one warning.
    let mut r = RingReader::open(d.path().join("b")).unwrap();
    assert!(r.try_pop().unwrap().is_some());
    for i in 0..3 {
        c.update_data(EventType::AgentTxBytes, i);
    }
    let ((), logged) = crate::logging::capture(|| c.flush());
    let warnings = crate::logging::warnings(&logged);
    assert_eq!(warnings.len(), 1, "{logged:?}");
    assert!(
        warnings[0].contains("its reader is not keeping up"),
        "{}",
        warnings[0]
    );
    assert_eq!(c.stats().events_lost, 8);
    let (_, logged) = crate::logging::capture(|| c.close());
    assert!(crate::logging::warnings(&logged).is_empty(), "{logged:?}");
}

#[test]
fn an_unread_ring_never_warns_even_at_destroy() {
    let d = tempfile::tempdir().unwrap();
    let (lost, logged) = crate::logging::capture(|| {
        // NIXL's BufferOverflowHandling: 10 events into a 4-event buffer, then destroy (its
        // final flush: 4 events and the drop report meet an empty, never-read ring).
        let c = Collector::new("u", buffer_config(d.path(), 4, 3_600_000)).unwrap();
        for i in 0..10 {
            c.update_data(EventType::AgentTxBytes, i);
        }
        c.close().events_lost
    });
    assert!(lost > 0);
    assert!(crate::logging::warnings(&logged).is_empty(), "{logged:?}");
}

#[test]
fn ring_records_carry_no_stack_bytes_in_their_padding() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("a", buffer_config(dir.path(), 16, 3_600_000)).unwrap();
    for i in 0..5 {
        c.add_xfer_stats(i, i % 2 == 0, 1 << 20, 3);
    }
    // 16 staged, 4 dropped: 15 slots take 3 whole transfers and the drop report.
    c.flush();
    let bytes = std::fs::read(dir.path().join("a")).unwrap();
    let records: Vec<&[u8]> = bytes[40..].chunks(16).collect();
    assert_eq!(
        u32::from_ne_bytes(records[12][..4].try_into().unwrap()),
        20,
        "the report"
    );
    for (i, r) in records.iter().enumerate().take(13) {
        assert_eq!(&r[4..8], &[0, 0, 0, 0], "record {i}");
    }
}

#[test]
fn deactivated_metrics_are_skipped_not_dropped() {
    let config = Config {
        buffer_size: 2,
        enabled_metrics: MetricMask::resolve("agent_xfer_time,agent_rx_*").0,
        ..Config::default()
    };
    let c = Collector::new("a", config).unwrap();
    assert_eq!(
        c.update_data(EventType::AgentTxBytes, 1),
        Recorded::Deactivated
    );
    assert_eq!(c.add_xfer_stats(5, true, 10, 1), Recorded::Accepted);
    assert_eq!(c.add_xfer_stats(5, false, 10, 1), Recorded::Dropped);
    let s = c.stats();
    assert_eq!((s.events_accepted, s.events_dropped), (1, 3));
}

#[test]
fn periodic_flush_and_final_flush_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collector::new("p", buffer_config(dir.path(), 64, 10)).unwrap();
    let mut r = RingReader::open(dir.path().join("p")).unwrap();
    c.update_data(EventType::AgentRxBytes, 7);
    let start = std::time::Instant::now();
    while r.is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(drain(&mut r), [(1, 7)]);
    let slow = Collector::new("q", buffer_config(dir.path(), 64, 3_600_000)).unwrap();
    slow.update_data(EventType::AgentRxBytes, 9);
    let stats = slow.close();
    assert_eq!((stats.events_exported, stats.flushes), (1, 1));
    let mut rq = RingReader::open(dir.path().join("q")).unwrap();
    assert_eq!(drain(&mut rq), [(1, 9)], "destroy flushes what was staged");
}

#[test]
fn impossible_buffer_sizes_are_errors_not_panics() {
    for buffer_size in [0, (1 << 30) + 1] {
        let config = Config {
            buffer_size,
            ..Config::default()
        };
        let e = Collector::new("a", config).err().unwrap();
        assert_eq!(e.status, Status::InvalidParam, "{}", e.message);
    }
}

#[test]
fn empty_agent_name_and_unknown_exporter_are_refused() {
    assert_eq!(
        Collector::new("", Config::default()).err().unwrap().status,
        Status::InvalidParam
    );
    let config = Config {
        exporter: ExporterChoice::Plugin("nosuch".into()),
        ..Config::default()
    };
    let e = Collector::new("a", config).err().unwrap();
    assert!(e
        .message
        .contains("Failed to load telemetry plugin: nosuch"));
}
