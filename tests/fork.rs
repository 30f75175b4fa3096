//! The Rust API of a collector in a process that forks: the forking thread itself records into
//! the parent's collector (so its thread-local staging lane is the parent's at the fork), then
//! in the child the inherited collector says so, its flush does nothing, dropping it neither
//! hangs nor touches the parent's ring, and a new collector recorded into from the same thread
//! works.

use std::time::Duration;

use nixl_telemetry_core::{Collector, Config, EventType, ExporterChoice, MetricMask, RingReader};
use nixl_telemetry_test_support::forked;

fn buffer(dir: &std::path::Path, interval: Duration) -> Config {
    Config {
        buffer_size: 1024,
        run_interval: interval,
        exporter: ExporterChoice::Buffer(dir.to_owned(), nixl_telemetry_core::ring::layout::V4),
        enabled_metrics: MetricMask::ALL,
    }
}

#[test]
fn the_forking_thread_records_again_in_a_new_collector_of_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let parent = Collector::new("parent", buffer(dir.path(), Duration::from_millis(1))).unwrap();
    let mut reader = RingReader::open(dir.path().join("parent")).unwrap();
    for i in 0..100 {
        parent.update_data(EventType::AgentTxBytes, i);
    }
    let path = dir.path().to_owned();
    let mut child = forked::fork(|_| {
        assert!(parent.inherited());
        parent.flush();
        let own = Collector::new("child", buffer(&path, Duration::from_secs(3600))).unwrap();
        assert!(!own.inherited());
        let mut r = RingReader::open(path.join("child")).unwrap();
        for i in 0..10 {
            own.update_data(EventType::AgentRxBytes, 1000 + i);
        }
        own.add_xfer_stats(1, true, 2, 3);
        own.flush();
        let got: Vec<(u32, u64)> = r.by_ref().map(|e| (e.event_type, e.value)).collect();
        assert_eq!(got.len(), 14);
        assert_eq!(got[0], (EventType::AgentRxBytes as u32, 1000));
        assert_eq!(own.close().events_exported, 14);
        // SAFETY: the collector is the parent's; reading it by value leaves the parent's copy
        // of its memory untouched, and dropping it here must release nothing.
        drop(unsafe { std::ptr::read(&parent) });
        0
    });
    assert_eq!(child.wait(Duration::from_secs(60)), 0);
    for i in 100..110 {
        parent.update_data(EventType::AgentTxBytes, i);
    }
    let stats = parent.close();
    let values: Vec<u64> = reader.by_ref().map(|e| e.value).collect();
    assert_eq!(
        values,
        (0..110).collect::<Vec<u64>>(),
        "only the parent's events, once each"
    );
    assert_eq!(stats.events_exported, 110);
}
