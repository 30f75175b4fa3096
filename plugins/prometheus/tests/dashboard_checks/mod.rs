//! The checks of the Grafana dashboard (`examples/grafana/nixl-telemetry-dashboard.json`) that
//! Prometheus 2.42 (`grafana.rs`) and 3.16 (`grafana3.rs`) must both pass: every expression
//! parses under the version's `promtool`, and every panel query, its variables substituted,
//! returns the right totals from a real server scraping the simulated ranks of `ranks` with and
//! without node totals (never twice the truth), and from a server with native histograms.

#![allow(dead_code)] // not every test binary runs every check

use std::collections::BTreeSet;
use std::ops::Deref;
use std::path::Path;

use nixl_telemetry_series::{families, FamilyKind, NATIVE_SIZE_FAMILIES};
use nixl_telemetry_test_support::monitoring::{
    dashboard, expand, expand_with, panel_expression, panel_expressions,
};
use nixl_telemetry_test_support::promql::PromQl;
use nixl_telemetry_test_support::run_in;

use crate::ranks::a_second_ago;

/// Names in `expr` that look like exporter series (`agent_...`).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
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
        if !preceded_by_ident && word != "agent_name" && word != "agent_instance" {
            names.insert(word.to_owned());
        }
        i = end;
    }
    names
}

/// The native histogram families (no `_bucket`, `_sum` or `_count` series of their own).
pub fn native_families() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = families()
        .iter()
        .filter(|f| f.kind == FamilyKind::Histogram)
        .map(|f| f.name.to_owned())
        .collect();
    names.extend(NATIVE_SIZE_FAMILIES.iter().map(|f| f.0.to_owned()));
    names
}

/// Whether `expr` reads native histograms and whether it reads the classic `_bucket`, `_sum`
/// or `_count` series of histograms, leaving out the series after an `unless` (they only hide
/// its lines where the classic series are there too).
fn reads(expr: &str) -> (bool, bool) {
    let natives = native_families();
    let names = metric_names(expr.split(" unless ").next().unwrap_or(expr));
    let classic = |n: &String| ["_bucket", "_sum", "_count"].iter().any(|s| n.ends_with(s));
    (
        names.iter().any(|n| natives.contains(n)),
        names.iter().any(classic),
    )
}

/// Whether `expr` reads native histograms only (a panel marked *native histograms*, a query
/// of them beside a classic one): it is empty unless the exporters keep them and Prometheus
/// ingests them. (An expression reading both has a classic branch: `native or classic`.)
pub fn native_only(expr: &str) -> bool {
    reads(expr) == (true, false)
}

/// Whether `expr` reads the classic series of histograms only, none of which a server with
/// native histograms on keeps (their native twin draws the line there).
pub fn classic_only(expr: &str) -> bool {
    reads(expr) == (false, true)
}

/// `promtool` at `promtool` finds every dashboard expression, its variables at All, a valid
/// recording rule.
pub fn every_expression_parses(promtool: &Path) {
    let exprs = panel_expressions(&dashboard());
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, e)) in exprs.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:expr_{i}\n        expr: '{}'\n",
            expand(e).replace('\'', "''")
        ));
    }
    std::fs::write(dir.path().join("dashboard.rules.yml"), rules).unwrap();
    let (ok, printed) = run_in(
        dir.path(),
        promtool,
        &["check", "rules", "dashboard.rules.yml"],
    );
    assert!(ok, "promtool check rules failed:\n{printed}");
    assert!(
        printed.contains(&format!("{} rules found", exprs.len())),
        "{printed}"
    );
}

/// The result of target `target` of the panel titled `title`, its variables at All, evaluated
/// by `server` at `at`: (labels, value), sorted.
pub fn panel_target(server: &PromQl, title: &str, target: usize, at: f64) -> Vec<(String, f64)> {
    let expr = panel_expression(&dashboard(), title, target);
    keyed(server.vector_at(&expand(&expr), at).unwrap())
}

/// A query's result as (labels without `__name__` and `instance`, value), sorted.
pub fn keyed(v: Vec<(serde_json::Value, f64)>) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = v
        .into_iter()
        .map(|(m, x)| {
            let mut m = m.as_object().unwrap().clone();
            // The target's address differs from one server to the other.
            m.remove("__name__");
            m.remove("instance");
            (serde_json::Value::Object(m).to_string(), x)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Whether `a` and `b` differ by at most `rel` of the larger.
pub fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12)
}

