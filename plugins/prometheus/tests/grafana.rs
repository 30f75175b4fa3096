//! The Grafana dashboard (`examples/grafana/nixl-telemetry-dashboard.json`) is valid JSON, every
//! PromQL expression in it parses (`promtool check rules`), every metric it queries is a
//! series the exporters really expose, and every panel query, its variables substituted,
//! returns the right totals from a real Prometheus 2.42 scraping `prometheus_mp` ranks with and
//! without the node totals of `NIXL_TELEMETRY_MP_AGGREGATE=sum` (never twice the truth); the
//! same checks against Prometheus 3.16: `grafana3.rs`.

mod common;
mod dashboard_checks;
mod ranks;

use std::collections::BTreeSet;

use dashboard_checks::{metric_names, native_families};
use nixl_telemetry_series::{families, FamilyKind};
use nixl_telemetry_test_support::monitoring::{dashboard, panel_expressions};

/// The expressions of every panel target.
fn expressions(d: &serde_json::Value) -> Vec<String> {
    panel_expressions(d).into_iter().map(|(_, e)| e).collect()
}

#[test]
fn dashboard_queries_only_exposed_series() {
    let d = dashboard();
    let exprs = expressions(&d);
    assert!(exprs.len() >= 20, "{exprs:?}");
    let mut exposed = BTreeSet::new();
    for f in families() {
        exposed.insert(f.name.to_owned());
        if f.kind == FamilyKind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                exposed.insert(format!("{}{suffix}", f.name));
            }
        }
    }
    exposed.extend(native_families());
    let mut used = BTreeSet::new();
    for e in &exprs {
        for name in metric_names(e) {
            assert!(
                exposed.contains(&name),
                "{name} (in {e}) is not an exported series"
            );
            used.insert(name);
        }
    }
    // The panels cover throughput, requests, latency, errors and drops.
    for needed in [
        "agent_tx_bytes_total",
        "agent_rx_requests_num_total",
        "agent_xfer_time_us_bucket",
        "agent_xfer_time_us",
        "agent_tx_request_size_bytes",
        "agent_errors_total",
        "agent_telemetry_events_dropped_total",
    ] {
        assert!(used.contains(needed), "no panel uses {needed}");
    }
}

#[test]
fn every_dashboard_expression_parses() {
    dashboard_checks::every_expression_parses(&common::tool("promtool"));
}

#[test]
fn panels_keep_hosts_apart_and_the_import_input_is_used() {
    let d = dashboard();
    // (A heatmap's `sum (...)` merges the selection into one distribution on purpose.)
    for expr in expressions(&d) {
        for (i, _) in expr.match_indices("sum by (") {
            let group = &expr[i..i + expr[i..].find(')').unwrap()];
            assert!(
                group.contains("status")
                    || group.contains("hostname")
                    || group.contains("slurm_job_id"),
                "{expr}: same-named agents of two hosts would be merged"
            );
        }
    }
    // The data source chosen at import (`__inputs`) is the variable's default.
    let inputs = d["__inputs"].as_array().unwrap();
    let text = d["templating"].to_string();
    for input in inputs {
        let name = input["name"].as_str().unwrap();
        assert!(
            text.contains(&format!("${{{name}}}")),
            "{name} is never used"
        );
    }
}

/// Every panel on Prometheus 2.42 servers scraping the simulated ranks without and with node
/// totals, and on one with native histograms on (`--enable-feature=native-histograms`)
/// scraping the page with node totals: see [`dashboard_checks`]'s checks.
#[test]
fn every_panel_returns_the_ranks_totals_with_and_without_node_totals() {
    let scratch = tempfile::tempdir().unwrap();
    let ranks = ranks::Ranks::start(scratch.path());
    let plain = common::Prometheus::scraping(&scratch.path().join("plain"), &[ranks.plain_port]);
    let summed = common::Prometheus::scraping(&scratch.path().join("summed"), &[ranks.summed_port]);
    dashboard_checks::every_panel_gives_the_ranks_totals(&plain, &summed);
    let native = common::Prometheus::launch(
        &scratch.path().join("native"),
        &common::Launch {
            targets: &[ranks.summed_port],
            native: true,
            ..Default::default()
        },
    );
    dashboard_checks::every_panel_gives_the_ranks_native_histograms(&native);
}

/// The per-rank panels on Prometheus 2.42: one line for a process without a `pid` label.
#[test]
fn per_rank_panels_show_a_process_without_a_pid() {
    let _s = common::serial();
    let scratch = tempfile::tempdir().unwrap();
    dashboard_checks::per_rank_panels_show_a_process_without_a_pid(|port| {
        common::Prometheus::scraping(scratch.path(), &[port])
    });
}

#[test]
fn the_variables_list_the_labels_present() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().unwrap();
    let names: Vec<&str> = vars.iter().map(|v| v["name"].as_str().unwrap()).collect();
    for needed in [
        "hostname",
        "agent",
        "local_rank",
        "slurm_job_id",
        "k8s_namespace",
    ] {
        assert!(names.contains(&needed), "no variable {needed}: {names:?}");
    }
    // Ad hoc filters: any other workload label.
    assert!(vars.iter().any(|v| v["type"] == "adhoc"));
    // Every query variable is `label_values(selector, label)` of an exposed series.
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["query"].as_str().unwrap();
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{q}"));
        let (_, label) = inner.rsplit_once(", ").unwrap();
        assert_eq!(
            v["name"].as_str().unwrap().replace("agent", "agent_name"),
            label
        );
        assert!(inner.starts_with("agent_tx_bytes_total"), "{q}");
    }
}
