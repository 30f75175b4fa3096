//! The monitoring bundle (`deploy/prometheus/`): the rules parse (`promtool check rules`), their
//! unit tests pass (`promtool test rules`: each alert fires on its input and stays silent on
//! the others, each recording rule has its value), every series they read is one the exporters
//! or the push exporters really expose, every recording rule and alert is tested and documented
//! (docs/operations/monitoring.md), and the Prometheus Operator's `PrometheusRule` is the rules
//! file as `prometheusrule.sh` writes it. promtool missing fails these tests (scripts/test.sh
//! installs it). The rules are checked and unit-tested by promtool 3.16 too (built from
//! `test-deps/go/prometheus`; that test fails without it unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`).

mod common;
mod ranks;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use nixl_telemetry_series::{families, FamilyKind};
use nixl_telemetry_test_support::receivers::{skipped, GoProgram};
use nixl_telemetry_test_support::run_in;

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

/// Runs Debian's `promtool` (2.42) with `args` in the bundle's directory: its status and
/// everything it printed.
fn promtool(args: &[&str]) -> (bool, String) {
    run_in(&bundle(), &common::tool("promtool"), args)
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
    check_rules(promtool);
}

#[test]
fn promtool3_checks_the_rules_and_their_unit_tests_pass() {
    if skipped() {
        return;
    }
    let promtool3 = GoProgram::Promtool.path();
    check_rules(|args| run_in(&bundle(), &promtool3, args));
}

