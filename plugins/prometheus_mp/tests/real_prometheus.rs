//! Four rank processes behind one port, checked by real Prometheus components from Debian's
//! `prometheus` package (installed by `.ci/run`): `promtool check metrics` accepts the page,
//! (also with the node totals of `NIXL_TELEMETRY_MP_AGGREGATE=sum`), and a Prometheus server
//! scraping the one target returns four series for `sum by (local_rank) (...)`, with each
//! rank's value.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use telemetry_exporter_prometheus_mp::config::{Aggregate, ScanConfig};
use telemetry_exporter_prometheus_mp::store_scan::StoreScan;

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

/// A Prometheus server scraping one target every second; killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn scraping(work: &std::path::Path, target: u16) -> Prometheus {
        let yml = work.join("prometheus.yml");
        let scrape = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n- job_name: \
             node\n  static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
        );
        std::fs::write(&yml, scrape).unwrap();
        let port = free_port();
        let log = work.join("prometheus.log");
        let child = Command::new(tool("prometheus"))
            .args([
                format!("--config.file={}", yml.display()),
                format!("--storage.tsdb.path={}", work.join("tsdb").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                "--log.level=warn".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Prometheus { child, port, log }
    }

    /// The series of an instant query as (labels, value), when the query succeeds.
    fn vector(&self, promql: &str) -> Option<Vec<(serde_json::Value, f64)>> {
        let query: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        // HTTP/1.0: Prometheus answers without chunked encoding.
        let request = format!("GET /api/v1/query?query={query} HTTP/1.0\r\n\r\n");
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let reply = exchange(addr, request.as_bytes()).ok()?;
        let json: serde_json::Value = serde_json::from_str(&reply.body).ok()?;
        let series = json["data"]["result"].as_array()?;
        series
            .iter()
            .map(|s| Some((s["metric"].clone(), s["value"][1].as_str()?.parse().ok()?)))
            .collect()
    }
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
    // The same stores with node totals: one per agent name, counters and histograms summed.
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
    let prefill = totals
        .lines()
        .find(|l| l.starts_with("agent_tx_bytes_total{") && l.contains("\"prefill\"}"));
    assert!(prefill.is_some_and(|l| l.ends_with(" 3000")), "{totals}");
    std::fs::write(&page, &totals).unwrap();
    promtool_accepts(&page);
    let prom = Prometheus::scraping(scratch.path(), port);
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
        std::fs::read_to_string(&prom.log).unwrap_or_default()
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
