//! The Grafana dashboard (`examples/grafana/nixl-telemetry-dashboard.json`) is valid JSON, every
//! PromQL expression in it parses (`promtool check rules`), and every metric it queries is a
//! series the exporters really expose.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use nixl_telemetry_series::{families, FamilyKind};

fn dashboard() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/grafana/nixl-telemetry-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The expressions of every panel target.
fn expressions(d: &serde_json::Value) -> Vec<String> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// Grafana's variables replaced by what they expand to, so Prometheus can parse the query.
fn expand(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$agent", ".*")
        .replace("$hostname", ".*")
}

/// Names in `expr` that look like exporter series (`agent_...`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("agent_") {
        let start = i + pos;
        let preceded_by_ident =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |n| start + n);
        // Skip label names such as `agent_name`.
        let word = &expr[start..end];
        if !preceded_by_ident && word != "agent_name" {
            names.insert(word.to_owned());
        }
        i = end;
    }
    names
}

#[test]
fn dashboard_queries_only_exposed_series() {
    let d = dashboard();
    let exprs = expressions(&d);
    assert!(exprs.len() >= 9, "{exprs:?}");
    let mut exposed = BTreeSet::new();
    for f in families() {
        exposed.insert(f.name.to_owned());
        if f.kind == FamilyKind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                exposed.insert(format!("{}{suffix}", f.name));
            }
        }
    }
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
        "agent_errors_total",
        "agent_telemetry_events_dropped_total",
    ] {
        assert!(used.contains(needed), "no panel uses {needed}");
    }
}

#[test]
fn every_dashboard_expression_parses() {
    let exprs = expressions(&dashboard());
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:expr_{i}\n        expr: '{}'\n",
            expand(e).replace('\'', "''")
        ));
    }
    let file = dir.path().join("dashboard.rules.yml");
    std::fs::write(&file, rules).unwrap();
    let out = Command::new(common::tool("promtool"))
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{printed}"
    );
    assert!(
        printed.contains(&format!("{} rules found", exprs.len())),
        "{printed}"
    );
}

#[test]
fn panels_keep_hosts_apart_and_the_import_input_is_used() {
    let d = dashboard();
    for expr in expressions(&d) {
        for (i, _) in expr.match_indices("sum by (") {
            let group = &expr[i..i + expr[i..].find(')').unwrap()];
            assert!(
                group.contains("status") || group.contains("hostname"),
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
