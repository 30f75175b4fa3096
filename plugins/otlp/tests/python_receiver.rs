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

mod common;

use common::*;
use nixl_telemetry_core::{plugin, Collector, Config, ExporterChoice, MetricMask};
use serde_json::Value;

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
        nixl_telemetry_test_support::receivers::json_lines(&self.out)
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

fn check_cumulative(gzip: bool) {
    let _s = serial();
    let rx = PyReceiver::start(None);
    push_recorded_once(&format!("http://127.0.0.1:{}", rx.port), gzip);
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
    check_recorded(r);
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

#[test]
fn base2_exponential_aggregation_sends_the_native_histograms() {
    let _s = serial();
    let rx = PyReceiver::start(None);
    let values = push_exponential(&format!("http://127.0.0.1:{}", rx.port), 3000);
    let all = rx.requests();
    check_exponential_request(all.last().unwrap(), &values);
}

/// The aggregation and the endpoint from NIXL's configuration file (`$HOME/.nixl.cfg`), as any
/// setting: the agent runs in a child process (the file is read once per process) with none of
/// the OTLP variables in its environment, and its last push carries exponential histograms.
#[test]
fn base2_exponential_aggregation_from_the_configuration_file() {
    if std::env::var_os("OTLP_TEST_FROM_FILE").is_some() {
        let _s = serial();
        record_exponential(3000);
        return;
    }
    let rx = PyReceiver::start(None);
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(".nixl.cfg"),
        format!(
            "OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:{}'\n\
             OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION = \
             'base2_exponential_bucket_histogram'\n",
            rx.port
        ),
    )
    .unwrap();
    let mut child = nixl_telemetry_test_support::child::test(
        "base2_exponential_aggregation_from_the_configuration_file",
    );
    child
        .env("OTLP_TEST_FROM_FILE", "1")
        .env("HOME", home.path())
        .env_remove(nixl_telemetry_base::settings::file::CONFIG_FILE_VAR);
    for s in nixl_telemetry_base::settings::SETTINGS {
        child.env_remove(s.name);
    }
    nixl_telemetry_test_support::child::output_ok(&mut child, "the agent of the file's settings");
    let all = rx.requests();
    check_exponential_request(all.last().unwrap(), &exponential_values(3000));
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
