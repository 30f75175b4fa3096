//! The `otlp` plug-in loaded in this process, pushing to a receiver that decodes every request
//! with the official OpenTelemetry protobuf definitions in Python (`otlp_receiver.py`, the
//! `opentelemetry-proto` package from PyPI, installed by scripts/install-test-deps.sh): metric
//! names, types, temporality, monotonicity, bucket bounds, resource and point attributes, and
//! values equal to what was recorded, with gzip on and off; delta temporality gives
//! per-interval values that add up to the cumulative ones, also when the receiver reports a
//! partial success.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nixl_telemetry_core::{plugin, Collector, Config, ExporterChoice, MetricMask};
use serde_json::Value;

const VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
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

fn serial() -> nixl_telemetry_test_support::Serial {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = nixl_telemetry_test_support::built_plugins(&["otlp"]);
        plugin::add_plugin_dir(&dir).unwrap();
    });
    nixl_telemetry_test_support::serial(VARS)
}

/// The Python receiver; killed when dropped.
struct PyReceiver {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for PyReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PyReceiver {
    fn start(partial: Option<&str>) -> PyReceiver {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("requests.jsonl");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_receiver.py");
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(p) = partial {
            cmd.env("OTLP_TEST_PARTIAL", p);
        }
        let mut child = cmd.spawn().expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .strip_prefix("PORT ")
            .unwrap_or_else(|| {
                panic!("otlp_receiver.py did not start (pip install opentelemetry-proto): {line}")
            })
            .trim()
            .parse()
            .unwrap();
        PyReceiver {
            child,
            port,
            out,
            _dir: dir,
        }
    }

