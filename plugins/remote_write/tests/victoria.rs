//! The `remote_write` plug-in pushing into VictoriaMetrics (single-node v1.151.0, built from
//! `test-deps/go/victoria-metrics` by scripts/install-test-deps.sh), read back through its
//! Prometheus-compatible query API: exact totals and the classic buckets' quantiles, as
//! Prometheus gives them; and what it does with native histograms (it has none: they become
//! its own `vmrange` buckets, see the second test). Without the Go-built
//! programs these tests fail saying how to build them, unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;

use common::{pushing, record_heavy_tailed, serial};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::prometheus::label_names;
use nixl_telemetry_test_support::receivers::scratch;
use nixl_telemetry_test_support::receivers::victoria;
use nixl_telemetry_test_support::transfers::{assert_quantiles, exact_quantile, relative_error};

/// Exact totals, and `histogram_quantile` over the classic buckets as PromQL computes it.
#[test]
fn victoria_metrics_receives_exact_totals() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let vm = victoria::start(work.path());
    let c = pushing(&vm.write_url(), "vm-classic", false);
    for (xfer, bytes) in [(5, 1000), (30, 2000), (200, 3500), (700, 500)] {
        c.add_xfer_stats(xfer, true, bytes, 2);
    }
    c.add_xfer_stats(40, false, 64, 1);
    c.update_error(-3).unwrap();
    c.flush();
    let sel = "{agent_name=\"vm-classic\"}";
    let labels = vm.wait_for_value(&format!("agent_tx_bytes_total{sel}"), 7000.0);
    assert_eq!(
        label_names(&labels),
        ["__name__", "agent_name", "hostname", "instance"]
    );
    vm.wait_for_value(&format!("agent_rx_bytes_total{sel}"), 64.0);
    vm.wait_for_value(&format!("agent_tx_requests_num_total{sel}"), 4.0);
    vm.wait_for_value(&format!("agent_tx_last_bytes{sel}"), 500.0);
    vm.wait_for_value(&format!("agent_xfer_time_us_count{sel}"), 5.0);
    vm.wait_for_value(&format!("agent_xfer_time_us_sum{sel}"), 975.0);
    vm.wait_for_value(
        "agent_errors_total{agent_name=\"vm-classic\",status=\"backend\"}",
        1.0,
    );
    // 5 | 30 | 40 | 200 | 700 over the bounds 10, 25, 50, 100, 250, 500, 1000, interpolated
    // linearly within a bucket as PromQL does: the median (rank 2.5) is 25 + 25 x 1.5/2, the
    // 75th percentile (rank 3.75) 100 + 150 x 0.75, the 90th (rank 4.5) 500 + 500 x 0.5.
    for (q, expected) in [(0.5, 43.75), (0.75, 212.5), (0.9, 750.0)] {
        vm.wait_for_value(
            &format!("histogram_quantile({q}, agent_xfer_time_us_bucket{sel})"),
            expected,
        );
    }
    drop(c);
}

/// VictoriaMetrics has no native histogram type: it turns each pushed native histogram
/// sample into `<name>_count`, `<name>_sum` and `<name>_bucket{vmrange="<low>...<high>"}`
/// series, one per non-empty bucket with its bounds. The counts and sums are exact and a
/// quantile over the vmrange buckets is within the schema's bound; but the transfer times
/// also have classic buckets (`le`) under the same `_bucket` name, and a quantile over both
/// kinds at once is wrong: select one (`{le=""}` the native ones, `{vmrange=""}` the classic).
#[test]
fn victoria_metrics_turns_native_histograms_into_vmrange_buckets() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let vm = victoria::start(work.path());
    let c = pushing(&vm.write_url(), "vm-native", true);
    let n = 6000;
    let recorded = record_heavy_tailed(&c, n);
    let sel = |extra: &str| format!("{{agent_name=\"vm-native\"{extra}}}");
    let total = |v: &[u64]| v.iter().sum::<u64>() as f64;
    vm.wait_for_value(
        &format!("agent_tx_bytes_total{}", sel("")),
        total(&recorded.tx),
    );
    vm.wait_for_value(&format!("agent_xfer_time_us_count{}", sel("")), n as f64);
    vm.wait_for_value(
        &format!("agent_tx_request_size_bytes_count{}", sel("")),
        (n / 2) as f64,
    );
    vm.wait_for_value(
        &format!("agent_rx_request_size_bytes_sum{}", sel("")),
        total(&recorded.rx),
    );
    // No series by the native histogram's own name; the sizes' buckets are all vmrange.
    assert_eq!(
        vm.vector(&format!("agent_xfer_time_us{}", sel(""))),
        Some(vec![])
    );
    assert_eq!(
        vm.vector(&format!(
            "count(agent_tx_request_size_bytes_bucket{})",
            sel(",vmrange=\"\"")
        )),
        Some(vec![])
    );
    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    for (what, family, sorted) in [
        ("time (µs)", "agent_xfer_time_us_bucket", &recorded.times),
        (
            "TX size (B)",
            "agent_tx_request_size_bytes_bucket",
            &recorded.tx,
        ),
        (
            "RX size (B)",
            "agent_rx_request_size_bytes_bucket",
            &recorded.rx,
        ),
    ] {
        assert_quantiles(what, sorted, bound, |q| {
            vm.one_value(&format!(
                "histogram_quantile({q}, {family}{})",
                sel(",le=\"\"")
            ))
        });
    }
    // Both kinds of transfer-time buckets at once: the median is off by more than 100%.
    let exact = exact_quantile(&recorded.times, 0.5);
    let mixed = vm.one_value(&format!(
        "histogram_quantile(0.5, agent_xfer_time_us_bucket{})",
        sel("")
    ));
    println!("time p50 over le and vmrange buckets: {mixed} (exact {exact})");
    assert!(relative_error(mixed, exact) > 1.0, "{mixed} vs {exact}");
    drop(c);
}
