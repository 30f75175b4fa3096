//! Native histograms through the `prometheus` plug-in (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true`):
//! the protobuf exposition chosen by the `Accept` header, and the accuracy of `histogram_quantile`
//! in a real Prometheus (Debian's 2.42, `--enable-feature=native-histograms`) against the exact
//! quantiles of the recorded transfers, beside the classic buckets' (scraped as text by a second
//! Prometheus without the feature, since 2.42 keeps only the native buckets of a histogram that
//! has both).

mod common;

use std::time::Duration;

use common::*;
use nixl_telemetry_series::native::{bucket_width_bound, relative_error_bound, DEFAULT_SCHEMA};
use nixl_telemetry_series::protobuf::{self, MetricFamily};
use nixl_telemetry_test_support::prometheus::{poll, Prometheus};
use nixl_telemetry_test_support::transfers::{heavy_tailed, relative_error as error};

#[test]
fn text_stays_the_default_and_protobuf_is_answered_when_asked() {
    let _s = serial();
    let port = free_port();
    use_port(port);
    // Off (the default): the protobuf Accept gets the text page.
    let c = collector("off");
    let (ct, _) = scrape_as(port, ACCEPT_PROTOBUF);
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    drop(c);
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true");
    let c = collector("on");
    c.add_xfer_stats(100, true, 4096, 7);
    c.add_xfer_stats(200, false, 65536, 9);
    c.flush();
    let text = scrape_text(port);
    assert!(!text.contains("request_size"), "{text}");
    let (ct, body) = scrape_as(port, ACCEPT_PROTOBUF);
    assert_eq!(ct, protobuf::CONTENT_TYPE);
    let families = protobuf::decode(&body).unwrap();
    let family = |n: &str| -> &MetricFamily { families.iter().find(|f| f.name == n).unwrap() };
    let time = family("agent_xfer_time_us").metric[0]
        .histogram
        .as_ref()
        .unwrap();
    assert_eq!((time.sample_count, time.sample_sum), (2, 300.0));
    assert_eq!(time.bucket.len(), 18, "the classic buckets stay beside");
    assert_eq!(time.schema, i32::from(DEFAULT_SCHEMA));
    let tx = family("agent_tx_request_size_bytes").metric[0]
        .histogram
        .as_ref()
        .unwrap();
    assert_eq!((tx.sample_count, tx.sample_sum), (1, 4096.0));
    let rx = family("agent_rx_request_size_bytes").metric[0]
        .histogram
        .as_ref()
        .unwrap();
    assert_eq!((rx.sample_count, rx.sample_sum), (1, 65536.0));
    drop(c);
    std::env::remove_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS");
}

#[test]
fn an_invalid_setting_fails_the_creation() {
    let _s = serial();
    use_port(free_port());
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "sometimes");
    let r = nixl_telemetry_core::Collector::new(
        "bad",
        nixl_telemetry_core::Config {
            buffer_size: 64,
            run_interval: Duration::from_secs(3600),
            exporter: nixl_telemetry_core::ExporterChoice::Plugin("prometheus".into()),
            enabled_metrics: nixl_telemetry_core::MetricMask::ALL,
        },
    );
    std::env::remove_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS");
    assert!(r.is_err());
}

#[test]
fn histogram_quantile_over_native_histograms_is_within_the_schemas_bound() {
    let _s = serial();
    let port = free_port();
    use_port(port);
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true");
    let c = collector("acc");
    // Heavy-tailed durations and sizes from 4 KiB to 64 MiB (see `heavy_tailed`).
    let n = 6000;
    let transfers = heavy_tailed(n);
    for (i, &(time, size)) in transfers.iter().enumerate() {
        c.add_xfer_stats(time, true, size, time / 4);
        if i % 500 == 499 {
            c.flush();
        }
    }
    let mut times: Vec<u64> = transfers.iter().map(|t| t.0).collect();
    let mut sizes: Vec<u64> = transfers.iter().map(|t| t.1).collect();
    c.flush();
    times.sort_unstable();
    sizes.sort_unstable();

    let dir = tempfile::tempdir().unwrap();
    let (native_dir, classic_dir) = (dir.path().join("native"), dir.path().join("classic"));
    std::fs::create_dir_all(&native_dir).unwrap();
    std::fs::create_dir_all(&classic_dir).unwrap();
    let native = Prometheus::start_native(&native_dir, Some(port));
    let classic = Prometheus::start(&classic_dir, Some(port), None);
    native.wait_for_value(
        "histogram_count(agent_xfer_time_us{agent_name=\"acc\"})",
        n as f64,
    );
    native.wait_for_value(
        "histogram_count(agent_tx_request_size_bytes{agent_name=\"acc\"})",
        n as f64,
    );
    classic.wait_for_value("agent_xfer_time_us_count{agent_name=\"acc\"}", n as f64);
    // The native Prometheus ingested native histograms, not classic buckets.
    poll("no classic buckets in the native Prometheus", || {
        native
            .vector("count(agent_xfer_time_us_bucket)")
            .filter(|v| v.is_empty())
    });

    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    println!(
        "schema {DEFAULT_SCHEMA}: histogram_quantile bound (b-1) {:.4}%, grid bound (b-1)/(b+1) {:.4}%",
        100.0 * bound,
        100.0 * relative_error_bound(DEFAULT_SCHEMA)
    );
    let time = native.assert_native_quantiles(
        "time (µs)",
        "agent_xfer_time_us{agent_name=\"acc\"}",
        &times,
        bound,
    );
    // The same histograms as the exporter serves them, for NativeHistogram's own estimate
    // (what `nixl-telemetry top` shows): PromQL's, to rounding.
    let (_, body) = scrape_as(port, ACCEPT_PROTOBUF);
    let families = protobuf::decode(&body).unwrap();
    let served = |name: &str| {
        let f = families.iter().find(|f| f.name == name).unwrap();
        let h = f.metric[0].histogram.as_ref().unwrap();
        h.native().unwrap().unwrap()
    };
    let same = |ours: f64, promql: f64| (ours - promql).abs() <= 1e-9 * promql;
    for (q, x, nat) in time {
        let ours = served("agent_xfer_time_us").histogram_quantile(q).unwrap();
        assert!(same(ours, nat), "time p{q}: ours {ours}, PromQL {nat}");
        let cla = classic.one_value(&format!(
            "histogram_quantile({q}, agent_xfer_time_us_bucket{{agent_name=\"acc\"}})"
        ));
        println!(
            "time p{:<4} classic {cla:>10.1} ({:.2}%)",
            q * 100.0,
            100.0 * error(cla, x)
        );
    }
    let size = native.assert_native_quantiles(
        "size (B, no classic buckets)",
        "agent_tx_request_size_bytes{agent_name=\"acc\"}",
        &sizes,
        bound,
    );
    for (q, _, nat) in size {
        let ours = served("agent_tx_request_size_bytes")
            .histogram_quantile(q)
            .unwrap();
        assert!(same(ours, nat), "size p{q}: ours {ours}, PromQL {nat}");
    }
    drop(c);
    std::env::remove_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS");
}
