//! `nixl-telemetry stats`: a ring's summary, many rings and directories (a section per agent and
//! a node total), and the TRACE exporter's segments.

mod common;

use common::*;
use nixl_telemetry_core::{Event, EventType, RingWriter};

#[test]
fn stats_summarises_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "s", 64).unwrap();
    let mut events = Vec::new();
    for v in [10, 20, 35] {
        events.push(Event::new(EventType::AgentTxBytes, v));
    }
    for v in [5, 30, 200, 700] {
        events.push(Event::new(EventType::AgentXferTime, v));
    }
    ring.push_batch(&events);
    let path = dir.path().join("s");
    let text = stdout_of(&["stats".as_ref(), "--json".as_ref(), path.as_os_str()]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["total_events"], 7);
    assert_eq!(v["events"][0]["event"], "agent_tx_bytes");
    assert_eq!(
        (
            v["events"][0]["sum"].clone(),
            v["events"][0]["last"].clone()
        ),
        (65.into(), 35.into())
    );
    let d = &v["events"][1]["distribution"];
    assert_eq!((d["min"].as_u64(), d["max"].as_u64()), (Some(5), Some(700)));
    assert_eq!(d["mean"].as_f64(), Some(233.75));
}

#[test]
fn many_rings_and_directories_give_a_section_per_agent_and_a_node_total() {
    let dir = tempfile::tempdir().unwrap();
    let a = ring_with(dir.path(), "rank-0", &sample_events());
    let b = ring_with(dir.path(), "rank-1", &sample_events()[..2]);
    std::fs::write(
        dir.path().join("notes.txt"),
        "not a ring, just some text here\n",
    )
    .unwrap();
    // A directory and a file, the file also in the directory: each ring once.
    let out = cmd()
        .args(["stats", "--format", "json"])
        .arg(dir.path())
        .arg(a.path())
        .assert()
        .success()
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("skipping a file that is not a ring"),
        "{stderr}"
    );
    assert!(stderr.contains("notes.txt"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total_events"], 5);
    let agents = v["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(
        (
            agents[0]["agent"].as_str(),
            agents[0]["total_events"].as_u64()
        ),
        (Some("rank-0"), Some(3))
    );
    assert_eq!(
        (
            agents[1]["agent"].as_str(),
            agents[1]["total_events"].as_u64()
        ),
        (Some("rank-1"), Some(2))
    );
    assert_eq!(v["events"][0]["sum"], 200, "node total of agent_tx_bytes");
    let table = stdout_of(&["stats".as_ref(), dir.path().as_os_str()]);
    assert!(table.contains("== rank-0 (ring "), "{table}");
    assert!(table.contains("== node total (2 agents) =="), "{table}");
    // read: every ring of the directory, consumed, with the node total.
    let text = stdout_of(&["read".as_ref(), dir.path().as_os_str()]);
    assert!(text.contains("Agent: rank-1"), "{text}");
    assert!(
        text.contains("Node total: 5 events read from 2 rings"),
        "{text}"
    );
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn stats_reads_trace_exporter_segments_and_fpm_summary_points_to_it() {
    use nixl_telemetry_core::exporter::TraceExporterConfig;
    use nixl_telemetry_core::{Collector, Config, ExporterChoice, MetricMask};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("trace");
    let config = Config {
        buffer_size: 64,
        run_interval: std::time::Duration::from_millis(10),
        exporter: ExporterChoice::Trace(TraceExporterConfig {
            path: prefix.clone(),
            ..TraceExporterConfig::default()
        }),
        enabled_metrics: MetricMask::ALL,
    };
    let c = Collector::new("traced", config).unwrap();
    c.add_xfer_stats(120, true, 4096, 8);
    c.add_xfer_stats(80, false, 1024, 4);
    c.close();
    let agent_prefix = dir.path().join("trace.traced");
    let v = stats_json(&[&agent_prefix]);
    assert_eq!(v["total_events"], 8);
    assert_eq!(v["agents"][0]["agent"], "traced");
    assert!(v["agents"][0]["source"]
        .as_str()
        .unwrap()
        .starts_with("TRACE "));
    let (_, err) = run_with_status(
        &["fpm".as_ref(), "summary".as_ref(), agent_prefix.as_os_str()],
        1,
    );
    assert!(
        err.contains("TRACE exporter") && err.contains("nixl-telemetry stats"),
        "{err}"
    );
}
