//! The `remote_write` plug-in loaded in this process: what it sends (decoded back from snappy
//! and protobuf), a receiver that accepts and never answers (producers and flushes go on), and
//! bad configurations (creation fails naming the variable; nothing is sent).

use std::time::Duration;

use nixl_telemetry_core::{plugin, Collector, Config, ExporterChoice, MetricMask, Recorded};
use nixl_telemetry_push::remote_write::proto::WriteRequest;
use nixl_telemetry_test_support::receiver::{Answer, Receiver};
use prost::Message;

const VARS: &[&str] = &[
    "NIXL_TELEMETRY_REMOTE_WRITE_URL",
    "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
    "NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS",
    "NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS",
    "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
    "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER",
    "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE",
    "NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE",
    "NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE",
    "NIXL_TELEMETRY_RANK_ENV",
    "LOCAL_RANK",
];

fn serial() -> nixl_telemetry_test_support::Serial {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = nixl_telemetry_test_support::built_plugins(&["remote_write"]);
        plugin::add_plugin_dir(&dir).unwrap();
    });
    nixl_telemetry_test_support::serial(VARS)
}

fn collector(agent: &str, run_interval: Duration) -> nixl_telemetry_core::Result<Collector> {
    Collector::new(
        agent,
        Config {
            buffer_size: 4096,
            run_interval,
            exporter: ExporterChoice::Plugin("remote_write".into()),
            enabled_metrics: MetricMask::ALL,
        },
    )
}

fn decode(body: &[u8]) -> WriteRequest {
    let raw = snap::raw::Decoder::new().decompress_vec(body).unwrap();
    WriteRequest::decode(raw.as_slice()).unwrap()
}

#[test]
fn a_push_is_a_sorted_snappy_write_request_of_the_prometheus_series() {
    let _s = serial();
    let rx = Receiver::start(Answer::Status(204, String::new()));
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_URL", rx.url("/api/v1/write"));
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "3600000");
    std::env::set_var(
        "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
        "X-Scope-OrgID=team-a",
    );
    std::env::set_var("LOCAL_RANK", "5");
    let c = collector("decoded", Duration::from_secs(3600)).unwrap();
    c.add_xfer_stats(30, true, 4096, 7);
    c.add_xfer_stats(700, false, 100, 8);
    c.flush();
    drop(c);
    let got = rx.requests();
    assert_eq!(got.len(), 1, "the last push only");
    let r = &got[0];
    assert_eq!(r.path, "/api/v1/write");
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(r.header("content-encoding"), Some("snappy"));
    assert_eq!(r.header("x-prometheus-remote-write-version"), Some("0.1.0"));
    assert_eq!(r.header("x-scope-orgid"), Some("team-a"));
    assert!(r
        .header("user-agent")
        .unwrap()
        .starts_with("nixl-telemetry/"));
    let req = decode(&r.body);
    // The same samples as the text format shows: 9 counters, 6 gauges, 2 histograms of 19
    // buckets + sum + count, 12 error statuses; and the sender's 4 push counters.
    assert_eq!(
        req.timeseries.len(),
        9 + 6 + 2 * 21 + 12 + nixl_telemetry_push::PUSH_COUNTERS.len()
    );
    let key = |t: &nixl_telemetry_push::remote_write::proto::TimeSeries| {
        t.labels
            .iter()
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect::<Vec<_>>()
    };
    for pair in req.timeseries.windows(2) {
        assert!(key(&pair[0]) < key(&pair[1]), "series sorted by labels");
    }
    let ts = req.timeseries[0].samples[0].timestamp;
    let value = |name: &str, extra: Option<(&str, &str)>| -> f64 {
        let s = req
            .timeseries
            .iter()
            .find(|t| {
                let k = key(t);
                k.iter().any(|(n, v)| n == "__name__" && v == name)
                    && extra.is_none_or(|(n, v)| k.iter().any(|l| l.0 == n && l.1 == v))
            })
            .unwrap_or_else(|| panic!("{name} {extra:?}"));
        let names: Vec<&str> = s.labels.iter().map(|l| l.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "labels sorted by name");
        for l in ["__name__", "agent_name", "hostname", "local_rank"] {
            assert!(names.contains(&l), "{names:?}");
        }
        assert_eq!(s.samples.len(), 1);
        assert_eq!(s.samples[0].timestamp, ts);
        s.samples[0].value
    };
    assert_eq!(value("agent_tx_bytes_total", None), 4096.0);
    assert_eq!(value("agent_rx_bytes_total", None), 100.0);
    assert_eq!(value("agent_rx_last_bytes", None), 100.0);
    assert_eq!(value("agent_xfer_time_us_count", None), 2.0);
    assert_eq!(value("agent_xfer_time_us_sum", None), 730.0);
    assert_eq!(value("agent_xfer_time_us_bucket", Some(("le", "25"))), 0.0);
    assert_eq!(value("agent_xfer_time_us_bucket", Some(("le", "50"))), 1.0);
    assert_eq!(
        value("agent_xfer_time_us_bucket", Some(("le", "+Inf"))),
        2.0
    );
    assert_eq!(
        value("agent_errors_total", Some(("status", "backend"))),
        0.0
    );
    assert_eq!(
        value("agent_tx_bytes_total", Some(("local_rank", "5"))),
        4096.0
    );
    let now = nixl_telemetry_push::remote_write::now_ms();
    assert!(ts <= now && ts > now - 600_000);
}

