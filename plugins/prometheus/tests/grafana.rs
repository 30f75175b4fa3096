//! The Grafana dashboard (`examples/grafana/nixl-telemetry-dashboard.json`) is valid JSON, every
//! PromQL expression in it parses (`promtool check rules`), every metric it queries is a
//! series the exporters really expose, and every panel query, its variables substituted,
//! returns the right totals from a real Prometheus scraping `prometheus_mp` ranks with and
//! without the node totals of `NIXL_TELEMETRY_MP_AGGREGATE=sum` (never twice the truth).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use nixl_telemetry_series::{families, FamilyKind, NATIVE_SIZE_FAMILIES};

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
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// The dashboard's query variables.
const VARIABLES: [&str; 5] = [
    "$hostname",
    "$agent",
    "$local_rank",
    "$slurm_job_id",
    "$k8s_namespace",
];

/// Grafana's variables replaced by what they expand to (`All`: `.*`), so Prometheus can parse
/// the query.
fn expand(expr: &str) -> String {
    expand_with(expr, &[])
}

/// Like [`expand`], with some variables set to one value.
fn expand_with(expr: &str, chosen: &[(&str, &str)]) -> String {
    let mut e = expr.replace("$__rate_interval", "10s");
    for v in VARIABLES {
        let value = chosen.iter().find(|(n, _)| *n == v).map_or(".*", |c| c.1);
        e = e.replace(v, value);
    }
    assert!(!e.contains('$'), "a variable is left in {e}");
    e
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
        if !preceded_by_ident && word != "agent_name" && word != "agent_instance" {
            names.insert(word.to_owned());
        }
        i = end;
    }
    names
}

/// The native histogram families (no `_bucket`, `_sum` or `_count` series of their own).
fn native_families() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = families()
        .iter()
        .filter(|f| f.kind == FamilyKind::Histogram)
        .map(|f| f.name.to_owned())
        .collect();
    names.extend(NATIVE_SIZE_FAMILIES.iter().map(|f| f.0.to_owned()));
    names
}

/// Whether `expr` reads native histograms only (a panel marked *native histograms*): it is
/// empty unless the exporters keep them and Prometheus ingests them. (An expression reading
/// both has a classic branch: `native or classic`.)
fn native_only(expr: &str) -> bool {
    let natives = native_families();
    let names = metric_names(expr);
    let classic = |n: &String| ["_bucket", "_sum", "_count"].iter().any(|s| n.ends_with(s));
    names.iter().any(|n| natives.contains(n)) && !names.iter().any(classic)
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

/// The result of target `target` of the panel titled `title`, its variables at all values,
/// evaluated by `prom` at `at`: (labels, value), sorted.
fn panel_target(
    d: &serde_json::Value,
    prom: &common::Prometheus,
    title: &str,
    target: usize,
    at: f64,
) -> Vec<(String, f64)> {
    let p = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title}"));
    let expr = p["targets"][target]["expr"].as_str().unwrap();
    keyed(prom.vector_at(&expand(expr), at).unwrap())
}

/// The panels' expressions with their titles.
fn panel_expressions(d: &serde_json::Value) -> Vec<(String, String)> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_owned();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_owned()))
        })
        .collect()
}

/// A query's result as (labels without `__name__` and `instance`, value), sorted.
fn keyed(v: Vec<(serde_json::Value, f64)>) -> Vec<(String, f64)> {
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

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12)
}

/// One simulated rank: its host, local rank, job and the amounts it records per tick.
struct Rank {
    host: &'static str,
    local_rank: &'static str,
    job: &'static str,
    /// Bytes sent per tick (received: a tenth).
    tx: u64,
}

const RANKS: [Rank; 4] = [
    Rank {
        host: "node-a",
        local_rank: "0",
        job: "101",
        tx: 1000,
    },
    Rank {
        host: "node-a",
        local_rank: "1",
        job: "101",
        tx: 2000,
    },
    Rank {
        host: "node-b",
        local_rank: "0",
        job: "202",
        tx: 3000,
    },
    Rank {
        host: "node-b",
        local_rank: "1",
        job: "202",
        tx: 4000,
    },
];