/// `promtool` (run in the bundle's directory with the arguments given) finds every rule and
/// passes the rules' unit tests.
fn check_rules(promtool: impl Fn(&[&str]) -> (bool, String)) {
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

/// The number of rules the page says `promtool check rules` counts is the rules file's.
#[test]
fn the_page_counts_the_rules_of_the_file() {
    let rules = read(&bundle().join(RULES));
    let count = entries(&rules, "record").len() + entries(&rules, "alert").len();
    let doc = read(&bundle().join(DOC));
    let line = doc
        .lines()
        .find(|l| l.starts_with("promtool check rules "))
        .unwrap_or_else(|| panic!("{DOC} has no `promtool check rules` line"));
    let said: usize = line
        .split_once("counts ")
        .and_then(|(_, n)| n.strip_suffix(" rules"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{DOC}: no \"counts N rules\" in {line:?}"));
    assert_eq!(
        said, count,
        "{DOC} says {said} rules, the rules file has {count}"
    );
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
    for (name, _, _) in nixl_telemetry_series::NATIVE_SIZE_FAMILIES {
        exposed.insert(name.to_owned());
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
        "agent_xfer_time_us",
        "agent_xfer_post_time_us",
        "agent_tx_request_size_bytes",
        "agent_rx_request_size_bytes",
        "nixl_telemetry_push_failures_total",
        "nixl_telemetry_push_successes_total",
        "nixl_telemetry_push_exits_total",
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

/// The rules loaded into real Prometheus servers scraping real `prometheus_mp` pages: four ranks
/// of two jobs on two hosts (`ranks`: stores written in this process, with native histograms), served
/// once with node totals and once without, scraped as text (classic buckets), and the page with
/// totals scraped once more by a server with native histograms on. On every server the
/// `instance:` and `workload:` rates are what the ranks' own series give (a node with totals
/// counts once: doubling would be 2x), every quantile is there and right (from the classic
/// buckets, or from the native histograms within their bound, sizes included), and the drop
/// alert fires once per rank (never for a node total).
#[test]
fn a_real_prometheus_evaluates_the_rules_on_real_pages() {
    use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
    use std::time::Duration;

    let scratch = tempfile::tempdir().unwrap();
    let ranks = ranks::Ranks::start(scratch.path());
    let (plain_port, summed_port) = (ranks.plain_port, ranks.summed_port);
    let rules = bundle().join(RULES);
    let servers = [
        (
            "without node totals",
            common::Prometheus::launch(
                &scratch.path().join("plain"),
                &common::Launch {
                    targets: &[plain_port],
                    rules: &[&rules],
                    ..Default::default()
                },
            ),
        ),
        (
            "with node totals",
            common::Prometheus::launch(
                &scratch.path().join("summed"),
                &common::Launch {
                    targets: &[summed_port],
                    rules: &[&rules],
                    ..Default::default()
                },
            ),
        ),
        (
            "native histograms, with node totals",
            common::Prometheus::launch(
                &scratch.path().join("native"),
                &common::Launch {
                    targets: &[summed_port],
                    rules: &[&rules],
                    native: true,
                    ..Default::default()
                },
            ),
        ),
    ];
    // Enough scrapes for the rates, and rules evaluated on them.
    for (name, prom) in &servers {
        ranks::wait_for_rates(prom, name, |p| {
            let r = p.vector("count_over_time(instance:agent_tx_bytes:rate5m[10s])")?;
            (r.len() == 2 && r.iter().all(|(_, n)| *n >= 3.0)).then_some(())
        });
    }
    let keyed = |v: Vec<(serde_json::Value, f64)>| {
        let mut out: Vec<(String, f64)> = v
            .into_iter()
            .map(|(m, x)| {
                let mut m = m.as_object().unwrap().clone();
                m.remove("__name__");
                (serde_json::Value::Object(m).to_string(), x)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    };
    // (recorded, what the ranks' own series give at the same instant)
    let checks = [
        (
            "instance:agent_tx_bytes:rate5m",
            r#"sum without (pid, agent_instance, local_rank, agent_name) (rate(agent_tx_bytes_total{pid!=""}[5m]))"#,
        ),
        (
            "instance:agent_rx_requests_num:rate5m",
            r#"sum without (pid, agent_instance, local_rank, agent_name) (rate(agent_rx_requests_num_total{pid!=""}[5m]))"#,
        ),
        (
            "instance:agent_errors:rate5m",
            r#"sum without (pid, agent_instance, local_rank, agent_name) (rate(agent_errors_total{pid!=""}[5m]))"#,
        ),
        (
            "workload:agent_tx_bytes:rate5m",
            r#"sum without (pid, agent_instance, local_rank, agent_name, instance, hostname) (rate(agent_tx_bytes_total{pid!=""}[5m]))"#,
        ),
        (
            "job:agent_tx_bytes:rate5m",
            r#"sum by (job) (rate(agent_tx_bytes_total{pid!=""}[5m]))"#,
        ),
    ];
    for (server, prom) in &servers {
        // A recorded sample old enough that every scrape before it is stored.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        for (recorded, truth) in checks {
            let at = prom
                .vector_at(&format!("max(timestamp({recorded}))"), now - 3.0)
                .unwrap()[0]
                .1;
            let got = keyed(prom.vector_at(recorded, at).unwrap());
            let want = keyed(prom.vector_at(truth, at).unwrap());
            assert!(!got.is_empty(), "{server}: no {recorded}");
            assert_eq!(
                got.iter().map(|g| &g.0).collect::<Vec<_>>(),
                want.iter().map(|w| &w.0).collect::<Vec<_>>(),
                "{server}: {recorded}"
            );
            for (g, w) in got.iter().zip(&want) {
                // The rule ran when the last scrape may not have been stored yet: a few
                // percent; doubling would be 100%.
                assert!(
                    (g.1 - w.1).abs() <= 0.2 * w.1.abs().max(1e-9),
                    "{server}: {recorded} {} is {}, the ranks give {}",
                    g.0,
                    g.1,
                    w.1
                );
            }
        }
        // One series per host, with its job; errors by status.
        let tx = keyed(prom.vector("instance:agent_tx_bytes:rate5m").unwrap());
        assert_eq!(tx.len(), 2, "{server}: {tx:?}");
        assert!(
            tx[0].0.contains(r#""hostname":"node-a""#)
                && tx[0].0.contains(r#""slurm_job_id":"101""#)
        );
        let backend = prom
            .vector(r#"instance:agent_errors:ratio_rate5m{status="backend"}"#)
            .unwrap();
        // One backend error per 2 requests and 1 error: a third.
        assert_eq!(backend.len(), 2, "{server}");
        for (_, v) in &backend {
            assert!((v - 1.0 / 3.0).abs() < 0.05, "{server}: error ratio {v}");
        }
        // p50, p90, p99 of both histograms per host and per job.
        for q in [
            "instance_quantile:agent_xfer_time_us:histogram_quantile_rate5m",
            "instance_quantile:agent_xfer_post_time_us:histogram_quantile_rate5m",
            "workload_quantile:agent_xfer_time_us:histogram_quantile_rate5m",
        ] {
            let v = prom.vector(q).unwrap();
            assert_eq!(v.len(), 6, "{server}: {q} {v:?}");
            assert!(
                v.iter().all(|(_, x)| x.is_finite() && *x > 0.0),
                "{server}: {v:?}"
            );
        }
        // node-a's transfers take 100 µs (rank 0) and 200 µs (rank 1), half each: p50 at the 100 µs
        // bound, p90 inside the (100, 250] bucket, 100 + 0.8 x 150 µs.
        let quantile = |q: &str| {
            let v = prom
                .vector(&format!(
                    "instance_quantile:agent_xfer_time_us:histogram_quantile_rate5m\
                     {{hostname=\"node-a\",quantile=\"{q}\"}}"
                ))
                .unwrap();
            assert_eq!(v.len(), 1, "{server}: {v:?}");
            v[0].1
        };
        let size_quantiles = [
            "instance_quantile:agent_tx_request_size_bytes:histogram_quantile_rate5m",
            "workload_quantile:agent_tx_request_size_bytes:histogram_quantile_rate5m",
            "instance_quantile:agent_rx_request_size_bytes:histogram_quantile_rate5m",
        ];
        if server.starts_with("native") {
            // Within one bucket of the values recorded: p50 of node-a's 100 and 200 µs is 100,
            // its p90 200; its TX requests are 1000 and 2000 bytes, RX a tenth of that.
            let bound = bucket_width_bound(DEFAULT_SCHEMA);
            let near = |got: f64, want: f64| (got - want).abs() <= bound * want;
            assert!(
                near(quantile("0.5"), 100.0),
                "{server}: {}",
                quantile("0.5")
            );
            assert!(
                near(quantile("0.9"), 200.0),
                "{server}: {}",
                quantile("0.9")
            );
            for q in size_quantiles {
                let v = prom.vector(q).unwrap();
                assert_eq!(v.len(), 6, "{server}: {q} {v:?}");
            }
            let size = |q: &str, family: &str| {
                prom.vector(&format!(
                    "instance_quantile:{family}:histogram_quantile_rate5m\
                     {{hostname=\"node-a\",quantile=\"{q}\"}}"
                ))
                .unwrap()[0]
                    .1
            };
            assert!(near(size("0.5", "agent_tx_request_size_bytes"), 1000.0));
            assert!(near(size("0.99", "agent_tx_request_size_bytes"), 2000.0));
            assert!(near(size("0.5", "agent_rx_request_size_bytes"), 100.0));
            // Prometheus kept the native buckets only: the classic rules have nothing.
            assert!(prom
                .vector("instance:agent_xfer_time_us_bucket:rate5m")
                .unwrap()
                .is_empty());
        } else {
            assert!((quantile("0.5") - 100.0).abs() < 1.0, "{server}");
            assert!((quantile("0.9") - 220.0).abs() < 15.0, "{server}");
            // Text pages carry no sizes: no size quantiles, never a wrong one.
            for q in size_quantiles {
                assert!(prom.vector(q).unwrap().is_empty(), "{server}: {q}");
            }
        }
        // Every rank drops events: the alert fires for each rank, never for a node total.
        let alerts = common::poll(Duration::from_secs(30), server, || {
            let v = prom
                .vector(r#"ALERTS{alertname="NixlTelemetryEventsDropped",alertstate="firing"}"#)?;
            (v.len() >= 4).then_some(v)
        });
        assert_eq!(alerts.len(), 4, "{server}: {alerts:?}");
        assert!(alerts.iter().all(|(m, _)| m["pid"].as_str().is_some()));
        assert!(
            !prom.log_text().contains("level=error"),
            "{server}: {}",
            prom.log_text()
        );
    }
}
