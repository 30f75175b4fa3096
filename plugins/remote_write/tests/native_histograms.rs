//! Native histogram samples pushed by the `remote_write` plug-in
//! (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true`) into a real Prometheus (Debian's 2.42 with
//! `--enable-feature=native-histograms` and its remote-write receiver): `histogram_quantile`
//! over them against the exact quantiles of the recorded transfers, and the classic series
//! beside them in the same requests.

mod common;

use common::{pushing, record_heavy_tailed, serial};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::prometheus::Prometheus;
use nixl_telemetry_test_support::transfers::{exact_quantile, relative_error};

#[test]
fn histogram_quantile_over_pushed_native_histograms_is_within_the_schemas_bound() {
    let _s = serial();
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start_native(work.path(), None);
    let c = pushing(&prom.write_url(), "pushed", true);
    let n = 6000;
    let recorded = record_heavy_tailed(&c, n);
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

    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    println!("quantile  exact  native (error)  classic (error)");
    for q in [0.5, 0.9, 0.99] {
        let x = exact_quantile(&recorded.times, q);
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
        ("agent_tx_request_size_bytes", &recorded.tx),
        ("agent_rx_request_size_bytes", &recorded.rx),
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
