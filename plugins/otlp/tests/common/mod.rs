//! What the `otlp` plug-in's tests against real receivers share (the Python receiver with the
//! official protobuf definitions, the OpenTelemetry Collector): the agent of this process, what
//! it records and pushes, and the checks of what arrived, on requests in the protobuf JSON
//! mapping with the field names of the `.proto` files (`resource_metrics`, `as_int`, ...), the
//! one `otlp_receiver.py` writes (reading such requests, and bringing the Collector's OTLP/JSON
//! to that form: test-support's `otlp_json`).
//!
//! The plug-in is a cdylib: `cargo build --workspace --all-targets` before `cargo test`.

#![allow(dead_code)] // not every test binary uses every helper

use nixl_telemetry_core::{Collector, Config};
pub use nixl_telemetry_test_support::otlp_json::{attributes, int, metric, point_value};
use serde_json::Value;

/// Every variable the tests set, cleared between tests.
const VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS",
    "NIXL_TELEMETRY_PUSH_INSTANCE",
    "LOCAL_RANK",
];

/// Takes the test lock (clearing [`VARS`]) and makes the plug-in findable.
pub fn serial() -> nixl_telemetry_test_support::Serial {
    nixl_telemetry_test_support::plugin_serial(&["otlp"], VARS)
}

/// A collector of agent `agent` exporting to the `otlp` plug-in (configured by the
/// environment), with no periodic flush during a test.
pub fn collector(agent: &str) -> Collector {
    let config = Config {
        buffer_size: 4096,
        ..nixl_telemetry_test_support::plugin_config("otlp")
    };
    Collector::new(agent, config).unwrap_or_else(|e| panic!("creating {agent}: {e:?}"))
}

/// Three transfers (two TX, one RX) and a flush: what [`push_recorded_once`] sends.
pub fn record(c: &Collector) {
    c.add_xfer_stats(30, true, 4096, 7);
    c.add_xfer_stats(700, true, 1000, 8);
    c.add_xfer_stats(20_000, false, 64, 9);
    c.flush();
}

/// Agent `otlp-agent` (rank 3, resource attribute `deployment.environment=test`, header
/// `x-tenant: a b`, gzip when `gzip`) pushing to `endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`)
/// records [`record`]'s transfers and is destroyed: its last push, with a 60 s interval its
/// only one. Hold [`serial`]'s guard.
pub fn push_recorded_once(endpoint: &str, gzip: bool) {
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    std::env::set_var("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=a%20b");
    std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test");
    std::env::set_var("LOCAL_RANK", "3");
    if gzip {
        std::env::set_var("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip");
    }
    let c = collector("otlp-agent");
    record(&c);
    drop(c);
}

