//! Capture modes and the bounded queue of the FPM trace, driven by a manual clock (no sleeps;
//! the threaded tests poll for a condition with a deadline).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nixl_telemetry_base::logging;
use nixl_telemetry_core::fpm::{CaptureMode, FpmConfig, FpmPayload, FpmStats, FpmTrace, Source};
use nixl_telemetry_core::segments::segments_of;
use nixl_telemetry_core::segments::{ManualClock, SegmentReader};
use serde_json::Value;

const INTERVAL_MS: u64 = 100;

fn config(dir: &Path, mode: CaptureMode) -> FpmConfig {
    FpmConfig {
        output_path: dir.join("fpm"),
        mode,
        sample_interval: Duration::from_millis(INTERVAL_MS),
        ..FpmConfig::default()
    }
}

fn open(dir: &Path, mode: CaptureMode, clock: &Arc<ManualClock>, capacity: usize) -> FpmTrace {
    FpmTrace::open_manual(
        Source::new("default", "backend", "4192"),
        &config(dir, mode),
        clock.clone(),
        capacity,
    )
    .unwrap()
}

/// A payload with some activity (not a heartbeat).
fn busy(rank: i64, counter: i64) -> FpmPayload {
    let mut p = FpmPayload::heartbeat("w", rank, counter);
    p.wall_time = 0.01 * (counter + 1) as f64;
    p.scheduled_requests.num_decode_requests = 1;
    p
}

/// Every row's event, across the segments of producer 4192 in index order.
fn events(dir: &Path) -> Vec<Value> {
    events_of(dir, "4192")
}

/// Every row's event, across the segments of `producer` in index order.
fn events_of(dir: &Path, producer: &str) -> Vec<Value> {
    segments_of(&dir.join(format!("fpm.{producer}")))
        .unwrap()
        .iter()
        .flat_map(|f| SegmentReader::read_rows(f).unwrap().0)
        .map(|r| serde_json::from_slice::<Value>(&r).unwrap()["event"].clone())
        .collect()
}

fn rank_counter(events: &[Value]) -> Vec<(u64, u64)> {
    events
        .iter()
        .map(|e| {
            (
                e["fpm"]["dp_rank"].as_u64().unwrap(),
                e["fpm"]["counter_id"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn assert_accounted(s: &FpmStats) {
    assert_eq!(
        s.recorded,
        s.dropped + s.rejected + s.coalesced + s.written + s.rows_lost,
        "{s:?}"
    );
}

#[test]
fn sampled_mode_is_per_rank_suppresses_unchanged_and_flushes_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let trace = open(dir.path(), CaptureMode::Sampled, &clock, 8192);
    trace.record(busy(0, 1));
    trace.record(busy(0, 2));
    trace.record(busy(1, 1));
    trace.pump();
    assert_eq!(
        trace.stats().written,
        0,
        "the first tick is one interval after opening"
    );
    clock.advance_ms(INTERVAL_MS);
    trace.pump(); // tick 1
    trace.record(busy(0, 2));
    trace.record_msgpack(&busy(1, 1).to_msgpack());
    clock.advance_ms(INTERVAL_MS);
    trace.pump(); // tick 2: both unchanged
    trace.record(busy(0, 3));
    let stats = trace.close();
    let events = events(dir.path());
    assert_eq!(rank_counter(&events), [(0, 2), (1, 1), (0, 3)]);
    assert!(events.iter().all(|e| e["capture_mode"] == "sampled"));
    assert_eq!((stats.recorded, stats.written, stats.coalesced), (6, 3, 3));
    assert_accounted(&stats);
}

#[test]
fn sampled_mode_writes_in_key_order_and_keeps_the_newest_even_if_lower() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Sampled, &clock, 8192);
    for (worker, rank, counter) in [("b", 0, 5), ("a", 10, 1), ("a", 2, 9), ("a", 2, 4)] {
        let mut p = busy(rank, counter);
        p.worker_id = worker.into();
        trace.record(p);
    }
    clock.advance_ms(INTERVAL_MS);
    trace.pump();
    trace.close();
    let got: Vec<(String, u64, u64)> = events(dir.path())
        .iter()
        .map(|e| {
            (
                e["fpm"]["worker_id"].as_str().unwrap().to_owned(),
                e["fpm"]["dp_rank"].as_u64().unwrap(),
                e["fpm"]["counter_id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("a".into(), 2, 4), ("a".into(), 10, 1), ("b".into(), 0, 5)]
    );
}

#[test]
fn sampled_mode_ticks_on_the_interval_and_delays_missed_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Sampled, &clock, 8192);
    trace.record(busy(0, 1));
    clock.advance_ms(INTERVAL_MS - 1);
    trace.pump();
    trace.flush();
    assert_eq!(trace.stats().written, 0);
    clock.advance_ms(1);
    trace.pump();
    trace.flush();
    assert_eq!(trace.stats().written, 1);
    // A long stall: one tick, not a burst; the next is one interval later.
    trace.record(busy(0, 2));
    clock.advance_ms(10 * INTERVAL_MS);
    trace.pump();
    trace.record(busy(0, 3));
    trace.pump();
    trace.flush();
    assert_eq!(trace.stats().written, 2);
    clock.advance_ms(INTERVAL_MS);
    trace.pump();
    trace.flush();
    assert_eq!(trace.stats().written, 3);
    trace.close();
}

#[test]
fn sampled_state_stays_bounded_to_one_entry_per_rank() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Sampled, &clock, 8192);
    for counter in 0..32 {
        for rank in 0..256 {
            trace.record(busy(rank, counter));
        }
    }
    trace.pump();
    assert_eq!(trace.pending_samples(), 256);
    let stats = trace.close();
    assert_eq!((stats.written, stats.dropped), (256, 0));
    assert_eq!(stats.coalesced, 256 * 31);
    let events = events(dir.path());
    assert!(events.iter().all(|e| e["fpm"]["counter_id"] == 31));
    assert_accounted(&stats);
}

#[test]
fn full_mode_writes_every_valid_payload_in_order_heartbeats_included() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Full, &clock, 8192);
    trace.record(busy(0, 1));
    trace.record(FpmPayload::heartbeat("w", 0, 2));
    trace.record_msgpack(&busy(0, 3).to_msgpack());
    trace.record_msgpack(b"not-msgpack");
    let mut bad = busy(0, 4);
    bad.version = 2;
    trace.record(bad);
    trace.record(FpmPayload::heartbeat("w", 0, 2));
    let (stats, logged) = logging::capture(|| {
        trace.pump();
        trace.close()
    });
    let events = events(dir.path());
    assert_eq!(rank_counter(&events), [(0, 1), (0, 2), (0, 3), (0, 2)]);
    assert_eq!(events[1]["fpm"]["wall_time"], 0.0);
    assert!(events.iter().all(|e| e["capture_mode"] == "full"));
    assert_eq!((stats.written, stats.rejected), (4, 2));
    assert_accounted(&stats);
    let warnings = logging::warnings(&logged);
    assert!(
        warnings.iter().any(|w| w.contains("malformed payload")),
        "{warnings:?}"
    );
}