/// The result of `e` on `server` at `at` (keyed), checked, as `what`, against the same query
/// with its node-total branch disabled (`pid="-"`: the per-rank series alone): not empty, the
/// same series, the same values.
fn as_the_ranks_give(what: &str, server: &PromQl, e: &str, at: f64) -> Vec<(String, f64)> {
    let got = keyed(
        server
            .vector_at(e, at)
            .unwrap_or_else(|| panic!("{what}: {e}")),
    );
    let ranks_only = e.replace(r#"pid="""#, r#"pid="-""#);
    let truth = keyed(server.vector_at(&ranks_only, at).unwrap());
    assert!(!got.is_empty(), "{what}: no result for {e}");
    alike(&format!("{what}, the ranks give\n{e}"), &got, &truth, 1e-9);
    got
}

/// `got` and `want` (keyed results) have the same series, with values within `rel` of each
/// other (checked as `what`).
fn alike(what: &str, got: &[(String, f64)], want: &[(String, f64)], rel: f64) {
    let keys = |v: &[(String, f64)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(keys(got), keys(want), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(close(g.1, w.1, rel), "{what}: {g:?} vs {w:?}");
    }
}

/// `e` gives nothing on `server` at `at` (checked as `what`): a query of series the server does
/// not keep, never a wrong value.
fn nothing(what: &str, server: &PromQl, e: &str, at: f64) {
    let got = server
        .vector_at(e, at)
        .unwrap_or_else(|| panic!("{what}: {e}"));
    assert!(got.is_empty(), "{what}: {got:?}\n{e}");
}

/// The choices of variables every panel is checked with: all at All, and one host and rank.
const CHOICES: [&[(&str, &str)]; 2] = [&[], &[("$hostname", "node-a"), ("$local_rank", "1")]];

/// The dashboard on two servers scraping the ranks of `ranks`, `plain` the scan without node
/// totals and `summed` the one with them, neither with native histograms. Every panel query,
/// evaluated at one instant with its variables substituted (all values, and one host and rank
/// chosen), returns on both servers what the per-rank series alone give (the query with its
/// node-total branch disabled), which is what the ranks recorded: exact for registered memory
/// and the last-value gauges, and in the known proportions for the rates; the native-only
/// panels are empty. Doubling (the totals added to the ranks) would be a factor of 2.
pub fn every_panel_gives_the_ranks_totals(plain: &PromQl, summed: &PromQl) {
    let servers = [("without node totals", plain), ("with node totals", summed)];
    for (name, server) in servers {
        crate::ranks::wait_for_rates(server, name, |_| Some(()));
    }
    let at = a_second_ago();
    let d = dashboard();
    // Per panel, per choice: the result on the server without totals.
    let mut plain_results = Vec::new();
    for (server, prom) in servers {
        for chosen in CHOICES {
            for (title, expr) in panel_expressions(&d) {
                let e = expand_with(&expr, chosen);
                let what = format!("{server}, {title}, {chosen:?}");
                if native_only(&e) {
                    // These servers have no native histograms.
                    nothing(&what, prom, &e, at);
                    continue;
                }
                let got = as_the_ranks_give(&what, prom, &e, at);
                if server == "without node totals" {
                    plain_results.push(got);
                } else {
                    // The same panels on the other server (scraped at other instants): the
                    // same series, and rates within a few percent (doubling would be 2x).
                    let plain = plain_results.remove(0);
                    alike(&format!("{what}, the other server\n{e}"), &got, &plain, 0.2);
                }
            }
        }
    }
    for (server, prom) in servers {
        known_totals(server, prom, at);
    }
}

/// The panels of `prom` (named `server`) at `at` against values known from what the ranks
/// recorded, or computed from the per-rank series by queries written here, not taken from the
/// dashboard.
fn known_totals(server: &str, prom: &PromQl, at: f64) {
    let panel = |title: &str, target: usize| panel_target(prom, title, target, at);
    let values = |v: &[(String, f64)]| -> Vec<f64> { v.iter().map(|x| x.1).collect() };
    let one = |v: &[(String, f64)], needle: &str| -> f64 {
        let found: Vec<f64> = v
            .iter()
            .filter(|(k, _)| k.contains(needle))
            .map(|x| x.1)
            .collect();
        assert_eq!(found.len(), 1, "{server}: {needle} in {v:?}");
        found[0]
    };
    let near = |a: f64, b: f64| close(a, b, 0.02);
    // The same instant computed from the per-rank series: the panel must give exactly that.
    let reference = |promql: &str| keyed(prom.vector_at(promql, at).unwrap());
    let same = |panel: Vec<(String, f64)>, reference: Vec<(String, f64)>| {
        alike(server, &panel, &reference, 1e-9);
    };
    // Exact: node-a registered 4096 + 8192 and deregistered 2 x 1024; node-b 12288 + 16384
    // and 2 x 1024.
    let memory = panel("Registered memory per node (registered - deregistered)", 0);
    assert_eq!(values(&memory), [10240.0, 26624.0], "{server}");
    // Exact: each rank's last transfer, per rank.
    let last = panel("Last request size per rank", 0);
    assert_eq!(values(&last), [1000.0, 2000.0, 3000.0, 4000.0], "{server}");
    // Rates: what the ranks' own series give.
    let rank_rate =
        |m: &str, by: &str| reference(&format!(r#"sum by ({by}) (rate({m}{{pid!=""}}[10s]))"#));
    let per_node = "hostname, slurm_job_id, k8s_namespace";
    let node = panel("Transfer throughput per node", 0);
    // One line per node and job, whatever the ranks' agent names.
    assert_eq!(node.len(), 2, "{server}: {node:?}");
    same(node.clone(), rank_rate("agent_tx_bytes_total", per_node));
    same(
        panel("Transfer throughput per node", 1),
        rank_rate("agent_rx_bytes_total", per_node),
    );
    same(
        panel("Transfer throughput per rank", 0),
        rank_rate(
            "agent_tx_bytes_total",
            "hostname, agent_name, local_rank, pid, instance",
        ),
    );
    same(
        panel("Transfer throughput per job", 0),
        rank_rate("agent_tx_bytes_total", "slurm_job_id, k8s_namespace"),
    );
    let requests = panel("Request rate per node", 0);
    assert_eq!(requests.len(), 2, "{server}: {requests:?}");
    same(
        requests.clone(),
        rank_rate("agent_tx_requests_num_total", per_node),
    );
    same(
        panel("Errors by status", 0),
        rank_rate("agent_errors_total", "status"),
    );
    same(
        panel("Telemetry events dropped at the staging queue", 0),
        reference(
            r#"sum by (hostname, slurm_job_id, k8s_namespace) (increase(agent_telemetry_events_dropped_total{pid!=""}[10s]))"#,
        ),
    );
    // And in the proportions recorded (the ranks record in lockstep): node-b sends 7/3 of
    // node-a; one request per rank and tick, two ranks per host; one backend error per rank
    // and tick.
    let (a, b) = (one(&node, "node-a"), one(&node, "node-b"));
    assert!(a > 0.0 && near(b / a, 7.0 / 3.0), "{server}: {node:?}");
    let (ra, rb) = (one(&requests, "node-a"), one(&requests, "node-b"));
    assert!(ra > 0.0 && near(ra, rb), "{server}: {requests:?}");
    let errors = panel("Errors by status", 0);
    assert_eq!(errors.len(), 12, "{server}");
    assert!(
        near(one(&errors, "\"backend\""), ra + rb),
        "{server}: {errors:?}"
    );
    assert_eq!(one(&errors, "\"canceled\""), 0.0);
    // Transfer times of 100 and 200 µs on node-a, 300 and 400 µs on node-b.
    let mean = panel("Mean transfer time per node", 0);
    assert!(
        near(one(&mean, "node-a"), 150.0) && near(one(&mean, "node-b"), 350.0),
        "{server}: {mean:?}"
    );
    // The median of node-a: half its transfers are at most the 100 µs bound.
    let median = panel("Transfer time quantiles per node (start to completion)", 0);
    assert!(near(one(&median, "node-a"), 100.0), "{server}: {median:?}");
}

/// The dashboard on `native`, a server with native histograms on scraping the ranks' scan with
/// node totals: every panel query (the native ones included) gives what the ranks' own series
/// give, but those of classic series only, which are empty; and the quantiles are within one
/// bucket of the values recorded.
pub fn every_panel_gives_the_ranks_native_histograms(native: &PromQl) {
    crate::ranks::wait_for_rates(native, "native", |n| {
        let h = n.vector(r#"histogram_count(agent_xfer_time_us{pid=""})"#)?;
        (h.len() == 2).then_some(())
    });
    let at = a_second_ago();
    let d = dashboard();
    for chosen in CHOICES {
        for (title, expr) in panel_expressions(&d) {
            let mut e = expand_with(&expr, chosen);
            let what = format!("native, {title}, {chosen:?}");
            if classic_only(&e) {
                nothing(&what, native, &e, at);
                continue;
            }
            if native_only(&e) && !e.starts_with("histogram_") {
                // A heatmap's query is one histogram: its count is compared.
                e = format!("histogram_count({e})");
            }
            as_the_ranks_give(&what, native, &e, at);
        }
    }
    let bound = nixl_telemetry_series::native::bucket_width_bound(
        nixl_telemetry_series::native::DEFAULT_SCHEMA,
    );
    // Per node, the values recorded, half each: node-a's requests are 1000 and 2000 bytes (TX),
    // a tenth of that (RX), its transfers 100 and 200 µs; node-b's 3000 and 4000 bytes, 300
    // and 400 µs. A p99 is within one bucket of the larger value. With two halves, either
    // value is a median, and a p50 is within one bucket of one of them: 2.42 reports the lower
    // one's bucket, 3.x (which computes quantiles of 0.5 and above from the highest bucket
    // down) the higher one's.
    let sizes = "Request size quantiles per node (native histograms)";
    let times = "Transfer time quantiles per node (start to completion)";
    for (title, target, node_a, node_b) in [
        (sizes, 0, vec![1000.0, 2000.0], vec![3000.0, 4000.0]),
        (sizes, 1, vec![2000.0], vec![4000.0]),
        (sizes, 2, vec![100.0, 200.0], vec![300.0, 400.0]),
        (times, 0, vec![100.0, 200.0], vec![300.0, 400.0]),
        (times, 2, vec![200.0], vec![400.0]),
    ] {
        let v = panel_target(native, title, target, at);
        assert_eq!(v.len(), 2, "{title} {target}: {v:?}");
        for ((labels, got), recorded) in v.iter().zip([node_a, node_b]) {
            assert!(
                recorded
                    .iter()
                    .any(|want| (got - want).abs() <= bound * want),
                "{title} {target}, {labels}: {got}, recorded {recorded:?}"
            );
        }
    }
}

/// The per-rank panels show a process without a `pid` label too (a process of the
/// single-process `prometheus` exporter, scraped by the server `start(port)` starts; pushed
/// series have the same shape, told apart by `instance`): one line for it, never a node total.
pub fn per_rank_panels_show_a_process_without_a_pid<P: Deref<Target = PromQl>>(
    start: impl FnOnce(u16) -> P,
) {
    let port = crate::common::free_port();
    crate::common::use_port(port);
    let c = crate::common::collector("solo");
    let prom = start(port);
    // Transfers between the scrapes, so that every rate has two samples to differ by.
    crate::common::poll(
        std::time::Duration::from_secs(60),
        "rates of the prometheus exporter's process",
        || {
            for _ in 0..10 {
                let _ = c.add_xfer_stats(250, true, 4096, 20);
            }
            c.flush();
            std::thread::sleep(std::time::Duration::from_millis(200));
            let v = prom.vector("count_over_time(agent_tx_bytes_total[10s]) >= 4")?;
            (v.len() == 1).then_some(())
        },
    );
    let at = a_second_ago();
    for title in [
        "Transfer throughput per rank",
        "Request rate per rank",
        "Transfer time p99 per rank",
        "Last request size per rank",
    ] {
        let v = panel_target(&prom, title, 0, at);
        assert_eq!(v.len(), 1, "{title}: {v:?}");
        assert!(
            v[0].0.contains(r#""agent_name":"solo""#) && v[0].1 > 0.0,
            "{title}: {v:?}"
        );
    }
}
