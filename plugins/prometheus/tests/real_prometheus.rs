//! The exposition checked by real Prometheus components from Debian's `prometheus` package
//! (installed by `.ci/run`): `promtool check metrics` accepts it, and a real Prometheus server
//! scraping the plug-in every second returns, through its HTTP API, the values the agent
//! produced, including `histogram_quantile` over the transfer-time buckets.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

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
    let prom = Prometheus::scraping(dir.path(), &[port]);
    let sel = format!("{{agent_name=\"{agent}\"}}");
    let labels = prom.wait_for_value(&format!("agent_tx_bytes_total{sel}"), 7000.0);
    assert_eq!(labels["job"], "scrape");
    assert_eq!(labels["instance"], format!("127.0.0.1:{port}"));
    assert_eq!(labels["agent_name"], agent);
    assert!(labels["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    prom.wait_for_value("up{job=\"scrape\"}", 1.0);
    prom.wait_for_value(&format!("agent_tx_last_bytes{sel}"), 500.0);
    prom.wait_for_value(&format!("agent_tx_requests_num_total{sel}"), 4.0);
    prom.wait_for_value(&format!("agent_xfer_time_us_count{sel}"), 4.0);
    prom.wait_for_value(&format!("agent_xfer_time_us_sum{sel}"), 935.0);
    // Buckets 5 | 30 | 200 | 700 over 10, 25, 50, 100, 250, 500, 1000, ...: the median falls in
    // (25, 50] holding the 2nd of 4 observations -> 50; the 75th percentile in (100, 250] -> 250.
    prom.wait_for_value(
        &format!("histogram_quantile(0.5, agent_xfer_time_us_bucket{sel})"),
        50.0,
    );
    prom.wait_for_value(
        &format!("histogram_quantile(0.75, agent_xfer_time_us_bucket{sel})"),
        250.0,
    );
    prom.wait_for_value(
        &format!("agent_errors_total{{agent_name=\"{agent}\",status=\"backend\"}}"),
        1.0,
    );
    prom.wait_for_value(&format!("agent_memory_registered_total{sel}"), 4096.0);
    // New events reach Prometheus on a later scrape.
    c.add_xfer_stats(40, true, 3000, 2);
    c.flush();
    prom.wait_for_value(&format!("agent_tx_bytes_total{sel}"), 10000.0);
    prom.wait_for_value(
        &format!("agent_xfer_time_us_bucket{{agent_name=\"{agent}\",le=\"50\"}}"),
        3.0,
    );
    drop(prom);
    drop(c);
}