#[test]
fn a_full_queue_drops_the_oldest_and_counts_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Full, &clock, 8192);
    for counter in 0..8192 + 5 {
        trace.record(busy(0, counter));
    }
    assert_eq!(trace.stats().dropped, 5);
    trace.pump();
    trace.record(busy(0, 100_000));
    let stats = trace.close();
    assert_eq!(
        (stats.recorded, stats.dropped, stats.written),
        (8197 + 1, 5, 8193)
    );
    let counters: Vec<u64> = rank_counter(&events(dir.path()))
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    let expected: Vec<u64> = (5..8197).chain([100_000]).collect();
    assert_eq!(counters, expected);
    assert_accounted(&stats);
}

#[test]
fn the_queue_is_bounded_in_bytes_too_dropping_the_oldest_and_what_can_never_fit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let config = FpmConfig {
        queue_max_bytes: 1 << 20,
        ..config(dir.path(), CaptureMode::Full)
    };
    let trace = FpmTrace::open_manual(
        Source::new("default", "backend", "4192"),
        &config,
        clock.clone(),
        8192,
    )
    .unwrap();
    // Six payloads of about 300 KB each: at most three fit in 1 MiB, the oldest go first.
    let heavy = |counter: i64| {
        let mut p = busy(0, counter);
        p.worker_id = "w".repeat(300_000);
        p.to_msgpack()
    };
    for counter in 0..6 {
        trace.record_msgpack(&heavy(counter));
    }
    assert_eq!(trace.stats().dropped, 3);
    // One payload larger than the whole bound is dropped itself; the queue keeps its three.
    let mut huge = busy(0, 99);
    huge.worker_id = "w".repeat(2 << 20);
    trace.record_msgpack(&huge.to_msgpack());
    let stats = trace.close();
    assert_eq!((stats.recorded, stats.dropped, stats.written), (7, 4, 3));
    let counters: Vec<u64> = rank_counter(&events(dir.path()))
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    assert_eq!(counters, [3, 4, 5]);
    assert_accounted(&stats);
}

