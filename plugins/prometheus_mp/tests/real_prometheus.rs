//! Four rank processes behind one port, checked by real Prometheus components from Debian's
//! `prometheus` package (installed by `.ci/run`): `promtool check metrics` accepts the page,
//! (also with the node totals of `NIXL_TELEMETRY_MP_AGGREGATE=sum`), and a Prometheus server
//! scraping the one target returns four series for `sum by (local_rank) (...)`, with each
//! rank's value.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store_scan::StoreScan;

/// `promtool check metrics` accepts `page` (a file): exit 0, or 3 with only the known lint on
/// NIXL's `_us` histogram names.
fn promtool_accepts(page: &Path) {
    let out = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(page).unwrap())
        .output()
        .unwrap();
    let findings = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    let unexpected: Vec<&str> = findings
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("should not contain abbreviated units"))
        .collect();
    assert!(
        matches!(out.status.code(), Some(0 | 3)) && unexpected.is_empty(),
        "promtool: {:?}\n{findings}",
        out.status
    );
}

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

#[test]
fn promtool_and_a_prometheus_server_see_four_ranks_behind_one_target() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let port = free_port();
    let _ranks: Vec<Proc> = (0..4u64)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port,
                // Two roles of two ranks each (the pid tells same-named agents apart).
                agent: if r < 2 { "prefill" } else { "decode" },
                local_rank: &r.to_string(),
                bytes: 1000 * (r + 1),
                extra: &[],
            })
        })
        .collect();
    let body = poll(Duration::from_secs(10), "a page of four ranks", || {
        try_scrape(port).filter(|s| pids(s).len() == 4)
    })
    .body;
    let page = scratch.path().join("page.txt");
    std::fs::write(&page, &body).unwrap();
    promtool_accepts(&page);
    // The same stores with node totals: one for the node (its ranks have two agent names, and
    // one job: no workload labels), counters and histograms summed, no `agent_name`.
    let totals = StoreScan::new(ScanConfig {
        dir: dir.clone(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::Sum,
    })
    .scrape();
    assert!(
        totals.contains("agent_tx_bytes_total{hostname="),
        "{totals}"
    );
    let node: Vec<&str> = totals
        .lines()
        .filter(|l| l.starts_with("agent_tx_bytes_total{") && !l.contains("agent_name"))
        .collect();
    assert_eq!(node.len(), 1, "{totals}");
    assert!(node[0].ends_with("\"} 10000"), "{totals}");
    std::fs::write(&page, &totals).unwrap();
    promtool_accepts(&page);
    let prom = Prometheus::scraping(scratch.path(), &[port]);
    let by_rank = poll(Duration::from_secs(60), "four series by local_rank", || {
        prom.vector("sum by (local_rank) (agent_tx_bytes_total)")
            .filter(|v| v.len() == 4)
    });
    let mut values: Vec<(String, f64)> = by_rank
        .iter()
        .map(|(m, v)| (m["local_rank"].as_str().unwrap().to_owned(), *v))
        .collect();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        values,
        [
            ("0".into(), 1000.0),
            ("1".into(), 2000.0),
            ("2".into(), 3000.0),
            ("3".into(), 4000.0)
        ],
        "{}",
        prom.log_text()
    );
    // One target for the whole node.
    let up = prom.vector("up").unwrap();
    assert_eq!(up.len(), 1);
    // Transfer times 100, 200, 300, 400 µs: the node's median is the 250 µs bound.
    let median = prom
        .vector("histogram_quantile(0.5, sum by (le) (agent_xfer_time_us_bucket))")
        .unwrap();
    assert_eq!(median.len(), 1);
    assert_eq!(median[0].1, 250.0);
}

/// Four ranks of two jobs on one node, each job's label set its own way (job 101 from Slurm's
/// variables, job 202 explicitly): a Prometheus server scraping the one target sums each job
/// exactly with `sum by (slurm_job_id)`, with and without the node totals of
/// `NIXL_TELEMETRY_MP_AGGREGATE=sum` (per-rank series only, `pid!=""`).
#[test]
fn a_prometheus_server_sums_each_job_by_its_workload_label() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let port = free_port();
    let from_slurm = [
        ("NIXL_TELEMETRY_LABELS_FROM", "slurm"),
        ("SLURM_JOB_ID", "101"),
        ("SLURM_NODEID", "0"),
        ("NIXL_TELEMETRY_MP_AGGREGATE", "sum"),
    ];
    let explicit = [
        ("NIXL_TELEMETRY_LABELS", "slurm_job_id=202,team=decode"),
        ("NIXL_TELEMETRY_MP_AGGREGATE", "sum"),
    ];
    let _ranks: Vec<Proc> = (0..4u64)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port,
                agent: if r < 2 { "job101" } else { "job202" },
                local_rank: &(r % 2).to_string(),
                bytes: 1000 * (r + 1),
                extra: if r < 2 { &from_slurm } else { &explicit },
            })
        })
        .collect();
    let page = poll(Duration::from_secs(10), "a page of four ranks", || {
        try_scrape(port).filter(|s| pids(s).len() == 4)
    });
    let path = scratch.path().join("page.txt");
    std::fs::write(&path, &page.body).unwrap();
    promtool_accepts(&path);
    let prom = Prometheus::scraping(&scratch.path().join("prom"), &[port]);
    let jobs = |promql: &str| {
        poll(Duration::from_secs(60), promql, || {
            prom.vector(promql).filter(|v| v.len() == 2)
        })
        .into_iter()
        .map(|(m, v)| (m["slurm_job_id"].as_str().unwrap().to_owned(), v))
        .collect::<std::collections::BTreeMap<_, _>>()
    };
    let expected = [("101".to_owned(), 3000.0), ("202".to_owned(), 7000.0)].into();
    assert_eq!(
        jobs(r#"sum by (slurm_job_id) (agent_tx_bytes_total{pid!=""})"#),
        expected,
        "{}",
        prom.log_text()
    );
    // The node totals carry the job's labels: one per job, the same sums.
    assert_eq!(
        jobs(r#"sum by (slurm_job_id) (agent_tx_bytes_total{pid=""})"#),
        expected
    );
    // Each job's own labels only: Slurm's node id on job 101, the team on job 202.
    let nodeid = prom
        .vector(r#"count by (slurm_job_id, slurm_node_id, team) (agent_tx_bytes_total{pid!=""})"#)
        .unwrap();
    let mut sets: Vec<(String, String, String)> = nodeid
        .iter()
        .map(|(m, _)| {
            let l = |k: &str| m[k].as_str().unwrap_or("").to_owned();
            (l("slurm_job_id"), l("slurm_node_id"), l("team"))
        })
        .collect();
    sets.sort();
    assert_eq!(
        sets,
        [
            ("101".into(), "0".into(), "".into()),
            ("202".into(), "".into(), "decode".into())
        ]
    );
}
