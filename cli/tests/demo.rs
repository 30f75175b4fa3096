//! `nixl-telemetry demo`: the live summary and its accounting, event blocks and a kept ring,
//! argument checks, the Prometheus side, and `NIXL_LOG_LEVEL`.

mod common;

use common::*;

#[test]
fn demo_shows_a_live_summary_and_accounts_for_every_event() {
    let out = cmd()
        .args(["demo", "--seconds", "1.5", "--rate", "50", "--threads", "2"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("=== NIXL Telemetry Event ==="), "{text}");
    // The top frame, then the summary.
    assert!(text.contains("demo agent 'demo-agent'"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("AGENT")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("demo-agent ")), "{text}");
    assert!(text.contains("=== Summary ==="));
    assert!(
        text.contains("accounting: every event accounted for"),
        "{text}"
    );
}

#[test]
fn demo_events_blocks_and_a_kept_ring() {
    let dir = tempfile::tempdir().unwrap();
    let out = cmd()
        .args([
            "demo",
            "--seconds",
            "0.5",
            "--rate",
            "50",
            "--events",
            "--dir",
        ])
        .arg(dir.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("=== NIXL Telemetry Event ==="));
    assert!(
        text.contains("accounting: every event accounted for"),
        "{text}"
    );
    assert!(text.contains("The ring is kept"), "{text}");
    // Read without being consumed: every event the demo showed is still in the ring.
    let blocks = text.matches("=== NIXL Telemetry Event ===").count() as u64;
    let v = stats_json(&[&dir.path().join("demo-agent")]);
    assert_eq!(v["total_events"].as_u64(), Some(blocks));
}

#[test]
fn demo_arguments_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["--threads", "0"][..],
        &["--rate", "0"],
        &["--seconds", "0"],
        &["--seconds", "nan"],
        &["--port", "9999"],
        &["--exporter", "prometheus", "--events"],
        &["--agent", "a/b"],
        &["--events", "--quiet"],
    ] {
        let mut argv: Vec<&std::ffi::OsStr> = vec!["demo".as_ref(), "--dir".as_ref()];
        argv.push(dir.path().as_os_str());
        argv.extend(args.iter().map(std::ffi::OsStr::new));
        let (_, err) = run_with_status(&argv, 2);
        assert!(!err.is_empty(), "{args:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn demo_shows_the_prometheus_side() {
    nixl_telemetry_test_support::built_plugins(&["prometheus"]);
    let port = nixl_telemetry_test_support::free_port();
    let out = cmd()
        .args([
            "demo",
            "--exporter",
            "prometheus",
            "--seconds",
            "2.5",
            "--port",
        ])
        .arg(port.to_string())
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    assert!(text.contains(&format!("curl -s {url}")), "{text}");
    assert!(
        text.contains(&format!("nixl-telemetry top {url}")),
        "{text}"
    );
    // The live frame comes from scraping that endpoint.
    assert!(text.lines().any(|l| l.starts_with("demo-agent ")), "{text}");
    assert!(
        text.contains("accounting: every event accounted for"),
        "{text}"
    );
}

#[test]
fn nixl_log_level_sets_the_threshold_and_a_bad_value_warns_once() {
    let stderr_with = |level: &str| {
        let out = cmd()
            .env("NIXL_LOG_LEVEL", level)
            .args(["demo", "--seconds", "0.2", "--quiet"])
            .assert()
            .success()
            .get_output()
            .stderr
            .clone();
        String::from_utf8(out).unwrap()
    };
    let info = stderr_with("Info");
    assert!(
        info.contains("[INFO nixl_telemetry] Creating file-based shared memory"),
        "{info}"
    );
    let bogus = stderr_with("loud");
    assert_eq!(
        bogus
            .matches("NIXL_LOG_LEVEL=\"loud\" is not one of")
            .count(),
        1,
        "{bogus}"
    );
    assert!(!bogus.contains("[INFO"), "{bogus}");
    assert_eq!(stderr_with("ERROR"), "");
}
