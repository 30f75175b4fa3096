//! The `prometheus` exporter scraped by Prometheus 3.16 (built from `test-deps/go/prometheus` by
//! scripts/install-test-deps.sh), with the same exact numbers as the Prometheus 2.42 tests
//! (`real_prometheus.rs`, `native_histograms.rs`): the text exposition negotiated from the
//! `Accept` header 3.16 really sends, and with `scrape_native_histograms: true` (3.9 and later;
//! the 2.x flag `--enable-feature=native-histograms` does nothing there) the protobuf exposition
//! and `histogram_quantile` over the native histograms within the schema's bound (the
//! monitoring bundle's rules under promtool 3.16: `monitoring_rules.rs`). Without the Go-built
//! programs these tests fail saying how to build them, unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;

use common::*;
use nixl_telemetry_core::Collector;
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::receiver::{Answer, Receiver};
use nixl_telemetry_test_support::receivers::prometheus3::{self, Forward, Options};
use nixl_telemetry_test_support::receivers::scratch;
use nixl_telemetry_test_support::transfers::{assert_quantiles, heavy_tailed, record};

/// The `Accept` header Prometheus 3.16 scrapes `recorder` with (a second target of `prom`: it
/// answers nothing Prometheus takes, but records the request), and the format our exporter
/// on `port` answers it with.
fn negotiated(recorder: &Receiver, port: u16) -> (String, String) {
    let accept = recorder.wait_for(1, std::time::Duration::from_secs(60))[0]
        .header("accept")
        .expect("Prometheus sends Accept")
        .to_owned();
    let (content_type, _) = scrape_as(port, &accept);
    println!("Prometheus 3.16 Accept: {accept}\nanswered: {content_type}");
    (accept, content_type)
}

/// Agent `agent` of this process with native histograms on, exporting on a free port, after
/// `n` heavy-tailed TX transfers: the port, the agent and the transfers.
fn native_agent(agent: &str, n: usize) -> (u16, Collector, Vec<(u64, u64)>) {
    let port = free_port();
    use_port(port);
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true");
    let c = collector(agent);
    let transfers = heavy_tailed(n);
    record(&c, &transfers, |_| true);
    (port, c, transfers)
}

#[test]
fn prometheus3_scrapes_the_text_exposition_exactly() {
    let Some(dir) = scratch() else { return };
    let _s = serial();
    let recorder = Receiver::start(Answer::Status(200, String::new()));
    let mut scraped = 0;
    // 3.x stores `le` as a float's text: the exposition's le="50" is le="50.0" there.
    let (prom, _c) = scraped_exactly("prom3-text", "50.0", |port| {
        scraped = port;
        prometheus3::start(
            dir.path(),
            &Options {
                targets: &[port, recorder.port()],
                ..Options::default()
            },
        )
    });
    // A selector on 2.x's le="50" finds nothing.
    assert_eq!(
        prom.vector("agent_xfer_time_us_bucket{agent_name=\"prom3-text\",le=\"50\"}"),
        Some(vec![])
    );
    // 3.x asks for OpenMetrics first, then text 1.0.0 and 0.0.4: we answer text 0.0.4.
    let (accept, content_type) = negotiated(&recorder, scraped);
    assert!(
        accept.starts_with("application/openmetrics-text"),
        "{accept}"
    );
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
}