    /// Every decoded request so far: the complete lines of the receiver's output (it may be
    /// writing the last one while this reads).
    fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
        complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn wait_for(&self, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let r = self.requests();
            if r.len() >= n {
                return r;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} of {n} requests",
                r.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn collector(agent: &str) -> Collector {
    Collector::new(
        agent,
        Config {
            buffer_size: 4096,
            run_interval: Duration::from_secs(3600),
            exporter: ExporterChoice::Plugin("otlp".into()),
            enabled_metrics: MetricMask::ALL,
        },
    )
    .unwrap_or_else(|e| panic!("creating {agent}: {e:?}"))
}

/// The metric named `name` of a decoded request.
fn metric<'a>(request: &'a Value, name: &str) -> &'a Value {
    let metrics = request["request"]["resource_metrics"][0]["scope_metrics"][0]["metrics"]
        .as_array()
        .unwrap();
    metrics
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// A JSON integer (protobuf's JSON writes 64-bit integers as strings; absent is 0).
fn int(v: &Value) -> u64 {
    match v {
        Value::Null => 0,
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap(),
    }
}

fn attributes(v: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|kv| {
            let value = &kv["value"];
            let text = value["string_value"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| int(&value["int_value"]).to_string());
            (kv["key"].as_str().unwrap().to_owned(), text)
        })
        .collect();
    out.sort();
    out
}

/// The single point of a Sum or Gauge metric with these extra attributes.
fn point_value(request: &Value, name: &str, status: Option<&str>) -> u64 {
    let m = metric(request, name);
    let data = if m["sum"].is_object() {
        &m["sum"]
    } else {
        &m["gauge"]
    };
    let points = data["data_points"].as_array().unwrap();
    let p = points
        .iter()
        .find(|p| {
            status
                .is_none_or(|s| attributes(&p["attributes"]).contains(&("status".into(), s.into())))
        })
        .unwrap();
    int(&p["as_int"])
}

fn record(c: &Collector) {
    c.add_xfer_stats(30, true, 4096, 7);
    c.add_xfer_stats(700, true, 1000, 8);
    c.add_xfer_stats(20_000, false, 64, 9);
    c.flush();
}

fn check_cumulative(gzip: bool) {
    let _s = serial();
    let rx = PyReceiver::start(None);
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", rx.port),
    );
    std::env::set_var("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=a%20b");
    std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test");
    std::env::set_var("LOCAL_RANK", "3");
    if gzip {
        std::env::set_var("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip");
    }
    let c = collector("otlp-agent");
    record(&c);
    drop(c);
    let all = rx.requests();
    assert_eq!(all.len(), 1, "the last push only (the interval is 60 s)");
    let r = &all[0];
    assert_eq!(r["path"], "/v1/metrics");
    assert_eq!(r["headers"]["content-type"], "application/x-protobuf");
    assert_eq!(r["headers"]["x-tenant"], "a b");
    assert_eq!(
        r["headers"]["content-encoding"].as_str(),
        gzip.then_some("gzip")
    );
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
    // (the last) counts none before it.
    for c in &nixl_telemetry_push::PUSH_COUNTERS {
        let m = metric(r, c.name);
        assert_eq!(m["sum"]["is_monotonic"], true, "{m}");
        let p = &m["sum"]["data_points"][0];
        assert_eq!(int(&p["as_int"]), 0, "{m}");
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

#[test]
fn cumulative_without_compression() {
    check_cumulative(false);
}

#[test]
fn cumulative_with_gzip() {
    check_cumulative(true);
}

#[test]
fn delta_values_add_up_to_the_cumulative_totals() {
    let _s = serial();
    let rx = PyReceiver::start(Some("3 points too old"));
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        format!("http://127.0.0.1:{}/v1/metrics", rx.port),
    );
    std::env::set_var("OTEL_METRIC_EXPORT_INTERVAL", "100");
    std::env::set_var("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta");
    std::env::set_var("OTEL_SERVICE_NAME", "delta-test");
    let c = collector("delta-agent");
    let (mut bytes, mut transfers) = (0u64, 0u64);
    for round in 1..=5u64 {
        let n = rx.requests().len();
        for i in 0..round {
            c.add_xfer_stats(10 * i, true, 100 * round, 1);
            bytes += 100 * round;
            transfers += 1;
        }
        c.flush();
        rx.wait_for(n + 2);
    }
    drop(c);
    let all = rx.requests();
    let (mut sum_bytes, mut sum_count) = (0u64, 0u64);
    let mut last_time = 0;
    for r in &all {
        let m = metric(r, "agent_tx_bytes_total");
        assert_eq!(
            m["sum"]["aggregation_temporality"],
            "AGGREGATION_TEMPORALITY_DELTA"
        );
        assert_eq!(m["sum"]["is_monotonic"], true);
        let p = &m["sum"]["data_points"][0];
        // Each period starts where the previous accepted one ended.
        if last_time != 0 {
            assert_eq!(int(&p["start_time_unix_nano"]), last_time);
        }
        last_time = int(&p["time_unix_nano"]);
        sum_bytes += int(&p["as_int"]);
        let h = &metric(r, "agent_xfer_time_us")["histogram"];
        assert_eq!(
            h["aggregation_temporality"],
            "AGGREGATION_TEMPORALITY_DELTA"
        );
        sum_count += int(&h["data_points"][0]["count"]);
        let resource = attributes(&r["request"]["resource_metrics"][0]["resource"]["attributes"]);
        assert!(resource.contains(&("service.name".into(), "delta-test".into())));
    }
    assert!(all.len() >= 10);
    assert_eq!(sum_bytes, bytes);
    // The sender's own counters in delta too: the successes of all but the last request add
    // up to the requests before it (the receiver accepted every one).
    let successes: u64 = all
        .iter()
        .map(|r| {
            let m = metric(r, "nixl_telemetry_push_successes_total");
            assert_eq!(
                m["sum"]["aggregation_temporality"],
                "AGGREGATION_TEMPORALITY_DELTA"
            );
            int(&m["sum"]["data_points"][0]["as_int"])
        })
        .sum();
    assert_eq!(successes, all.len() as u64 - 1);
    assert_eq!(sum_count, transfers);
}

/// The marker of [`two_processes_child`]'s process.
const CHILD: &str = "OTLP_TEST_TWIN";

/// A child process of [`two_processes_with_one_agent_name_have_distinct_instance_ids`]: one
/// agent named `twin` records [`record`]'s transfers and is destroyed (its last push).
#[test]
fn two_processes_child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    // Not `serial()`: it would clear the endpoint the parent set.
    plugin::add_plugin_dir(&nixl_telemetry_test_support::built_plugins(&["otlp"])).unwrap();
    let c = collector("twin");
    record(&c);
    drop(c);
}