#[test]
fn a_receiver_that_never_answers_does_not_hold_up_producers_or_flushes() {
    let _s = serial();
    let rx = Receiver::start(Answer::Never);
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_URL", rx.url("/api/v1/write"));
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "50");
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS", "3600000");
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS", "300");
    let c = collector("stuck", Duration::from_millis(20)).unwrap();
    // A push is in flight and will never be answered.
    rx.wait_for(1, Duration::from_secs(30));
    let before = c.stats();
    for _ in 0..200 {
        for i in 0..50 {
            assert_eq!(c.add_xfer_stats(i, true, 10, 1), Recorded::Accepted);
        }
        c.flush();
    }
    let after = c.stats();
    assert!(
        after.flushes >= before.flushes + 200,
        "{before:?} {after:?}"
    );
    assert_eq!(after.events_dropped, 0);
    assert_eq!(after.events_lost, 0);
    assert_eq!(after.events_exported, after.events_accepted);
    assert_eq!(rx.requests().len(), 1, "still the one push in flight");
    // Destroying the agent returns: the last push is bounded (the test would hang otherwise).
    drop(c);
}

#[test]
fn bad_configurations_fail_creation_naming_the_variable_and_send_nothing() {
    let _s = serial();
    let rx = Receiver::start(Answer::Status(204, String::new()));
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[], "NIXL_TELEMETRY_REMOTE_WRITE_URL is required"),
        (
            &[(
                "NIXL_TELEMETRY_REMOTE_WRITE_URL",
                "127.0.0.1:9090/api/v1/write",
            )],
            "NIXL_TELEMETRY_REMOTE_WRITE_URL=",
        ),
        (
            &[("NIXL_TELEMETRY_REMOTE_WRITE_URL", "ftp://127.0.0.1/x")],
            "scheme must be http or https",
        ),
        (
            &[("NIXL_TELEMETRY_REMOTE_WRITE_HEADERS", "X-Org")],
            "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS: pair 1 of 1 is not name=value",
        ),
        (
            &[(
                "NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE",
                "/nonexistent/token",
            )],
            "NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE='/nonexistent/token' cannot be opened",
        ),
        (
            &[("NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER", "u")],
            "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE is not",
        ),
        (
            &[("NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE", "/nonexistent/ca.pem")],
            "NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE='/nonexistent/ca.pem'",
        ),
        (
            &[("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "0")],
            "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS=0",
        ),
        (
            &[("NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS", "10s")],
            "NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS='10s'",
        ),
    ];
    for (vars, expected) in cases {
        for v in VARS {
            std::env::remove_var(v);
        }
        if !vars
            .iter()
            .any(|(n, _)| *n == "NIXL_TELEMETRY_REMOTE_WRITE_URL")
            && !vars.is_empty()
        {
            std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_URL", rx.url("/w"));
        }
        std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "10");
        for (n, v) in *vars {
            std::env::set_var(n, v);
        }
        let err = collector("bad", Duration::from_secs(3600))
            .err()
            .unwrap_or_else(|| panic!("{vars:?} was accepted"));
        assert!(err.message.contains(expected), "{vars:?}: {}", err.message);
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(rx.requests().is_empty(), "nothing is sent");
}