/// Four ranks of two jobs on two hosts (stores in one directory, written in this process),
/// served by two store scans of that directory, one with node totals and one without, each
/// scraped by its own Prometheus server. Every panel query, evaluated at one instant with its
/// variables substituted (all values, and one host and rank chosen), returns on both servers
/// what the per-rank series alone give (the query with its node-total branch disabled), which
/// is what the ranks recorded: exact for registered memory and the last-value gauges, and in
/// the known proportions for the rates. Doubling (the totals added to the ranks) would be a
/// factor of 2.
#[test]
fn every_panel_returns_the_ranks_totals_with_and_without_node_totals() {
    use nixl_telemetry_core::{Event, EventType};
    use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
    use nixl_telemetry_mp_store::election::Role;
    use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    nixl_telemetry_mp_store::dir::prepare(&dir).unwrap();
    let writers: Vec<StoreWriter> = RANKS
        .iter()
        .enumerate()
        .map(|(i, r)| {
            // Named apart, as ranks usually are: the node totals are per node and job all
            // the same.
            let id = Identity {
                agent_name: format!("prefill-{i}"),
                hostname: r.host.into(),
                local_rank: r.local_rank.into(),
                pid: 1000 + i as i64,
                run_marker: 1,
                instance: 0,
                labels: nixl_telemetry_series::WorkloadLabels::from_pairs(vec![(
                    "slurm_job_id".into(),
                    r.job.into(),
                )])
                .unwrap(),
            };
            // With native histograms: the text page the classic servers scrape is the same.
            let w = StoreWriter::create_with(
                &dir,
                &id,
                &nixl_telemetry_series::Buckets::default(),
                true,
            )
            .unwrap();
            w.apply(&[
                Event::new(EventType::AgentMemoryRegistered, 4096 * (i as u64 + 1)),
                Event::new(EventType::AgentMemoryDeregistered, 1024),
            ]);
            w
        })
        .collect();
    // Every 50 ms each rank records one transfer (its bytes, a transfer time of a tenth of
    // them in µs), a backend error and a dropped event.
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for (w, r) in writers.iter().zip(&RANKS) {
                    w.apply(&[
                        Event::new(EventType::AgentTxBytes, r.tx),
                        Event::new(EventType::AgentRxBytes, r.tx / 10),
                        Event::new(EventType::AgentTxRequestsNum, 1),
                        Event::new(EventType::AgentRxRequestsNum, 1),
                        Event::new(EventType::AgentXferTime, r.tx / 10),
                        Event::new(EventType::AgentXferPostTime, r.tx / 100),
                        Event::new(EventType::AgentErrBackend, 1),
                        Event::new(EventType::AgentTelemetryEventsDropped, 1),
                    ]);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            writers
        })
    };
    let serve = |aggregate| {
        let scan = ScanConfig {
            dir: dir.clone(),
            stale_ttl: Duration::from_secs(30),
            aggregate,
        };
        let port = common::free_port();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let e = nixl_telemetry_mp_store::join_election(&scan, addr);
        assert_eq!(e.poll(Instant::now()).unwrap(), Role::Serving(addr));
        (e, port)
    };
    let (_plain, plain_port) = serve(Aggregate::None);
    let (_summed, summed_port) = serve(Aggregate::Sum);
    let servers = [
        (
            "without node totals",
            common::Prometheus::scraping(&scratch.path().join("plain"), &[plain_port]),
        ),
        (
            "with node totals",
            common::Prometheus::scraping(&scratch.path().join("summed"), &[summed_port]),
        ),
    ];
    // Enough samples for every 10 s rate window.
    for (name, prom) in &servers {
        common::poll(Duration::from_secs(90), name, || {
            let v = prom.vector(r#"count_over_time(agent_tx_bytes_total{pid!=""}[10s])"#)?;
            (v.len() == 4 && v.iter().all(|(_, n)| *n >= 8.0)).then_some(())
        });
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let at = now - 1.0;
    let d = dashboard();
    let choices: [&[(&str, &str)]; 2] = [&[], &[("$hostname", "node-a"), ("$local_rank", "1")]];
    // Per panel, per choice: the result on the server without totals.
    let mut plain_results = Vec::new();
    for (server, prom) in &servers {
        for chosen in choices {
            for (title, expr) in panel_expressions(&d) {
                let e = expand_with(&expr, chosen);
                if native_only(&e) {
                    // These servers have no native histograms: nothing, never a wrong value.
                    let got = prom.vector_at(&e, at).unwrap_or_else(|| panic!("{e}"));
                    assert!(got.is_empty(), "{server}, {title}: {got:?}");
                    continue;
                }
                let got = keyed(prom.vector_at(&e, at).unwrap_or_else(|| panic!("{e}")));
                // The node-total branch disabled: the per-rank series alone.
                let ranks_only = e.replace(r#"pid="""#, r#"pid="-""#);
                let truth = keyed(prom.vector_at(&ranks_only, at).unwrap());
                assert!(
                    !got.is_empty(),
                    "{server}, {title}, {chosen:?}: no result for {e}"
                );
                assert_eq!(
                    got.iter().map(|g| &g.0).collect::<Vec<_>>(),
                    truth.iter().map(|t| &t.0).collect::<Vec<_>>(),
                    "{server}, {title}: {e}"
                );
                for (g, t) in got.iter().zip(&truth) {
                    assert!(
                        close(g.1, t.1, 1e-9),
                        "{server}, {title}, {chosen:?}: {} is {}, the ranks give {}\n{e}",
                        g.0,
                        g.1,
                        t.1
                    );
                }
                if *server == "without node totals" {
                    plain_results.push(got);
                } else {
                    // The same panels on the other server (scraped at other instants): the
                    // same series, and rates within a few percent (doubling would be 2x).
                    let plain = &plain_results[0];
                    assert_eq!(
                        got.iter().map(|g| &g.0).collect::<Vec<_>>(),
                        plain.iter().map(|p| &p.0).collect::<Vec<_>>(),
                        "{title}: {e}"
                    );
                    for (g, p) in got.iter().zip(plain) {
                        assert!(
                            close(g.1, p.1, 0.2),
                            "{title}, {}: {} vs {}\n{e}",
                            g.0,
                            g.1,
                            p.1
                        );
                    }
                    plain_results.remove(0);
                }
            }
        }
    }
    // Known totals.
    for (server, prom) in &servers {
        let panel = |title: &str, target: usize| panel_target(&d, prom, title, target, at);
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
        // The same instant computed from the per-rank series by a query written here, not
        // taken from the dashboard: the panel must give exactly that.
        let reference = |promql: &str| keyed(prom.vector_at(promql, at).unwrap());
        let same = |panel: Vec<(String, f64)>, reference: Vec<(String, f64)>| {
            assert_eq!(
                panel.len(),
                reference.len(),
                "{server}: {panel:?} vs {reference:?}"
            );
            for (p, r) in panel.iter().zip(&reference) {
                assert!(
                    p.0 == r.0 && close(p.1, r.1, 1e-9),
                    "{server}: {p:?} vs {r:?}"
                );
            }
        };
        // Exact: node-a registered 4096 + 8192 and deregistered 2 x 1024; node-b 12288 +
        // 16384 and 2 x 1024.
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
        // node-a; one request per rank and tick, two ranks per host; one backend error per
        // rank and tick.
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
    // The page with node totals once more, scraped by a server with native histograms on:
    // every panel (the native ones included) gives what the ranks' own series give, and the
    // quantiles are within one bucket of the values recorded.
    let native = common::Prometheus::launch(
        &scratch.path().join("native"),
        &common::Launch {
            targets: &[summed_port],
            native: true,
            ..Default::default()
        },
    );
    common::poll(Duration::from_secs(90), "native", || {
        let v = native.vector(r#"count_over_time(agent_tx_bytes_total{pid!=""}[10s])"#)?;
        let h = native.vector(r#"histogram_count(agent_xfer_time_us{pid=""})"#)?;
        (v.len() == 4 && v.iter().all(|(_, n)| *n >= 8.0) && h.len() == 2).then_some(())
    });
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0;
    for chosen in choices {
        for (title, expr) in panel_expressions(&d) {
            let mut e = expand_with(&expr, chosen);
            if native_only(&e) && !e.starts_with("histogram_quantile") {
                // A heatmap's query is one histogram: its count is compared.
                e = format!("histogram_count({e})");
            }
            let got = keyed(native.vector_at(&e, at).unwrap_or_else(|| panic!("{e}")));
            let ranks_only = e.replace(r#"pid="""#, r#"pid="-""#);
            let truth = keyed(native.vector_at(&ranks_only, at).unwrap());
            assert!(
                !got.is_empty(),
                "native, {title}, {chosen:?}: no result for {e}"
            );
            assert_eq!(got.len(), truth.len(), "native, {title}: {e}");
            for (g, t) in got.iter().zip(&truth) {
                assert!(
                    g.0 == t.0 && close(g.1, t.1, 1e-9),
                    "native, {title}, {chosen:?}: {g:?}, the ranks give {t:?}\n{e}"
                );
            }
        }
    }
    let bound = nixl_telemetry_series::native::bucket_width_bound(
        nixl_telemetry_series::native::DEFAULT_SCHEMA,
    );
    let target = |title: &str, target: usize| panel_target(&d, &native, title, target, at);
    // Per node: node-a's requests are 1000 and 2000 bytes (TX), a tenth of that (RX), its
    // transfers 100 and 200 µs; node-b's 3000 and 4000 bytes, 300 and 400 µs.
    let sizes = "Request size quantiles per node (native histograms)";
    let times = "Transfer time quantiles per node (start to completion)";
    for (title, target_index, node_a, node_b) in [
        (sizes, 0, 1000.0, 3000.0),
        (sizes, 1, 2000.0, 4000.0),
        (sizes, 2, 100.0, 300.0),
        (times, 0, 100.0, 300.0),
        (times, 2, 200.0, 400.0),
    ] {
        let v = target(title, target_index);
        assert_eq!(v.len(), 2, "{title} {target_index}: {v:?}");
        for ((labels, got), want) in v.iter().zip([node_a, node_b]) {
            assert!(
                (got - want).abs() <= bound * want,
                "{title} {target_index}, {labels}: {got}, recorded {want}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(feeder.join().unwrap());
}

/// The per-rank panels show a process without a `pid` label too (a process of the
/// single-process `prometheus` exporter here; pushed series have the same shape, told apart by
/// `instance`): one line for it, never a node total.
#[test]
fn per_rank_panels_show_a_process_without_a_pid() {
    let _s = common::serial();
    let port = common::free_port();
    common::use_port(port);
    let c = common::collector("solo");
    let scratch = tempfile::tempdir().unwrap();
    let prom = common::Prometheus::scraping(scratch.path(), &[port]);
    // Transfers between the scrapes, so that every rate has two samples to differ by.
    common::poll(
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
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0;
    let d = dashboard();
    for title in [
        "Transfer throughput per rank",
        "Request rate per rank",
        "Transfer time p99 per rank",
        "Last request size per rank",
    ] {
        let v = panel_target(&d, &prom, title, 0, at);
        assert_eq!(v.len(), 1, "{title}: {v:?}");
        assert!(
            v[0].0.contains(r#""agent_name":"solo""#) && v[0].1 > 0.0,
            "{title}: {v:?}"
        );
    }
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