#[test]
fn prometheus3_with_scrape_native_histograms_gets_them_within_the_schemas_bound() {
    let Some(dir) = scratch() else { return };
    let _s = serial();
    let agent = "prom3-native";
    let n = 6000;
    let (port, _c, transfers) = native_agent(agent, n);
    let mut times: Vec<u64> = transfers.iter().map(|t| t.0).collect();
    let mut sizes: Vec<u64> = transfers.iter().map(|t| t.1).collect();
    times.sort_unstable();
    sizes.sort_unstable();
    let recorder = Receiver::start(Answer::Status(200, String::new()));
    let prom = prometheus3::start(
        dir.path(),
        &Options {
            targets: &[port, recorder.port()],
            native: true,
            ..Options::default()
        },
    );
    // Protobuf first in 3.x's Accept: we answer protobuf.
    let (accept, content_type) = negotiated(&recorder, port);
    assert!(
        accept.starts_with("application/vnd.google.protobuf"),
        "{accept}"
    );
    assert_eq!(content_type, nixl_telemetry_series::protobuf::CONTENT_TYPE);

    let sel = format!("{{agent_name=\"{agent}\"}}");
    prom.wait_for_value(
        &format!("histogram_count(agent_xfer_time_us{sel})"),
        n as f64,
    );
    prom.wait_for_value(
        &format!("histogram_sum(agent_tx_request_size_bytes{sel})"),
        sizes.iter().sum::<u64>() as f64,
    );
    prom.wait_for_value(
        &format!("histogram_count(agent_tx_request_size_bytes{sel})"),
        n as f64,
    );
    prom.wait_for_value(
        &format!("agent_tx_bytes_total{sel}"),
        sizes.iter().sum::<u64>() as f64,
    );
    // The native buckets only, as 2.42 with its flag keeps them.
    assert_eq!(
        prom.vector("count(agent_xfer_time_us_bucket)"),
        Some(vec![])
    );
    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    for (what, family, sorted) in [
        ("time (µs)", "agent_xfer_time_us", &times),
        ("size (B)", "agent_tx_request_size_bytes", &sizes),
    ] {
        assert_quantiles(what, sorted, bound, |q| {
            prom.one_value(&format!("histogram_quantile({q}, {family}{sel})"))
        });
    }
}

/// The 2.x way, `--enable-feature=native-histograms` without `scrape_native_histograms`, gets
/// Prometheus 3.16 no native histograms: it only warns at start, scrapes asking for text first,
/// and stores the classic buckets.
#[test]
fn prometheus3_ignores_the_2x_native_histograms_flag() {
    let Some(dir) = scratch() else { return };
    let _s = serial();
    let (port, _c, _) = native_agent("prom3-flag", 100);
    let recorder = Receiver::start(Answer::Status(200, String::new()));
    let prom = prometheus3::start(
        dir.path(),
        &Options {
            targets: &[port, recorder.port()],
            flags: &["--enable-feature=native-histograms"],
            ..Options::default()
        },
    );
    let (accept, content_type) = negotiated(&recorder, port);
    assert!(
        accept.starts_with("application/openmetrics-text"),
        "{accept}"
    );
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    prom.wait_for_value("agent_xfer_time_us_count{agent_name=\"prom3-flag\"}", 100.0);
    assert_eq!(
        prom.vector("histogram_count(agent_xfer_time_us{agent_name=\"prom3-flag\"})"),
        Some(vec![])
    );
    let log = prom.log_text();
    assert!(
        log.contains("This option for --enable-feature is a no-op")
            && log.contains("scrape_native_histograms"),
        "{log}"
    );
}

/// A Prometheus 3.16 that scrapes native histograms forwards them by remote write only with
/// `send_native_histograms: true`: of two such servers forwarding to a third, the one with it
/// delivers the histograms, the one without only the other series.
#[test]
fn prometheus3_forwards_native_histograms_only_with_send_native_histograms() {
    let Some(dir) = scratch() else { return };
    let _s = serial();
    let n = 1000;
    let (port, _c, transfers) = native_agent("prom3-forward", n);
    let work = |name: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir(&path).unwrap();
        path
    };
    let store = prometheus3::start(&work("store"), &Options::default());
    let _senders: Vec<_> = [("with", true), ("without", false)]
        .into_iter()
        .map(|(sender, send_native_histograms)| {
            let forward = Forward {
                url: &store.write_url(),
                send_native_histograms,
                sender,
            };
            prometheus3::start(
                &work(sender),
                &Options {
                    targets: &[port],
                    native: true,
                    forward: Some(forward),
                    ..Options::default()
                },
            )
        })
        .collect();
    let total: u64 = transfers.iter().map(|t| t.1).sum();
    for sender in ["with", "without"] {
        store.wait_for_value(
            &format!("agent_tx_bytes_total{{sender=\"{sender}\"}}"),
            total as f64,
        );
    }
    store.wait_for_value(
        "histogram_count(agent_xfer_time_us{sender=\"with\"})",
        n as f64,
    );
    assert_eq!(
        store.vector("count({__name__=~\"agent_xfer_time_us.*\", sender=\"without\"})"),
        Some(vec![])
    );
}
