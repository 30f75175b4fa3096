//! The `TRACE` exporter inside a collector: events reach its segments, agents whose file
//! prefixes collide are refused while the first one writes, and rows a write error or a deleted
//! segment loses count as lost in the collector's stats (every kind of deletion, driven on a
//! manual clock: `tests/segments_deleted.rs`).

use std::time::{Duration, Instant};

use nixl_telemetry_core::exporter::TraceExporterConfig;
use nixl_telemetry_core::segments::{segments_of, SegmentReader};
use nixl_telemetry_core::{Collector, Config, EventType, ExporterChoice, Status};
use nixl_telemetry_test_support::child::in_child;

#[test]
fn a_collector_with_the_trace_exporter_persists_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::new("agent-0", trace_config(dir.path().join("nixl"))).unwrap();
    assert_eq!(collector.exporter_name(), "TRACE");
    collector.add_xfer_stats(120, true, 4096, 8);
    collector.update_data(EventType::AgentRxBytes, 7);
    drop(collector);
    let files = segments_of(&dir.path().join("nixl.agent-0")).unwrap();
    assert_eq!(files.len(), 1);
    let names: Vec<String> = SegmentReader::read_rows(&files[0])
        .unwrap()
        .0
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(r).unwrap();
            v["event"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "agent_xfer_post_time",
            "agent_xfer_time",
            "agent_tx_bytes",
            "agent_tx_requests_num",
            "agent_rx_bytes"
        ]
    );
}

#[test]
fn agents_sharing_a_file_prefix_are_refused_while_the_first_writes() {
    // Not while another test of this binary spawns a child: between fork and exec the child
    // holds a copy of the prefix's lock descriptor, and the second writer below would be
    // refused as if another process wrote (the fork case of issue 24).
    let _no_child = nixl_telemetry_test_support::serial(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        exporter: ExporterChoice::Trace(TraceExporterConfig {
            path: dir.path().join("nixl"),
            max_segments: 1,
            roll_bytes: 100,
        }),
        ..Config::default()
    };
    let first = Collector::new("node/a", config.clone()).unwrap();
    for agent in ["node:a", "node/a"] {
        let e = Collector::new(agent, config.clone()).err().unwrap();
        assert_eq!(e.status, Status::NotAllowed, "{}", e.message);
        assert!(e.message.contains("nixl.node_a"), "{}", e.message);
    }
    for i in 0..20 {
        first.update_data(EventType::AgentRxBytes, i);
    }
    drop(first);
    let second = Collector::new("node:a", config).unwrap();
    drop(second);
    let lock = dir.path().join("nixl.node_a.lock");
    assert!(lock.is_file(), "the lock file stays");
    let files = segments_of(&dir.path().join("nixl.node_a")).unwrap();
    assert!(!files.contains(&lock));
}

/// A collector configuration with the TRACE exporter writing `<path>.<agent>.*.jsonl.gz`.
fn trace_config(path: std::path::PathBuf) -> Config {
    Config {
        exporter: ExporterChoice::Trace(TraceExporterConfig {
            path,
            ..TraceExporterConfig::default()
        }),
        ..Config::default()
    }
}

#[test]
fn rows_lost_to_a_write_error_count_as_lost_not_exported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let collector = Collector::new("agent-0", trace_config(out.join("nixl"))).unwrap();
    // Every write of the exporter fails from now on: a file took its directory's place (a
    // deleted directory alone would be made again).
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::write(&out, "in the way").unwrap();
    for i in 0..5 {
        collector.add_xfer_stats(120, true, 4096 + i, 8);
    }
    let s = collector.close();
    assert_eq!(
        (s.events_accepted, s.events_exported, s.events_lost),
        (20, 0, 20),
        "{s:?}"
    );
    assert_eq!(
        s.events_exported + s.events_lost,
        s.events_accepted + s.drop_reports
    );
}

#[test]
fn trace_losses_show_in_nixl_telemetry_get_stats() {
    use nixl_telemetry::{
        nixl_telemetry_add_xfer_stats, nixl_telemetry_create, nixl_telemetry_destroy,
        nixl_telemetry_get_stats, nixl_telemetry_t, NIXL_TELEMETRY_SUCCESS,
    };
    use nixl_telemetry_core::CollectorStats;
    // Spawns a child: see agents_sharing_a_file_prefix_are_refused_while_the_first_writes.
    let _no_overlap = nixl_telemetry_test_support::serial(&[]);
    if !in_child("trace_losses_show_in_nixl_telemetry_get_stats") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // This child process runs this test alone: its environment is its own.
    std::env::set_var("NIXL_TELEMETRY_EXPORTER", "TRACE");
    std::env::set_var("NIXL_TELEMETRY_TRACE_PATH", out.join("nixl"));
    std::env::set_var("NIXL_TELEMETRY_RUN_INTERVAL", "10");
    let mut t: *mut nixl_telemetry_t = std::ptr::null_mut();
    let mut s = CollectorStats::default();
    // SAFETY: static C strings, local out-parameters and the handle created here, destroyed
    // once at the end.
    unsafe {
        assert_eq!(
            nixl_telemetry_create(c"agent-0".as_ptr(), true, &mut t),
            NIXL_TELEMETRY_SUCCESS
        );
        std::fs::remove_dir_all(&out).unwrap();
        std::fs::write(&out, "in the way").unwrap();
        assert_eq!(
            nixl_telemetry_add_xfer_stats(t, 120, true, 4096, 8),
            NIXL_TELEMETRY_SUCCESS
        );
        // The exporter writes its batch within about a second; the next collector flush
        // (every 10 ms) counts what that write lost.
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            assert_eq!(nixl_telemetry_get_stats(t, &mut s), NIXL_TELEMETRY_SUCCESS);
            if s.events_lost == 4 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        nixl_telemetry_destroy(t);
    }
    assert_eq!(
        (s.events_accepted, s.events_exported, s.events_lost),
        (4, 0, 4),
        "{s:?}"
    );
}

/// Polls `done` every 10 ms until it holds, failing after 20 s.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_segment_deleted_under_an_idle_agent_counts_its_events_lost_before_destroy() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("nixl.agent-0");
    let config = Config {
        run_interval: Duration::from_millis(10),
        ..trace_config(dir.path().join("nixl"))
    };
    let collector = Collector::new("agent-0", config).unwrap();
    for i in 0..100 {
        collector.add_xfer_stats(120, true, 4096 + i, 8);
    }
    let rows = || -> usize {
        segments_of(&prefix)
            .unwrap()
            .iter()
            .map(|f| SegmentReader::read_rows(f).unwrap().0.len())
            .sum()
    };
    wait_for("the 400 rows on disk", || rows() == 400);
    let segment = segments_of(&prefix).unwrap().remove(0);
    std::fs::remove_file(&segment).unwrap();
    // Nothing more is recorded: the exporter's timer notices within a second, and the next
    // collector flush moves the events from exported to lost.
    wait_for("the events counted lost", || {
        collector.stats().events_lost == 400
    });
    let s = collector.close();
    assert_eq!(
        (s.events_accepted, s.events_exported, s.events_lost),
        (400, 0, 400),
        "{s:?}"
    );
    assert_eq!(rows(), 0, "nothing counted exported, nothing on disk");
}