/// Two processes with the same agent name on one host, without a rank variable and with the
/// same one, push with distinct `service.instance.id`s (`<host>:<pid>`), each its own exact
/// totals, which add up to twice what one recorded.
#[test]
fn two_processes_with_one_agent_name_have_distinct_instance_ids() {
    let _s = serial();
    for rank in [None, Some("0")] {
        let rx = PyReceiver::start(None);
        let pids: Vec<u32> = (0..2)
            .map(|_| {
                let mut cmd = nixl_telemetry_test_support::child::test("two_processes_child");
                cmd.env(CHILD, "1").env(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://127.0.0.1:{}", rx.port),
                );
                if let Some(r) = rank {
                    cmd.env("LOCAL_RANK", r);
                }
                cmd.spawn().unwrap()
            })
            .map(|mut child| {
                assert!(child.wait().unwrap().success());
                child.id()
            })
            .collect();
        let all = rx.wait_for(2);
        assert_eq!(all.len(), 2, "one last push each (the interval is 60 s)");
        let mut seen: Vec<(String, u64)> = all
            .iter()
            .map(|r| {
                let resource =
                    attributes(&r["request"]["resource_metrics"][0]["resource"]["attributes"]);
                let get = |k: &str| {
                    resource
                        .iter()
                        .find(|(n, _)| n == k)
                        .unwrap_or_else(|| panic!("no {k} in {resource:?}"))
                        .1
                        .clone()
                };
                let id = get("service.instance.id");
                assert_eq!(id, format!("{}:{}", get("host.name"), get("process.pid")));
                let tx = &metric(r, "agent_tx_bytes_total")["sum"]["data_points"][0];
                let mut expected = vec![("agent_name".to_owned(), "twin".to_owned())];
                expected.extend(rank.map(|r| ("local_rank".to_owned(), r.to_owned())));
                assert_eq!(attributes(&tx["attributes"]), expected);
                (get("process.pid"), int(&tx["as_int"]))
            })
            .collect();
        seen.sort();
        let mut expected: Vec<(String, u64)> = pids.iter().map(|p| (p.to_string(), 5096)).collect();
        expected.sort();
        assert_eq!(seen, expected, "rank {rank:?}");
        assert_eq!(seen.iter().map(|s| s.1).sum::<u64>(), 2 * 5096);
    }
}

/// `NIXL_TELEMETRY_PUSH_INSTANCE` names the sender (`service.instance.id`), and
/// `OTEL_RESOURCE_ATTRIBUTES=service.instance.id=...` wins over it.
#[test]
fn a_user_set_instance_wins() {
    let _s = serial();
    for (attrs, expected) in [
        ("", "job-7/rank-0"),
        ("service.instance.id=otel-id", "otel-id"),
    ] {
        let rx = PyReceiver::start(None);
        std::env::set_var(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", rx.port),
        );
        std::env::set_var("NIXL_TELEMETRY_PUSH_INSTANCE", "job-7/rank-0");
        std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", attrs);
        let c = collector("named");
        record(&c);
        drop(c);
        let all = rx.wait_for(1);
        let resource =
            attributes(&all[0]["request"]["resource_metrics"][0]["resource"]["attributes"]);
        let ids: Vec<&str> = resource
            .iter()
            .filter(|(k, _)| k == "service.instance.id")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(ids, [expected]);
    }
}

/// The exponential histogram point of metric `name`, checked against a native histogram of
/// the same values: count, sum, scale, zero count and buckets (OpenTelemetry's index is one
/// below Prometheus's).
fn check_exponential(request: &Value, name: &str, values: &[u64]) {
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

#[test]
fn base2_exponential_aggregation_sends_the_native_histograms() {
    let _s = serial();
    let rx = PyReceiver::start(None);
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", rx.port),
    );
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
        "base2_exponential_bucket_histogram",
    );
    let c = collector("otlp-exp");
    // Heavy-tailed times and sizes from 4 KiB to 64 MiB, TX and RX in turn, and one 0-byte RX.
    let transfers = nixl_telemetry_test_support::transfers::heavy_tailed(3000);
    for (i, &(time, size)) in transfers.iter().enumerate() {
        c.add_xfer_stats(time, i % 2 == 0, size, time / 4);
        if i % 500 == 499 {
            c.flush();
        }
    }
    c.add_xfer_stats(5, false, 0, 1);
    c.flush();
    drop(c);
    let all = rx.requests();
    let r = all.last().unwrap();
    let mut times: Vec<u64> = transfers.iter().map(|t| t.0).collect();
    times.push(5);
    let posts: Vec<u64> = times.iter().map(|t| t / 4).collect();
    let tx: Vec<u64> = transfers.iter().step_by(2).map(|t| t.1).collect();
    let mut rx_sizes: Vec<u64> = transfers.iter().skip(1).step_by(2).map(|t| t.1).collect();
    rx_sizes.push(0);
    check_exponential(r, "agent_xfer_time_us", &times);
    check_exponential(r, "agent_xfer_post_time_us", &posts);
    check_exponential(r, "agent_tx_request_size_bytes", &tx);
    check_exponential(r, "agent_rx_request_size_bytes", &rx_sizes);
    assert_eq!(
        metric(r, "agent_xfer_time_us")["exponential_histogram"]["aggregation_temporality"],
        "AGGREGATION_TEMPORALITY_CUMULATIVE"
    );
}

#[test]
fn an_unknown_aggregation_fails_the_creation() {
    let _s = serial();
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9");
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
        "exponential",
    );
    let r = Collector::new(
        "otlp-bad",
        Config {
            buffer_size: 64,
            run_interval: Duration::from_secs(3600),
            exporter: ExporterChoice::Plugin("otlp".into()),
            enabled_metrics: MetricMask::ALL,
        },
    );
    assert!(r.is_err());
}
