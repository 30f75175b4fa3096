//! The `TRACE` exporter inside a collector: events reach its segments, and agents whose file
//! prefixes collide are refused while the first one writes.

use nixl_telemetry::exporter::TraceExporterConfig;
use nixl_telemetry::segments::{segments_of, SegmentReader};
use nixl_telemetry::{Collector, Config, EventType, ExporterChoice, Status};

#[test]
fn a_collector_with_the_trace_exporter_persists_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        exporter: ExporterChoice::Trace(TraceExporterConfig {
            path: dir.path().join("nixl"),
            ..TraceExporterConfig::default()
        }),
        ..Config::default()
    };
    let collector = Collector::new("agent-0", config).unwrap();
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