#[test]
fn the_small_queue_of_the_upstream_test_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Full, &clock, 2);
    for c in 1..=3 {
        trace.record(busy(0, c));
    }
    let stats = trace.close();
    assert_eq!(stats.dropped, 1);
    assert_eq!(rank_counter(&events(dir.path())), [(0, 2), (0, 3)]);
}

#[test]
fn records_are_stamped_at_record_time_and_rows_at_write_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let trace = open(dir.path(), CaptureMode::Sampled, &clock, 8192);
    clock.advance_ms(30);
    trace.record(busy(0, 1));
    clock.advance_ms(70);
    trace.pump();
    trace.close();
    let rows = SegmentReader::read_rows(&dir.path().join("fpm.4192.000000.jsonl.gz"))
        .unwrap()
        .0;
    let row: Value = serde_json::from_slice(&rows[0]).unwrap();
    assert_eq!(row["timestamp"], 100);
    assert_eq!(row["event"]["observed_at_unix_ms"], 1_700_000_000_030u64);
}

/// A trace of `producer` in full mode, with its worker thread on the system clock.
fn threaded(dir: &Path, producer: &str) -> FpmTrace {
    let source = Source::new("ns", "comp", producer);
    FpmTrace::open(source, &config(dir, CaptureMode::Full)).unwrap()
}

