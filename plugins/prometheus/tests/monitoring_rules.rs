//! The monitoring bundle (`deploy/prometheus/`): the rules parse (`promtool check rules`), their
//! unit tests pass (`promtool test rules`: each alert fires on its input and stays silent on
//! the others, each recording rule has its value), every series they read is one the exporters
//! or the push exporters really expose, every recording rule and alert is tested and documented
//! (docs/operations/monitoring.md), and the Prometheus Operator's `PrometheusRule` is the rules
//! file as `prometheusrule.sh` writes it. promtool missing fails these tests (scripts/test.sh
//! installs it).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use nixl_telemetry_series::{families, FamilyKind};

fn bundle() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const RULES: &str = "nixl-telemetry.rules.yml";
const TESTS: &str = "nixl-telemetry.rules.test.yml";
const OPERATOR: &str = "nixl-telemetry.prometheusrule.yml";
const DOC: &str = "../../docs/operations/monitoring.md";

/// Runs `promtool` with `args` in the bundle's directory: its status and everything it printed.
fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new(common::tool("promtool"))
        .args(args)
        .current_dir(bundle())
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

/// The values of the `key:` entries of a rules file (`record`, `alert`), in order.
fn entries(text: &str, key: &str) -> Vec<String> {
    let prefix = format!("- {key}: ");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .map(|v| v.trim().to_owned())
        .collect()
}

/// The PromQL identifiers (metric names, recorded names, label names, functions) of the
/// non-comment lines of the rules that hold expressions, annotations left out.
fn identifiers(rules: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_annotations = false;
    for line in rules.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            continue;
        }
        if t == "annotations:" {
            in_annotations = true;
            continue;
        }
        if in_annotations && (t.starts_with("- ") || t == "labels:") {
            in_annotations = false;
        }
        if in_annotations || t.starts_with("- alert:") || t.starts_with("- name:") {
            continue;
        }
        let t = t.strip_prefix("- record: ").unwrap_or(t);
        let t = t.strip_prefix("expr: ").unwrap_or(t);
        let chars: Vec<char> = t.chars().collect();
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        let mut i = 0;
        while i < chars.len() {
            let starts = (chars[i].is_ascii_alphabetic() || chars[i] == '_')
                && (i == 0 || !(word(chars[i - 1]) || chars[i - 1] == '.'));
            if !starts {
                i += 1;
                continue;
            }
            let end = (i..chars.len())
                .find(|&j| !word(chars[j]))
                .unwrap_or(chars.len());
            let w: String = chars[i..end].iter().collect();
            // A YAML key (`expr:`, `quantile:`) is not a name.
            if !w.ends_with(':') {
                out.insert(w);
            }
            i = end;
        }
    }
    out
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let rules = read(&bundle().join(RULES));
    let count = entries(&rules, "record").len() + entries(&rules, "alert").len();
    assert!(count >= 30, "{count} rules");
    let (ok, printed) = promtool(&["check", "rules", RULES]);
    assert!(ok, "promtool check rules failed:\n{printed}");
    assert!(
        printed.contains(&format!("SUCCESS: {count} rules found")),
        "{printed}"
    );
    let (ok, printed) = promtool(&["test", "rules", TESTS]);
    assert!(ok, "promtool test rules failed:\n{printed}");
    assert!(printed.contains("SUCCESS"), "{printed}");
}

#[test]
fn the_rules_read_only_series_that_are_exposed_or_recorded() {
    let rules = read(&bundle().join(RULES));
    let mut exposed: BTreeSet<String> = BTreeSet::new();
    for f in families() {
        exposed.insert(f.name.to_owned());
        if f.kind == FamilyKind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                exposed.insert(format!("{}{suffix}", f.name));
            }
        }
    }
    for c in nixl_telemetry_push::PUSH_COUNTERS {
        exposed.insert(c.name.to_owned());
    }
    let recorded: BTreeSet<String> = entries(&rules, "record").into_iter().collect();
    let mut read_series = BTreeSet::new();
    for w in identifiers(&rules) {
        if w.contains(':') {
            assert!(recorded.contains(&w), "{w} is read but never recorded");
        } else if (w.starts_with("agent_") && w != "agent_name" && w != "agent_instance")
            || w.starts_with("nixl_telemetry_")
        {
            assert!(
                exposed.contains(&w),
                "{w} is not a series the exporters expose"
            );
            read_series.insert(w);
        }
    }
    // What the rules are about: traffic, errors, drops, both histograms and the pushes.
    for needed in [
        "agent_tx_bytes_total",
        "agent_rx_bytes_total",
        "agent_tx_requests_num_total",
        "agent_rx_requests_num_total",
        "agent_errors_total",
        "agent_telemetry_events_dropped_total",
        "agent_xfer_time_us_bucket",
        "agent_xfer_post_time_us_bucket",
        "nixl_telemetry_push_failures_total",
        "nixl_telemetry_push_successes_total",
    ] {
        assert!(read_series.contains(needed), "no rule reads {needed}");
    }
}

/// The alert tests of the unit tests: (alert name, whether it expects the alert to fire).
fn alert_tests(tests: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for line in tests.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("- alertname: ") {
            out.push((name.to_owned(), false));
        } else if t == "exp_alerts:" {
            out.last_mut().expect("exp_alerts before an alertname").1 = true;
        }
    }
    out
}

#[test]
fn every_rule_is_tested_and_documented() {
    let rules = read(&bundle().join(RULES));
    let tests = read(&bundle().join(TESTS));
    let doc = read(&bundle().join(DOC));
    // Every recording rule's value is checked (a `promql_expr_test` of its name).
    let checked: BTreeSet<&str> = tests
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- expr: "))
        .map(|e| e.split('{').next().unwrap().trim())
        .collect();
    for r in entries(&rules, "record") {
        assert!(checked.contains(r.as_str()), "no test checks {r}");
        assert!(
            doc.contains(&format!("`{r}`")),
            "{DOC} does not explain {r}"
        );
    }
    // Every alert has a test where it fires and one where it does not, a section of the page
    // (its heading is the alert's name) and that section as its runbook.
    let alert_tests = alert_tests(&tests);
    for a in entries(&rules, "alert") {
        for fires in [true, false] {
            assert!(
                alert_tests.contains(&(a.clone(), fires)),
                "no test where {a} {}",
                if fires { "fires" } else { "does not fire" }
            );
        }
        assert!(
            doc.lines().any(|l| l == format!("### {a}")),
            "{DOC} has no section {a}"
        );
        let runbook = format!(
            "runbook: \"docs/operations/monitoring.md#{}\"",
            a.to_lowercase()
        );
        assert!(rules.contains(&runbook), "{a} has no {runbook}");
    }
}

#[test]
fn the_prometheus_rule_is_the_rules_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("generated.yml");
    let status = Command::new("bash")
        .arg(bundle().join("prometheusrule.sh"))
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        read(&out) == read(&bundle().join(OPERATOR)),
        "deploy/prometheus/{OPERATOR} is not the rules file: run deploy/prometheus/prometheusrule.sh"
    );
    // The manifest's `spec` is the rules file: every line of it, indented by two spaces.
    let manifest = read(&bundle().join(OPERATOR));
    let spec = manifest.split_once("\nspec:\n").unwrap().1;
    let rules = read(&bundle().join(RULES));
    let dedented: String = spec
        .split_inclusive('\n')
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect();
    assert_eq!(dedented, rules);
    assert!(manifest.contains("kind: PrometheusRule\n"));
    assert!(manifest.contains("apiVersion: monitoring.coreos.com/v1\n"));
}
