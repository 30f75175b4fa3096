//! Native histogram samples pushed by the `remote_write` plug-in
//! (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true`) into a real Prometheus (Debian's 2.42 with
//! `--enable-feature=native-histograms` and its remote-write receiver): `histogram_quantile`
//! over them against the exact quantiles of the recorded transfers, and the classic series
//! beside them in the same requests.

use std::time::Duration;

use nixl_telemetry_core::{plugin, Collector, Config, ExporterChoice, MetricMask};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::prometheus::Prometheus;
use nixl_telemetry_test_support::transfers::{exact_quantile, heavy_tailed, relative_error};

const VARS: &[&str] = &[
    "NIXL_TELEMETRY_REMOTE_WRITE_URL",
    "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
    "NIXL_TELEMETRY_NATIVE_HISTOGRAMS",
    "NIXL_TELEMETRY_RANK_ENV",
    "LOCAL_RANK",
];

#[test]
fn histogram_quantile_over_pushed_native_histograms_is_within_the_schemas_bound() {
    let _s = nixl_telemetry_test_support::serial(VARS);
    let dir = nixl_telemetry_test_support::built_plugins(&["remote_write"]);
    plugin::add_plugin_dir(&dir).unwrap();
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start_native(work.path(), None);
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_URL", prom.write_url());
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "200");
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true");
    let c = Collector::new(
        "pushed",
        Config {
            buffer_size: 4096,
            run_interval: Duration::from_secs(3600),
            exporter: ExporterChoice::Plugin("remote_write".into()),
            enabled_metrics: MetricMask::ALL,
        },
    )
    .unwrap();
    let n = 6000;
    let transfers = heavy_tailed(n);
    for (i, &(time, size)) in transfers.iter().enumerate() {
        c.add_xfer_stats(time, i % 2 == 0, size, time / 4);
        if i % 500 == 499 {
            c.flush();
        }
    }
    c.flush();
    let selector = "{agent_name=\"pushed\"}";
    prom.wait_for_value(
        &format!("histogram_count(agent_xfer_time_us{selector})"),
        n as f64,
    );
    prom.wait_for_value(
        &format!("histogram_count(agent_tx_request_size_bytes{selector})"),
        (n / 2) as f64,
    );
    prom.wait_for_value(&format!("agent_xfer_time_us_count{selector}"), n as f64);

    let mut times: Vec<u64> = transfers.iter().map(|t| t.0).collect();
    let mut tx: Vec<u64> = transfers.iter().step_by(2).map(|t| t.1).collect();
    let mut rx: Vec<u64> = transfers.iter().skip(1).step_by(2).map(|t| t.1).collect();
    times.sort_unstable();
    tx.sort_unstable();
    rx.sort_unstable();
    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    println!("quantile  exact  native (error)  classic (error)");
    for q in [0.5, 0.9, 0.99] {
        let x = exact_quantile(&times, q);
        let native = prom.one_value(&format!(
            "histogram_quantile({q}, agent_xfer_time_us{selector})"
        ));
        let classic = prom.one_value(&format!(
            "histogram_quantile({q}, agent_xfer_time_us_bucket{selector})"
        ));
        println!(
            "time p{:<4} {x:>8} µs  {native:>10.1} ({:.2}%)  {classic:>10.1} ({:.2}%)",
            q * 100.0,
            100.0 * relative_error(native, x),
            100.0 * relative_error(classic, x)
        );
        assert!(
            relative_error(native, x) <= bound,
            "time p{q}: {native} vs {x}"
        );
    }
    for (family, sorted) in [
        ("agent_tx_request_size_bytes", &tx),
        ("agent_rx_request_size_bytes", &rx),
    ] {
        for q in [0.5, 0.9, 0.99] {
            let x = exact_quantile(sorted, q);
            let native = prom.one_value(&format!("histogram_quantile({q}, {family}{selector})"));
            println!(
                "{family} p{:<4} {x:>10} B  {native:>12.1} ({:.2}%)",
                q * 100.0,
                100.0 * relative_error(native, x)
            );
            assert!(
                relative_error(native, x) <= bound,
                "{family} p{q}: {native} vs {x}"
            );
        }
    }
    drop(c);
}
