//! The `remote_write` plug-in pushing into VictoriaMetrics (single-node v1.151.0, built from
//! `test-deps/go/victoria-metrics` by scripts/install-test-deps.sh), read back through its
//! Prometheus-compatible query API: exact totals and the classic buckets' quantiles, as
//! Prometheus gives them; what it does with native histograms (it has none: they become its
//! own `vmrange` buckets, see the second test); and the recording rules' and the dashboard's
//! time quantiles and means with native histograms pushed (the third). Without the Go-built
//! programs these tests fail saying how to build them, unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;

use std::time::Duration;

use common::{pushing, record_heavy_tailed, serial};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::monitoring::{
    dashboard, expand_over, panel_expression, rule_query,
};
use nixl_telemetry_test_support::poll_for;
use nixl_telemetry_test_support::prometheus::label_names;
use nixl_telemetry_test_support::promql::PromQl;
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

/// The timestamps (Unix seconds, to the millisecond) of the samples `vm` holds of the one series
/// `series` from the last 5 minutes, oldest first.
fn sample_times(vm: &PromQl, series: &str) -> Vec<f64> {
    let answer = vm.query(&format!("{series}[5m]"), None);
    let values = answer
        .as_ref()
        .and_then(|a| a["data"]["result"][0]["values"].as_array());
    values
        .into_iter()
        .flatten()
        .map(|v| v[0].as_f64().expect("a sample's timestamp"))
        .collect()
}

/// Waits until `vm` holds `n` samples of `series` taken after `after` (Unix seconds): their
/// timestamps.
fn samples_after(vm: &PromQl, series: &str, after: f64, n: usize) -> Vec<f64> {
    let got = poll_for(Duration::from_secs(60), || {
        let later: Vec<f64> = sample_times(vm, series)
            .into_iter()
            .filter(|t| *t > after)
            .collect();
        (later.len() >= n).then_some(later)
    });
    got.unwrap_or_else(|| {
        panic!(
            "no {n} samples of {series} after {after}\n{}",
            vm.log_text()
        )
    })
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The recording rules' and the dashboard's transfer and post times on VictoriaMetrics with
/// native histograms pushed: their classic-bucket selectors (`le!=""`) leave the vmrange
/// buckets out, and every quantile is exact as PromQL interpolates the classic buckets (without
/// the selector the rules' quantiles are far off); the mean panel's classic queries are exact
/// and its native ones fail (MetricsQL has no `histogram_sum`). The rates are taken between a
/// sample pushed after one round of transfers and one pushed after a second, identical round,
/// so that they hold that round exactly (a push during a flush may see part of it: the samples
/// chosen are never the first after a flush).
#[test]
fn the_rules_and_the_dashboard_time_quantiles_are_exact_on_victoria_metrics() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let vm = victoria::start(work.path());
    let agent = "vm-queries";
    let c = pushing(&vm.write_url(), agent, true);
    let count = format!("agent_xfer_time_us_count{{agent_name=\"{agent}\"}}");
    // A round: transfers of 5, 30, 40, 200 and 700 µs, posted after a fifth of that.
    let round = || {
        for t in [5, 30, 40, 200, 700] {
            c.add_xfer_stats(t, true, 1000, t / 5);
        }
        c.flush();
    };
    round();
    let start = samples_after(&vm, &count, unix_now(), 4)[2];
    round();
    let end = samples_after(&vm, &count, unix_now(), 2)[1];
    let window = format!("{}ms", ((end - start) * 1000.0).round());
    let one = |promql: &str| -> f64 {
        let v = vm
            .vector_at(promql, end)
            .unwrap_or_else(|| panic!("{promql} failed"));
        assert_eq!(v.len(), 1, "{promql}: {v:?}");
        v[0].1
    };
    let exact = |got: f64, want: f64, what: &str| {
        assert!(
            relative_error(got, want) <= 1e-9,
            "{what}: {got}, not {want}"
        );
    };
    // Times 5 | 30 40 | 200 | 700 over the bounds 10, 25, 50, 100, 250, 500, 1000: p50 (rank
    // 2.5) 25 + 25 x 1.5/2, p90 (rank 4.5) 500 + 500 x 0.5, p99 500 + 500 x 0.95. Post times
    // 1 6 8 | 40 | 140: p50 10 x 2.5/3, p90 100 + 150 x 0.5, p99 100 + 150 x 0.95.
    let times = [("0.5", 43.75), ("0.9", 750.0), ("0.99", 975.0)];
    let posts = [("0.5", 25.0 / 3.0), ("0.9", 175.0), ("0.99", 242.5)];
    for level in ["instance_quantile", "workload_quantile"] {
        for (family, expected) in [
            ("agent_xfer_time_us", times),
            ("agent_xfer_post_time_us", posts),
        ] {
            let record = format!("{level}:{family}:histogram_quantile_rate5m");
            for (q, want) in expected {
                let rule = rule_query(&record, Some(q)).replace("[5m]", &format!("[{window}]"));
                exact(one(&rule), want, &format!("{record} {q}"));
                // Over the le and the vmrange buckets at once.
                let mixed = one(&rule.replace("le!=\"\", ", ""));
                assert!(relative_error(mixed, want) > 1.0, "{record} {q}: {mixed}");
            }
        }
    }
    let d = dashboard();
    let panel =
        |title: &str, target: usize| expand_over(&panel_expression(&d, title, target), &window);
    let quantiles = "Transfer time quantiles per node (start to completion)";
    for (target, (_, want)) in times.iter().enumerate() {
        exact(one(&panel(quantiles, target)), *want, quantiles);
    }
    let post = "Post time quantiles per node (start to posted)";
    exact(one(&panel(post, 0)), posts[0].1, post);
    exact(one(&panel(post, 1)), posts[2].1, post);
    exact(
        one(&panel("Transfer time p99 per rank", 0)),
        975.0,
        "p99 per rank",
    );
    // The means: 975 / 5 and 195 / 5 from the classic queries; the native ones fail.
    let mean = "Mean transfer time per node";
    exact(one(&panel(mean, 0)), 195.0, mean);
    exact(one(&panel(mean, 1)), 39.0, mean);
    for native in [2, 3] {
        assert_eq!(
            vm.vector_at(&panel(mean, native), end),
            None,
            "{mean} {native}"
        );
    }
    drop(c);
}