/// What [`push_recorded_once`] sent, checked in `r` (`{"request": <the request>}`): the resource
/// attributes, every family by the `prometheus` exporter's name with its kind and cumulative
/// temporality, the sender's own counters, and every value recorded.
pub fn check_recorded(r: &Value) {
    let resource = attributes(&r["request"]["resource_metrics"][0]["resource"]["attributes"]);
    let keys: Vec<&str> = resource.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "deployment.environment",
            "host.name",
            "process.pid",
            "service.instance.id",
            "service.name"
        ]
    );
    assert!(resource.contains(&("service.name".into(), "nixl".into())));
    assert!(resource.contains(&("process.pid".into(), std::process::id().to_string())));
    // Every family of the prometheus exporter, by the same name.
    let metrics = r["request"]["resource_metrics"][0]["scope_metrics"][0]["metrics"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = metrics
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = nixl_telemetry_series::families()
        .iter()
        .map(|f| f.name)
        .chain(nixl_telemetry_push::PUSH_COUNTERS.iter().map(|c| c.name))
        .collect();
    assert_eq!(names, expected);
    // The sender's own counters: monotonic Sums with the agent's attributes; the only push
    // (the last) counts none before it, and says the sender exits.
    for c in &nixl_telemetry_push::PUSH_COUNTERS {
        let m = metric(r, c.name);
        assert_eq!(m["sum"]["is_monotonic"], true, "{m}");
        let p = &m["sum"]["data_points"][0];
        let exits = c.name == "nixl_telemetry_push_exits_total";
        assert_eq!(int(&p["as_int"]), u64::from(exits), "{m}");
        assert_eq!(
            attributes(&p["attributes"]),
            [
                ("agent_name".to_owned(), "otlp-agent".to_owned()),
                ("local_rank".to_owned(), "3".to_owned())
            ]
        );
    }
    for m in metrics.iter().filter(|m| {
        !m["name"]
            .as_str()
            .unwrap()
            .starts_with("nixl_telemetry_push_")
    }) {
        let kind = nixl_telemetry_series::families()
            .iter()
            .find(|f| f.name == m["name"])
            .unwrap()
            .kind;
        match kind {
            nixl_telemetry_series::FamilyKind::Counter => {
                assert_eq!(m["sum"]["is_monotonic"], true, "{m}");
                assert_eq!(
                    m["sum"]["aggregation_temporality"],
                    "AGGREGATION_TEMPORALITY_CUMULATIVE"
                );
            }
            nixl_telemetry_series::FamilyKind::Gauge => assert!(m["gauge"].is_object(), "{m}"),
            nixl_telemetry_series::FamilyKind::Histogram => assert_eq!(
                m["histogram"]["aggregation_temporality"],
                "AGGREGATION_TEMPORALITY_CUMULATIVE"
            ),
        }
    }
    // Point attributes and values.
    let tx = &metric(r, "agent_tx_bytes_total")["sum"]["data_points"][0];
    assert_eq!(
        attributes(&tx["attributes"]),
        [
            ("agent_name".to_owned(), "otlp-agent".to_owned()),
            ("local_rank".to_owned(), "3".to_owned())
        ]
    );
    assert!(int(&tx["start_time_unix_nano"]) < int(&tx["time_unix_nano"]));
    assert_eq!(point_value(r, "agent_tx_bytes_total", None), 5096);
    assert_eq!(point_value(r, "agent_rx_bytes_total", None), 64);
    assert_eq!(point_value(r, "agent_tx_requests_num_total", None), 2);
    assert_eq!(point_value(r, "agent_tx_last_bytes", None), 1000);
    assert_eq!(point_value(r, "agent_xfer_time_total", None), 20_730);
    assert_eq!(point_value(r, "agent_errors_total", Some("backend")), 0);
    assert_eq!(
        metric(r, "agent_errors_total")["sum"]["data_points"]
            .as_array()
            .unwrap()
            .len(),
        12
    );
    let h = &metric(r, "agent_xfer_time_us")["histogram"]["data_points"][0];
    let bounds: Vec<f64> = h["explicit_bounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert_eq!(bounds, nixl_telemetry_series::DEFAULT_BUCKETS_US);
    let counts: Vec<u64> = h["bucket_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(int)
        .collect();
    assert_eq!(counts.len(), bounds.len() + 1);
    assert_eq!(counts.iter().sum::<u64>(), 3);
    assert_eq!(int(&h["count"]), 3);
    assert_eq!(h["sum"].as_f64(), Some(20_730.0));
    // 30 µs in (25, 50], 700 in (500, 1000], 20000 in (10000, 25000].
    let bucket_of = |v: f64| bounds.iter().position(|&b| v <= b).unwrap();
    for v in [30.0, 700.0, 20_000.0] {
        assert_eq!(counts[bucket_of(v)], 1, "{v}");
    }
}

/// The values [`push_exponential`] recorded, in the order recorded.
pub struct Exponential {
    /// Transfer times (µs).
    pub times: Vec<u64>,
    /// Post times (µs).
    pub posts: Vec<u64>,
    /// TX sizes (bytes).
    pub tx: Vec<u64>,
    /// RX sizes (bytes), the last one 0.
    pub rx: Vec<u64>,
}

/// Agent `otlp-exp` with base-2 exponential histograms pushing to `endpoint` records `n`
/// heavy-tailed transfers (times, and sizes from 4 KiB to 64 MiB, TX and RX in turn) and one
/// 0-byte RX, flushing every 500, and is destroyed (its last push). Hold [`serial`]'s guard.
pub fn push_exponential(endpoint: &str, n: usize) -> Exponential {
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
        "base2_exponential_bucket_histogram",
    );
    record_exponential(n)
}

/// [`push_exponential`]'s agent and transfers, configured by the process's settings alone (the
/// environment, then NIXL's configuration file): what it records.
pub fn record_exponential(n: usize) -> Exponential {
    let c = collector("otlp-exp");
    let transfers = nixl_telemetry_test_support::transfers::heavy_tailed(n);
    nixl_telemetry_test_support::transfers::record(&c, &transfers, |i| i % 2 == 0);
    c.add_xfer_stats(5, false, 0, 1);
    c.flush();
    drop(c);
    exponential_values(n)
}

/// The values [`record_exponential`] records for `n` transfers.
pub fn exponential_values(n: usize) -> Exponential {
    let transfers = nixl_telemetry_test_support::transfers::heavy_tailed(n);
    let mut times: Vec<u64> = transfers.iter().map(|t| t.0).collect();
    times.push(5);
    let posts: Vec<u64> = times.iter().map(|t| t / 4).collect();
    let tx: Vec<u64> = transfers.iter().step_by(2).map(|t| t.1).collect();
    let mut rx: Vec<u64> = transfers.iter().skip(1).step_by(2).map(|t| t.1).collect();
    rx.push(0);
    Exponential {
        times,
        posts,
        tx,
        rx,
    }
}

/// The last push of [`push_exponential`], checked in `r`: each of its four histograms is the
/// exponential histogram of the values recorded, cumulative.
pub fn check_exponential_request(r: &Value, values: &Exponential) {
    check_exponential(r, "agent_xfer_time_us", &values.times);
    check_exponential(r, "agent_xfer_post_time_us", &values.posts);
    check_exponential(r, "agent_tx_request_size_bytes", &values.tx);
    check_exponential(r, "agent_rx_request_size_bytes", &values.rx);
    assert_eq!(
        metric(r, "agent_xfer_time_us")["exponential_histogram"]["aggregation_temporality"],
        "AGGREGATION_TEMPORALITY_CUMULATIVE"
    );
}

/// The exponential histogram point of metric `name`, checked against a native histogram of
/// the same values: count, sum, scale, zero count and buckets (OpenTelemetry's index is one
/// below Prometheus's).
pub fn check_exponential(request: &Value, name: &str, values: &[u64]) {
    let m = metric(request, name);
    let data = &m["exponential_histogram"];
    assert!(data.is_object(), "{name}: {m}");
    let p = &data["data_points"][0];
    let mut h = nixl_telemetry_series::NativeHistogram::default();
    values.iter().for_each(|&v| h.observe(v));
    assert_eq!(int(&p["count"]), h.count(), "{name}");
    assert_eq!(p["sum"].as_f64().unwrap(), h.sum() as f64, "{name}");
    assert_eq!(
        p["scale"].as_i64().unwrap_or(0),
        i64::from(h.schema()),
        "{name}"
    );
    assert_eq!(int(&p["zero_count"]), h.zero_count(), "{name}");
    let (offset, counts) = h.dense();
    assert_eq!(
        p["positive"]["offset"].as_i64().unwrap_or(0),
        i64::from(offset - 1),
        "{name}"
    );
    let got: Vec<u64> = p["positive"]["bucket_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(int)
        .collect();
    assert_eq!(got, counts, "{name}");
}
