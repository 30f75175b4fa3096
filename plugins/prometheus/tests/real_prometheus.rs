//! The exposition checked by real Prometheus components from Debian's `prometheus` package
//! (installed by `.ci/run`): `promtool check metrics` accepts it, and a real Prometheus server
//! scraping the plug-in every second returns, through its HTTP API, the values the agent
//! produced, including `histogram_quantile` over the transfer-time buckets.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

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
    let dir = tempfile::tempdir().unwrap();
    scraped_exactly("prom-e2e", "50", |port| {
        Prometheus::scraping(dir.path(), &[port])
    });
}