#[test]
fn a_threaded_trace_writes_everything_accepted_by_close() {
    let dir = tempfile::tempdir().unwrap();
    let trace = Arc::new(threaded(dir.path(), "thread/ed"));
    let producers: Vec<_> = (0..4)
        .map(|rank| {
            let t = trace.clone();
            std::thread::spawn(move || {
                for c in 0..2000 {
                    t.record(busy(rank, c));
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let stats = Arc::into_inner(trace).unwrap().close();
    assert_eq!(stats.recorded, 8000);
    assert_eq!(stats.written + stats.dropped, 8000);
    assert_accounted(&stats);
    let files = segments_of(&dir.path().join("fpm.thread_ed")).unwrap();
    let rows: usize = files
        .iter()
        .map(|f| SegmentReader::read_rows(f).unwrap().0.len())
        .sum();
    assert_eq!(rows as u64, stats.written);
}

#[test]
fn a_threaded_trace_left_idle_notices_its_segment_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = threaded(dir.path(), "idle");
    for c in 0..10 {
        trace.record(busy(0, c));
    }
    trace.flush();
    assert_eq!(trace.stats().written, 10);
    std::fs::remove_file(dir.path().join("fpm.idle.000000.jsonl.gz")).unwrap();
    // Nothing more is recorded: the worker's timer notices within a second (and the poll
    // gives it 20).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while trace.stats().rows_lost != 10 {
        assert!(std::time::Instant::now() < deadline, "{:?}", trace.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = trace.close();
    assert_eq!((stats.written, stats.rows_lost), (0, 10));
    assert_accounted(&stats);
}

#[test]
fn components_of_one_producer_share_its_files_and_are_sampled_apart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let config = config(dir.path(), CaptureMode::Sampled);
    let prefill = open(dir.path(), CaptureMode::Sampled, &clock, 64);
    let decode = FpmTrace::open_manual(
        Source::new("default", "decode", "4192"),
        &config,
        clock.clone(),
        64,
    )
    .unwrap();
    assert_eq!(prefill.prefix(), decode.prefix());
    // Overlapping worker_id and dp_rank, same counters: nothing is coalesced across components.
    prefill.record(busy(0, 1));
    decode.record(busy(0, 1));
    prefill.record(busy(1, 1));
    decode.record(busy(1, 1));
    prefill.pump();
    assert_eq!(prefill.pending_samples(), 4);
    clock.advance_ms(INTERVAL_MS);
    decode.pump();
    decode.record(busy(0, 2));
    let mid = decode.close();
    assert_eq!(
        mid.written, 5,
        "closing one component writes its pending rows"
    );
    prefill.record(busy(0, 1));
    let s = prefill.close();
    assert_accounted(&s);
    assert_eq!((s.recorded, s.written, s.coalesced), (6, 5, 1));
    let sources: Vec<(String, u64, u64)> = events(dir.path())
        .iter()
        .map(|e| {
            (
                e["source"]["component"].as_str().unwrap().to_owned(),
                e["fpm"]["dp_rank"].as_u64().unwrap(),
                e["fpm"]["counter_id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            ("backend".to_owned(), 0, 1),
            ("backend".to_owned(), 1, 1),
            ("decode".to_owned(), 0, 1),
            ("decode".to_owned(), 1, 1),
            ("decode".to_owned(), 0, 2),
        ]
    );
    for e in events(dir.path()) {
        assert_eq!(e["source"]["producer_id"], "4192");
        assert_eq!(e["source"]["namespace"], "default");
    }
}

/// A valid payload (msgpack) with one unknown key `deep` holding `levels` nested maps.
fn nested_payload(counter: i64, levels: usize) -> Vec<u8> {
    let mut bytes = busy(0, counter).to_msgpack();
    assert_eq!(bytes[0], 0x87, "a fixmap of the 7 fields");
    bytes[0] = 0x88;
    bytes.extend_from_slice(b"\xa4deep");
    for _ in 0..levels {
        bytes.extend_from_slice(b"\x81\xa1a");
    }
    bytes.push(0xc0);
    bytes
}

#[test]
fn payloads_nested_too_deep_are_rejected_so_every_written_row_parses() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let trace = open(dir.path(), CaptureMode::Full, &clock, 64);
    // The payload map is level 1: 63 nested maps under it are the most accepted.
    for (counter, levels) in [(1, 10), (2, 63), (3, 64), (4, 200), (5, 100_000)] {
        trace.record_msgpack(&nested_payload(counter, levels));
    }
    trace.pump();
    let s = trace.close();
    assert_eq!((s.written, s.rejected), (2, 3), "{s:?}");
    assert_accounted(&s);
    let counters: Vec<u64> = events(dir.path())
        .iter()
        .map(|e| e["fpm"]["counter_id"].as_u64().unwrap())
        .collect();
    assert_eq!(counters, [1, 2]);
    // Python's json reads every row too.
    let files = segments_of(&dir.path().join("fpm.4192")).unwrap();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import gzip, json, sys\nprint(sum(1 for l in gzip.open(sys.argv[1], 'rt') if json.loads(l)))",
        ])
        .arg(&files[0])
        .output()
        .expect("python3 is needed for this test");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2", "{out:?}");
}

#[test]
fn the_same_source_opened_twice_shares_one_writer_until_the_last_close() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    // One relay per data-parallel rank opens the trace of its producer again.
    let rank0 = open(dir.path(), CaptureMode::Sampled, &clock, 64);
    let rank1 = open(dir.path(), CaptureMode::Sampled, &clock, 64);
    assert_eq!(rank0.prefix(), rank1.prefix());
    rank0.record(busy(0, 1));
    rank1.record(busy(1, 1));
    rank0.pump();
    assert_eq!(rank1.pending_samples(), 2, "one writer, one sampler");
    // Closing one handle writes nothing yet: the other still records into the same state.
    let mid = rank0.close();
    assert_eq!(mid.written, 0, "{mid:?}");
    rank1.record(busy(1, 2));
    let s = rank1.close();
    assert_accounted(&s);
    assert_eq!((s.recorded, s.written, s.coalesced), (3, 2, 1), "{s:?}");
    assert_eq!(rank_counter(&events(dir.path())), [(0, 1), (1, 2)]);
    // After the last close the producer opens afresh.
    let again = open(dir.path(), CaptureMode::Sampled, &clock, 64);
    assert_eq!(again.stats().recorded, 0);
}

#[test]
fn traces_left_open_are_written_at_process_exit() {
    let test = "traces_left_open_are_written_at_process_exit";
    let dir_of = |pid: u32| std::env::temp_dir().join(format!("nixl-fpm-exit-{pid}"));
    if std::env::var_os(nixl_telemetry_test_support::child::CHILD_VAR).is_none() {
        let dir = dir_of(std::process::id());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        nixl_telemetry_test_support::child::in_child(test);
        let (full, sampled) = (events_of(&dir, "full"), events_of(&dir, "sampled"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(rank_counter(&full), [(0, 1), (0, 2), (0, 3)]);
        assert_eq!(
            rank_counter(&sampled),
            [(0, 2), (1, 1)],
            "pending samples too"
        );
        return;
    }
    // SAFETY: getppid has no preconditions.
    let dir = dir_of(unsafe { libc::getppid() } as u32);
    let open_real = |producer: &str, mode: CaptureMode| {
        let config = FpmConfig {
            sample_interval: Duration::from_secs(3600),
            ..config(&dir, mode)
        };
        FpmTrace::open(Source::new("default", "backend", producer), &config).unwrap()
    };
    let full = open_real("full", CaptureMode::Full);
    let sampled = open_real("sampled", CaptureMode::Sampled);
    for c in 1..=3 {
        full.record(busy(0, c));
    }
    sampled.record(busy(0, 1));
    sampled.record(busy(0, 2));
    sampled.record(busy(1, 1));
    // Exit without closing (and without running the traces' destructors).
    std::mem::forget((full, sampled));
    std::process::exit(0);
}
