//! `nixl-telemetry serve --push-only --otlp URL` into a real OpenTelemetry Collector (v0.165,
//! built from `test-deps/go/otelcol` by scripts/install-test-deps.sh) over https: what the
//! Collector's OTLP/HTTP receiver took, as its file exporter wrote it, is the sidecar's last
//! push at exit, with the ranks' totals and the sidecar's resource attributes exact. Without the
//! Go-built programs this test fails saying how to build them, unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;

use std::os::unix::fs::DirBuilderExt;

use common::sidecar::{rank_store, Sidecar};
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_series::{hostname, WorkloadLabels};
use nixl_telemetry_test_support::certs::{make_ca, server_certificate};
use nixl_telemetry_test_support::otlp_json::{attributes, int, metric, proto_field_names};
use nixl_telemetry_test_support::receivers::collector::{self, OtelCollector};
use nixl_telemetry_test_support::receivers::scratch;
use serde_json::Value;

/// The data points of metric `name` in `request` with their attributes, sorted by them (the
/// ranks' by their `local_rank`: their other attributes are alike).
fn points<'a>(request: &'a Value, name: &str) -> Vec<(Vec<(String, String)>, &'a Value)> {
    let m = metric(request, name);
    let data = ["sum", "gauge", "histogram"]
        .iter()
        .map(|k| &m[*k])
        .find(|d| d.is_object())
        .unwrap_or_else(|| panic!("{name}: {m}"));
    let mut points: Vec<_> = data["data_points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (attributes(&p["attributes"]), p))
        .collect();
    points.sort_by(|a, b| a.0.cmp(&b.0));
    points
}

/// Two ranks' stores (TX bytes 1000 and 2000, transfers of 30 and 60 µs; rank 0 sends 500 more
/// bytes once the sidecar runs) pushed by `serve --push-only --otlp https://...` with a 60 s
/// interval, stopped by SIGTERM: its only push is the last, at exit, and carries the ranks'
/// totals at that moment (1500 and 2000), each point with its rank's `agent_name`, `pid`,
/// `agent_instance`, `local_rank` and the job's `slurm_job_id`; the resource is the sidecar's
/// (`service.name` nixl, `service.instance.id` `<host>:<its pid>`, `host.name`, `process.pid`,
/// and `OTEL_RESOURCE_ATTRIBUTES`); its own counters say it exits.
#[test]
fn serve_pushes_exact_totals_and_its_resource_into_the_collector_at_exit() {
    let Some(work) = scratch() else { return };
    let certs = work.path();
    let ca = make_ca(certs, "ca");
    let (cert, key) = server_certificate(certs, "ca", "otelcol");
    let otelcol = OtelCollector::start(
        work.path(),
        &collector::Options {
            tls: Some((&cert, &key)),
            ..Default::default()
        },
    );
    // Each rank's bytes sent and transfer time (µs), one transfer each.
    let ranks = [(1000, 30), (2000, 60)];
    let dir = work.path().join("mp");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let writers: Vec<_> = ranks
        .iter()
        .zip(0..)
        .map(|(&(bytes, time), rank)| {
            let events = [
                Event::new(EventType::AgentTxBytes, bytes),
                Event::new(EventType::AgentTxRequestsNum, 1),
                Event::new(EventType::AgentXferTime, time),
            ];
            rank_store(&dir, "ranked", rank, WorkloadLabels::none(), false, &events)
        })
        .collect();
    let serve = Sidecar::start(
        &dir,
        &[
            "--push-only",
            "--otlp",
            &otelcol.endpoint(),
            "--push-ca-file",
            &ca.display().to_string(),
            "--push-interval-ms",
            "60000",
            "--stale-ttl",
            "300",
        ],
        &[
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ("NIXL_TELEMETRY_LABELS", "slurm_job_id=404"),
        ],
    );
    let pid = serve.id().to_string();
    writers[0].apply(&[Event::new(EventType::AgentTxBytes, 500)]);
    serve.stop();
    let all = otelcol.wait_for(1);
    assert_eq!(all.len(), 1, "the last push only (the interval is 60 s)");
    let r = proto_field_names(&all[0]);
    let resources = r["request"]["resource_metrics"].as_array().unwrap();
    assert_eq!(resources.len(), 1, "one resource, the sidecar's");
    let resource = attributes(&resources[0]["resource"]["attributes"]);
    let host = hostname();
    let expected: Vec<(String, String)> = [
        ("deployment.environment", "test".to_owned()),
        ("host.name", host.clone()),
        ("process.pid", pid.clone()),
        ("service.instance.id", format!("{host}:{pid}")),
        ("service.name", "nixl".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(resource, expected);
    let rank_pid = std::process::id().to_string();
    let tx = points(&r, "agent_tx_bytes_total");
    assert_eq!(tx.len(), 2, "{tx:?}");
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    // Rank 0's 500 bytes more came after the sidecar started.
    for (rank, ((attrs, point), value)) in tx.iter().zip([1500, 2000]).enumerate() {
        assert_eq!(int(&point["as_int"]), value, "rank {rank}");
        // Both stores are agents `ranked` of this process: the second is instance 1.
        assert_eq!(
            *attrs,
            [
                pair("agent_instance", &rank.to_string()),
                pair("agent_name", "ranked"),
                pair("local_rank", &rank.to_string()),
                pair("pid", &rank_pid),
                pair("slurm_job_id", "404"),
            ]
        );
    }
    let requests = points(&r, "agent_tx_requests_num_total");
    assert!(requests.iter().all(|(_, p)| int(&p["as_int"]) == 1));
    let times = points(&r, "agent_xfer_time_us");
    for (rank, ((_, point), (_, time))) in times.iter().zip(ranks).enumerate() {
        assert_eq!(int(&point["count"]), 1, "rank {rank}");
        assert_eq!(point["sum"].as_f64(), Some(time as f64), "rank {rank}");
    }
    // The sidecar's own counters: its one push says it exits.
    let exits = points(&r, "nixl_telemetry_push_exits_total");
    assert_eq!(exits.len(), 1);
    assert_eq!(int(&exits[0].1["as_int"]), 1);
    assert_eq!(
        exits[0].0,
        [pair("pusher", "serve"), pair("slurm_job_id", "404")]
    );
    assert!(!otelcol.log().contains("\terror\t"), "{}", otelcol.log());
    drop(writers);
}
