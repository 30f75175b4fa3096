//! The `remote_write` plug-in pushing into Prometheus 3.16's remote-write receiver
//! (`--web.enable-remote-write-receiver`; built from `test-deps/go/prometheus` by
//! scripts/install-test-deps.sh), as `native_histograms.rs` does into 2.42: exact totals, and
//! with `NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true` native histograms, which 3.x takes without any
//! flag, with `histogram_quantile` over them within the schema's bound and the classic series
//! beside them. Without the Go-built programs these tests fail saying how to build them, unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;

use common::{pushing, record_heavy_tailed, serial};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::receivers::prometheus3::{self, Options};
use nixl_telemetry_test_support::receivers::scratch;
use nixl_telemetry_test_support::transfers::assert_quantiles;

#[test]
fn prometheus3_receives_exact_totals_and_native_histograms_within_the_schemas_bound() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let prom = prometheus3::start(work.path(), &Options::default());
    let c = pushing(&prom.write_url(), "pushed3", true);
    c.update_error(-3).unwrap();
    let n = 6000;
    let recorded = record_heavy_tailed(&c, n);
    let sel = "{agent_name=\"pushed3\"}";
    let total = |v: &[u64]| v.iter().sum::<u64>() as f64;
    prom.wait_for_value(
        &format!("histogram_count(agent_xfer_time_us{sel})"),
        n as f64,
    );
    prom.wait_for_value(
        &format!("histogram_count(agent_tx_request_size_bytes{sel})"),
        (n / 2) as f64,
    );
    prom.wait_for_value(
        &format!("histogram_sum(agent_rx_request_size_bytes{sel})"),
        total(&recorded.rx),
    );
    // The classic series came in the same requests, exact.
    prom.wait_for_value(&format!("agent_xfer_time_us_count{sel}"), n as f64);
    prom.wait_for_value(
        &format!("agent_xfer_time_us_sum{sel}"),
        total(&recorded.times),
    );
    prom.wait_for_value(&format!("agent_tx_bytes_total{sel}"), total(&recorded.tx));
    prom.wait_for_value(&format!("agent_rx_bytes_total{sel}"), total(&recorded.rx));
    prom.wait_for_value(&format!("agent_tx_requests_num_total{sel}"), (n / 2) as f64);
    prom.wait_for_value(
        "agent_errors_total{agent_name=\"pushed3\",status=\"backend\"}",
        1.0,
    );
    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    for (what, family, sorted) in [
        ("time (µs)", "agent_xfer_time_us", &recorded.times),
        ("TX size (B)", "agent_tx_request_size_bytes", &recorded.tx),
        ("RX size (B)", "agent_rx_request_size_bytes", &recorded.rx),
    ] {
        assert_quantiles(what, sorted, bound, |q| {
            prom.one_value(&format!("histogram_quantile({q}, {family}{sel})"))
        });
    }
    drop(c);
}
