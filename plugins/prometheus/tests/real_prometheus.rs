//! The exposition checked by real Prometheus components from Debian's `prometheus` package
//! (installed by `.ci/run`): `promtool check metrics` accepts it, and a real Prometheus server
//! scraping the plug-in every second returns, through its HTTP API, the values the agent
//! produced, including `histogram_quantile` over the transfer-time buckets.

mod common;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nixl_telemetry_core::EventType;

/// The lint findings `promtool check metrics` reports for NIXL's fixed names; anything else
/// (and any parse error) fails the test.
const KNOWN_LINTS: [&str; 2] = [
    "agent_xfer_post_time_us metric names should not contain abbreviated units",
    "agent_xfer_time_us metric names should not contain abbreviated units",
];

/// Runs `promtool check metrics` on `body`: exit status and everything it printed.
fn promtool_check(body: &str) -> (i32, String) {
    let mut child = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn promtool_accepts_the_exposition() {
    let _s = serial();
    let port = free_port();
    use_port(port);
    let a = collector("promtool-a");
    let b = collector("we\"ird \\ name\nwith newline");
    for (xfer, bytes) in [(5, 1000), (30, 2000), (200, 3500), (700, 500)] {
        a.add_xfer_stats(xfer, true, bytes, 2);
        b.add_xfer_stats(xfer, false, bytes, 3);
    }
    a.update_error(-3).unwrap();
    a.flush();
    b.flush();
    let body = scrape_text(port);
    let (code, out) = promtool_check(&body);
    let findings: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    match code {
        0 => assert!(findings.is_empty(), "{out}"),
        // Exit status 3: lint findings only; each must be a known one.
        3 => {
            for f in &findings {
                assert!(
                    KNOWN_LINTS.contains(&f.trim()),
                    "unexpected finding {f:?}\n{body}"
                );
            }
        }
        _ => panic!("promtool check metrics failed ({code}):\n{out}\n{body}"),
    }
    // The check is not vacuous: a broken exposition is refused.
    let broken = body.replacen("agent_tx_bytes_total{", "agent_tx_bytes_total{{", 1);
    let (code, out) = promtool_check(&broken);
    assert_eq!(code, 1, "{out}");
}

/// A Prometheus server killed (and waited for) when dropped.
struct PrometheusServer {
    child: Child,
    log: PathBuf,
    port: u16,
}

impl PrometheusServer {
    fn start(dir: &Path, target_port: u16) -> PrometheusServer {
        let port = free_port();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: nixl\n    static_configs:\n      - targets: \
                 ['127.0.0.1:{target_port}']\n"
            ),
        )
        .unwrap();
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap();
        PrometheusServer { child, log, port }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The single value of an instant query, once Prometheus has one.
    fn query(&self, promql: &str) -> Option<(serde_json::Value, f64)> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        );
        let reply = exchange(addr, request.as_bytes()).ok()?;
        if reply.status != 200 {
            return None;
        }
        let body = if reply
            .header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            dechunk(&reply.body)
        } else {
            reply.body
        };
        let json: serde_json::Value = serde_json::from_str(&body).ok()?;
        assert_eq!(json["status"], "success", "{json}");
        let result = json["data"]["result"].as_array()?;
        assert!(result.len() <= 1, "{promql}: {json}");
        let first = result.first()?;
        let value: f64 = first["value"][1].as_str()?.parse().ok()?;
        Some((first["metric"].clone(), value))
    }

    /// Waits until `promql` has the value `expected` (Prometheus scrapes every second).
    fn wait_for(&mut self, promql: &str, expected: f64) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("prometheus exited ({status}):\n{}", self.log());
            }
            match self.query(promql) {
                Some((labels, v)) if v == expected => return labels,
                other => last = other.map(|(_, v)| v),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "{promql}: expected {expected}, last seen {last:?}\nprometheus log:\n{}",
            self.log()
        );
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Decodes a chunked body.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].strip_prefix("\r\n").unwrap_or(&tail[n..]);
    }
    out
}

#[test]
fn a_real_prometheus_server_scrapes_the_agent() {
    let _s = serial();
    tool("prometheus");
    let port = free_port();
    use_port(port);
    let agent = "prom-e2e";
    let c = collector(agent);
    for (xfer, bytes) in [(5, 1000), (30, 2000), (200, 3500), (700, 500)] {
        c.add_xfer_stats(xfer, true, bytes, 2);
    }
    c.update_error(-3).unwrap();
    c.update_data(EventType::AgentMemoryRegistered, 4096);
    c.flush();
    let dir = tempfile::tempdir().unwrap();
    let mut prom = PrometheusServer::start(dir.path(), port);
    let sel = format!("{{agent_name=\"{agent}\"}}");
    let labels = prom.wait_for(&format!("agent_tx_bytes_total{sel}"), 7000.0);
    assert_eq!(labels["job"], "nixl");
    assert_eq!(labels["instance"], format!("127.0.0.1:{port}"));
    assert_eq!(labels["agent_name"], agent);
    assert!(labels["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    prom.wait_for("up{job=\"nixl\"}", 1.0);
    prom.wait_for(&format!("agent_tx_last_bytes{sel}"), 500.0);
    prom.wait_for(&format!("agent_tx_requests_num_total{sel}"), 4.0);
    prom.wait_for(&format!("agent_xfer_time_us_count{sel}"), 4.0);
    prom.wait_for(&format!("agent_xfer_time_us_sum{sel}"), 935.0);
    // Buckets 5 | 30 | 200 | 700 over 10, 25, 50, 100, 250, 500, 1000, ...: the median falls in
    // (25, 50] holding the 2nd of 4 observations -> 50; the 75th percentile in (100, 250] -> 250.
    prom.wait_for(
        &format!("histogram_quantile(0.5, agent_xfer_time_us_bucket{sel})"),
        50.0,
    );
    prom.wait_for(
        &format!("histogram_quantile(0.75, agent_xfer_time_us_bucket{sel})"),
        250.0,
    );
    prom.wait_for(
        &format!("agent_errors_total{{agent_name=\"{agent}\",status=\"backend\"}}"),
        1.0,
    );
    prom.wait_for(&format!("agent_memory_registered_total{sel}"), 4096.0);
    // New events reach Prometheus on a later scrape.
    c.add_xfer_stats(40, true, 3000, 2);
    c.flush();
    prom.wait_for(&format!("agent_tx_bytes_total{sel}"), 10000.0);
    prom.wait_for(
        &format!("agent_xfer_time_us_bucket{{agent_name=\"{agent}\",le=\"50\"}}"),
        3.0,
    );
    drop(prom);
    drop(c);
}
