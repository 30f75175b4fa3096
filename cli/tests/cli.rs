//! The `nixl-telemetry` command tested as a process, on good and bad ring files.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use nixl_telemetry::{Event, EventType, RingWriter};

fn cmd() -> Command {
    Command::cargo_bin("nixl-telemetry").unwrap()
}

fn fixture_copy(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    let dst = dir.join(name);
    std::fs::copy(src, &dst).unwrap();
    dst
}

/// Runs the command, checks its exit status, and returns its stdout and stderr.
fn run_with_status(args: &[&std::ffi::OsStr], code: i32) -> (String, String) {
    let out = cmd().args(args).assert().code(code).get_output().clone();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `stats --format json` of `paths`.
fn stats_json(paths: &[&Path]) -> serde_json::Value {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["stats".as_ref(), "--format".as_ref(), "json".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    serde_json::from_str(&stdout_of(&args)).unwrap()
}

fn stdout_of(args: &[&std::ffi::OsStr]) -> String {
    let out = cmd()
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn read_prints_the_nixl_reader_format() {
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "agent", 16).unwrap();
    ring.push_batch(&[
        Event::new(EventType::AgentTxBytes, 1048576),
        Event::new(EventType::AgentMemoryRegistered, 4096),
    ]);
    let path = dir.path().join("agent");
    let text = stdout_of(&["read".as_ref(), path.as_os_str()]);
    let expected = format!(
        "Telemetry path: {}\nOpening telemetry buffer: {}\nSuccessfully opened telemetry buffer (version: 4)\nBuffer capacity: 16 events\n\
         \n=== NIXL Telemetry Event ===\nEvent: agent_tx_bytes\nValue: 1048576\n===========================\n\
         \n=== NIXL Telemetry Event ===\nEvent: agent_memory_registered\nValue: 4096\n===========================\n\
         \nTotal events read: 2\nFinal buffer size: 0 events\n",
        path.display(),
        path.display()
    );
    assert_eq!(text, expected);
    // The events were consumed.
    let again = stdout_of(&["read".as_ref(), path.as_os_str()]);
    assert!(again.contains("Total events read: 0"));
}

#[test]
fn read_json_with_filters_on_a_nixl_written_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path(), "nixl-ring-v4-cap16-wrapped.bin");
    let text = stdout_of(&[
        "read".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--filter".as_ref(),
        "agent_err_not_*".as_ref(),
        "--filter".as_ref(),
        "agent_err_canceled".as_ref(),
        path.as_os_str(),
    ]);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines
        .iter()
        .all(|v| v["agent"] == "nixl-ring-v4-cap16-wrapped.bin"));
    let got: Vec<(String, u64, u64)> = lines
        .iter()
        .map(|v| {
            (
                v["event"].as_str().unwrap().to_owned(),
                v["type"].as_u64().unwrap(),
                v["value"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("agent_err_not_posted".into(), 8, 1008),
            ("agent_err_not_found".into(), 11, 1011),
            ("agent_err_not_allowed".into(), 13, 1013),
            ("agent_err_not_supported".into(), 16, 1016),
            ("agent_err_canceled".into(), 18, 1018),
        ]
    );
}

#[test]
fn stats_summarises_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "s", 64).unwrap();
    let mut events = Vec::new();
    for v in [10, 20, 35] {
        events.push(Event::new(EventType::AgentTxBytes, v));
    }
    for v in [5, 30, 200, 700] {
        events.push(Event::new(EventType::AgentXferTime, v));
    }
    ring.push_batch(&events);
    let path = dir.path().join("s");
    let text = stdout_of(&["stats".as_ref(), "--json".as_ref(), path.as_os_str()]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["total_events"], 7);
    assert_eq!(v["events"][0]["event"], "agent_tx_bytes");
    assert_eq!(
        (
            v["events"][0]["sum"].clone(),
            v["events"][0]["last"].clone()
        ),
        (65.into(), 35.into())
    );
    let d = &v["events"][1]["distribution"];
    assert_eq!((d["min"].as_u64(), d["max"].as_u64()), (Some(5), Some(700)));
    assert_eq!(d["mean"].as_f64(), Some(233.75));
}

#[test]
fn bad_files_give_one_clear_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::write(&small, [0u8; 12]).unwrap();
    let mut v3 = vec![0u8; 40 + 16 * 8];
    v3[16..20].copy_from_slice(&3i32.to_ne_bytes());
    v3[24..32].copy_from_slice(&8u64.to_ne_bytes());
    v3[32..40].copy_from_slice(&7u64.to_ne_bytes());
    let wrong_version = dir.path().join("v3");
    std::fs::write(&wrong_version, &v3).unwrap();
    let text_file = dir.path().join("notes.txt");
    std::fs::write(
        &text_file,
        "this is not a ring file at all, just some text\n",
    )
    .unwrap();
    let cases: [(PathBuf, &str); 4] = [
        (dir.path().join("missing"), "does not exist"),
        (small, "too small"),
        (wrong_version.clone(), "version mismatch: expected 4, got 3"),
        (text_file, "version mismatch"),
    ];
    for (path, needle) in cases {
        for sub in ["read", "stats"] {
            let (_, err) = run_with_status(&[sub.as_ref(), path.as_os_str()], 1);
            assert_eq!(err.lines().count(), 1, "{sub} {}: {err}", path.display());
            assert!(err.starts_with("nixl-telemetry: error: "), "{err}");
            assert!(err.contains(needle), "{sub} {}: {err}", path.display());
            assert!(!err.contains("panicked"));
        }
    }
    assert_eq!(std::fs::read(&wrong_version).unwrap(), v3, "left untouched");
    // A directory of files that are not rings: one note each, then the error.
    for sub in ["read", "stats"] {
        let (_, err) = run_with_status(&[sub.as_ref(), dir.path().as_os_str()], 1);
        assert_eq!(
            err.matches("skipping a file that is not a ring").count(),
            3,
            "{err}"
        );
        assert!(
            err.contains("error: no telemetry ring in directory"),
            "{err}"
        );
    }
}

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

/// Reads a child's stdout on a thread, so the test can watch it grow.
fn collect_stdout(
    child: &mut std::process::Child,
) -> (
    std::sync::Arc<std::sync::Mutex<String>>,
    std::thread::JoinHandle<()>,
) {
    collect(child.stdout.take().unwrap())
}

/// Reads a pipe's lines into a shared string on a thread.
fn collect(
    pipe: impl std::io::Read + Send + 'static,
) -> (
    std::sync::Arc<std::sync::Mutex<String>>,
    std::thread::JoinHandle<()>,
) {
    use std::io::BufRead;
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = std::sync::Arc::clone(&text);
    let thread = std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let mut t = sink.lock().unwrap();
            t.push_str(&line);
            t.push('\n');
        }
    });
    (text, thread)
}

/// Waits until `text` contains `needle` (panics after 60 s).
fn wait_for_text(text: &std::sync::Mutex<String>, needle: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !text.lock().unwrap().contains(needle) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {needle:?}; got:\n{}",
            text.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until `text` holds at least `n` lines (panics after 60 s, or if the child exits).
fn wait_for_lines(child: &mut std::process::Child, text: &std::sync::Mutex<String>, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = text.lock().unwrap().clone();
        if now.lines().count() >= n {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("read --follow exited early ({status}) after printing:\n{now}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {n} lines; got:\n{now}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn read_follow_prints_both_bursts_and_exits_0_on_ctrl_c() {
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "live", 64).unwrap();
    let first = [
        Event::new(EventType::AgentXferPostTime, 8),
        Event::new(EventType::AgentXferTime, 120),
        Event::new(EventType::AgentTxBytes, 1 << 20),
        Event::new(EventType::AgentTxRequestsNum, 1),
    ];
    let second = [
        Event::new(EventType::AgentErrBackend, 1),
        Event::new(EventType::AgentMemoryDeregistered, 4096),
        Event {
            event_type: 77,
            value: u64::MAX,
        },
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"))
        .args(["read", "--follow", "--format", "json"])
        .arg(ring.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (text, stdout_thread) = collect_stdout(&mut child);

    assert_eq!(ring.push_batch(&first), first.len());
    wait_for_lines(&mut child, &text, first.len());
    // The second burst arrives while the command polls the empty ring.
    assert_eq!(ring.push_batch(&second), second.len());
    wait_for_lines(&mut child, &text, first.len() + second.len());

    let (status, stderr) = interrupt(&mut child);
    assert_eq!(status.code(), Some(0), "{status}; stderr: {stderr}");
    assert_eq!(stderr, "");

    // Everything printed, up to EOF.
    stdout_thread.join().unwrap();
    let printed = text.lock().unwrap().clone();
    let got: Vec<serde_json::Value> = printed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let expected: Vec<serde_json::Value> = first
        .iter()
        .chain(&second)
        .map(|e| serde_json::json!({"agent": "live", "event": e.name(), "type": e.event_type, "value": e.value}))
        .collect();
    assert_eq!(got, expected);
    assert!(ring.is_empty(), "the events were consumed");
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

/// Sends SIGINT to `child` and returns its exit status and stderr.
fn interrupt(child: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    use std::time::{Duration, Instant};
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the child already exited"
    );
    // SAFETY: kill(2) takes two integers and touches no memory of this process. `pid` is our own
    // child, not reaped yet (checked just above), so the id cannot name another process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not exit after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
    }
    (status, stderr)
}

fn follow(args: &[&std::ffi::OsStr]) -> std::process::Child {
    use std::process::Stdio;
    std::process::Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"))
        .args(["read", "--follow", "--format", "json"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

type Collected = (
    std::sync::Arc<std::sync::Mutex<String>>,
    std::thread::JoinHandle<()>,
);

/// Ends a `read --follow` with Ctrl+C, checks that it exits 0, and returns its stderr.
fn stop_following(child: &mut std::process::Child, stdout: Collected, stderr: Collected) -> String {
    let (status, _) = interrupt(child);
    stdout.1.join().unwrap();
    stderr.1.join().unwrap();
    let text = stderr.0.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{status}; stderr: {text}");
    text
}

fn values(text: &std::sync::Mutex<String>) -> Vec<u64> {
    text.lock()
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn read_follow_reopens_a_ring_truncated_and_recreated_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "live", 64).unwrap();
    let path = ring.path().to_owned();
    let mut child = follow(&[path.as_os_str()]);
    let out = collect_stdout(&mut child);
    let err = collect(child.stderr.take().unwrap());
    let (text, errors) = (out.0.clone(), err.0.clone());
    assert_eq!(
        ring.push_batch(&[Event::new(EventType::AgentTxBytes, 7)]),
        1
    );
    wait_for_lines(&mut child, &text, 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    // The follower's next look at the ring finds it truncated; it waits for a ring again.
    wait_for_text(
        &errors,
        "is no longer the ring being read (it was truncated)",
    );
    // The writer recreates the ring (as the BUFFER exporter does).
    drop(ring);
    let ring = RingWriter::create(dir.path(), "live", 64).unwrap();
    assert_eq!(
        ring.push_batch(&[Event::new(EventType::AgentTxBytes, 8)]),
        1
    );
    wait_for_lines(&mut child, &text, 2);
    let stderr = stop_following(&mut child, out, err);
    assert_eq!(values(&text), [7, 8]);
    assert!(
        stderr.contains("reading the ring (capacity 64 events)"),
        "{stderr}"
    );
}

#[test]
fn read_follow_waits_for_a_missing_ring_and_follows_a_replaced_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("later");
    let mut child = follow(&[path.as_os_str()]);
    let out = collect_stdout(&mut child);
    let err = collect(child.stderr.take().unwrap());
    let (text, errors) = (out.0.clone(), err.0.clone());
    wait_for_text(&errors, &format!("waiting for {}", path.display()));
    let ring = RingWriter::create(dir.path(), "later", 16).unwrap();
    ring.push_batch(&[Event::new(EventType::AgentRxBytes, 1)]);
    wait_for_lines(&mut child, &text, 1);
    // The agent restarts with another buffer size: a new file replaces the ring.
    drop(ring);
    let ring = RingWriter::create(dir.path(), "later", 32).unwrap();
    ring.push_batch(&[Event::new(EventType::AgentRxBytes, 2)]);
    wait_for_lines(&mut child, &text, 2);
    let stderr = stop_following(&mut child, out, err);
    assert_eq!(values(&text), [1, 2]);
    assert!(stderr.contains("another file now has its name"), "{stderr}");
    assert!(
        stderr.contains("reading the ring (capacity 32 events)"),
        "{stderr}"
    );
}

#[test]
fn read_follow_peek_leaves_the_events() {
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "p", 64).unwrap();
    let path = ring.path().to_owned();
    let mut child = follow(&["--peek".as_ref(), path.as_os_str()]);
    let (text, stdout_thread) = collect_stdout(&mut child);
    ring.push_batch(&[Event::new(EventType::AgentTxBytes, 1)]);
    wait_for_lines(&mut child, &text, 1);
    ring.push_batch(&[Event::new(EventType::AgentTxBytes, 2)]);
    wait_for_lines(&mut child, &text, 2);
    let (status, _) = interrupt(&mut child);
    stdout_thread.join().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(values(&text), [1, 2], "each event once");
    assert_eq!(ring.len(), 2, "nothing consumed");
}

fn ring_with(dir: &Path, name: &str, events: &[Event]) -> RingWriter {
    let ring = RingWriter::create(dir, name, 64).unwrap();
    assert_eq!(ring.push_batch(events), events.len());
    ring
}

fn sample_events() -> Vec<Event> {
    vec![
        Event::new(EventType::AgentTxBytes, 100),
        Event::new(EventType::AgentXferTime, 40),
        Event::new(EventType::AgentErrBackend, 1),
    ]
}

#[test]
fn peek_and_stats_consume_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_with(dir.path(), "a", &sample_events());
    let path = ring.path().to_owned();
    for _ in 0..2 {
        let text = stdout_of(&["read".as_ref(), "--peek".as_ref(), path.as_os_str()]);
        assert!(text.contains("Total events read: 3"), "{text}");
        assert!(text.contains("Final buffer size: 3 events"), "{text}");
        assert!(text.contains("--peek: nothing was consumed"), "{text}");
    }
    let stats = stdout_of(&["stats".as_ref(), path.as_os_str()]);
    assert!(stats.contains("total events: 3"), "{stats}");
    assert_eq!(ring.len(), 3);
    // Then a consuming read gets them all.
    let text = stdout_of(&["read".as_ref(), path.as_os_str()]);
    assert!(text.contains("Total events read: 3"), "{text}");
    assert_eq!(ring.len(), 0);
}

#[test]
fn a_filter_that_matches_nothing_is_a_usage_error_and_consumes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_with(dir.path(), "a", &sample_events());
    for bad in ["agent_tx_byte", "[", "", "AGENT_ERR_*"] {
        for sub in ["read", "stats"] {
            let args = [
                sub.as_ref(),
                "--filter".as_ref(),
                bad.as_ref(),
                ring.path().as_os_str(),
            ];
            let (out, err) = run_with_status(&args, 2);
            assert!(err.contains(&format!("--filter '{bad}'")), "{err}");
            assert!(out.is_empty());
        }
    }
    assert_eq!(ring.len(), 3, "nothing consumed");
    let text = stdout_of(&[
        "stats".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--filter".as_ref(),
        "agent_err_*".as_ref(),
        ring.path().as_os_str(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["total_events"], 1);
    assert_eq!(v["events"][0]["event"], "agent_err_backend");
}

#[test]
fn many_rings_and_directories_give_a_section_per_agent_and_a_node_total() {
    let dir = tempfile::tempdir().unwrap();
    let a = ring_with(dir.path(), "rank-0", &sample_events());
    let b = ring_with(dir.path(), "rank-1", &sample_events()[..2]);
    std::fs::write(
        dir.path().join("notes.txt"),
        "not a ring, just some text here\n",
    )
    .unwrap();
    // A directory and a file, the file also in the directory: each ring once.
    let out = cmd()
        .args(["stats", "--format", "json"])
        .arg(dir.path())
        .arg(a.path())
        .assert()
        .success()
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("skipping a file that is not a ring"),
        "{stderr}"
    );
    assert!(stderr.contains("notes.txt"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total_events"], 5);
    let agents = v["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(
        (
            agents[0]["agent"].as_str(),
            agents[0]["total_events"].as_u64()
        ),
        (Some("rank-0"), Some(3))
    );
    assert_eq!(
        (
            agents[1]["agent"].as_str(),
            agents[1]["total_events"].as_u64()
        ),
        (Some("rank-1"), Some(2))
    );
    assert_eq!(v["events"][0]["sum"], 200, "node total of agent_tx_bytes");
    let table = stdout_of(&["stats".as_ref(), dir.path().as_os_str()]);
    assert!(table.contains("== rank-0 (ring "), "{table}");
    assert!(table.contains("== node total (2 agents) =="), "{table}");
    // read: every ring of the directory, consumed, with the node total.
    let text = stdout_of(&["read".as_ref(), dir.path().as_os_str()]);
    assert!(text.contains("Agent: rank-1"), "{text}");
    assert!(
        text.contains("Node total: 5 events read from 2 rings"),
        "{text}"
    );
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn read_without_follow_stops_while_a_writer_keeps_writing() {
    let dir = tempfile::tempdir().unwrap();
    let ring = std::sync::Arc::new(RingWriter::create(dir.path(), "busy", 1024).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (ring, stop) = (ring.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ring.push_batch(&[Event::new(EventType::AgentTxBytes, 1); 64]);
                std::thread::yield_now();
            }
        })
    };
    // It reads what is there when it starts (at most the ring's capacity) and exits.
    let text = stdout_of(&[
        "read".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        ring.path().as_os_str(),
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(text.lines().count() < 1024, "{}", text.lines().count());
}

#[test]
fn a_ring_larger_than_the_readers_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge");
    let capacity: u64 = nixl_telemetry::ring::MAX_READER_CAPACITY * 2;
    let mut h = vec![0u8; 40];
    h[16..20].copy_from_slice(&4i32.to_ne_bytes());
    h[20..24].copy_from_slice(&4i32.to_ne_bytes());
    h[24..32].copy_from_slice(&capacity.to_ne_bytes());
    h[32..40].copy_from_slice(&(capacity - 1).to_ne_bytes());
    std::fs::write(&path, &h).unwrap();
    // Sparse: as long as the header says, without the disk space.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(40 + 16 * capacity)
        .unwrap();
    for sub in ["read", "stats"] {
        let (_, err) = run_with_status(&[sub.as_ref(), path.as_os_str()], 1);
        assert!(err.contains("exceeds the readers' limit"), "{err}");
    }
}

#[test]
fn stats_reads_trace_exporter_segments_and_fpm_summary_points_to_it() {
    use nixl_telemetry::exporter::TraceExporterConfig;
    use nixl_telemetry::{Collector, Config, ExporterChoice, MetricMask};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("trace");
    let config = Config {
        buffer_size: 64,
        run_interval: std::time::Duration::from_millis(10),
        exporter: ExporterChoice::Trace(TraceExporterConfig {
            path: prefix.clone(),
            ..TraceExporterConfig::default()
        }),
        enabled_metrics: MetricMask::ALL,
    };
    let c = Collector::new("traced", config).unwrap();
    c.add_xfer_stats(120, true, 4096, 8);
    c.add_xfer_stats(80, false, 1024, 4);
    c.close();
    let agent_prefix = dir.path().join("trace.traced");
    let v = stats_json(&[&agent_prefix]);
    assert_eq!(v["total_events"], 8);
    assert_eq!(v["agents"][0]["agent"], "traced");
    assert!(v["agents"][0]["source"]
        .as_str()
        .unwrap()
        .starts_with("TRACE "));
    let (_, err) = run_with_status(
        &["fpm".as_ref(), "summary".as_ref(), agent_prefix.as_os_str()],
        1,
    );
    assert!(
        err.contains("TRACE exporter") && err.contains("nixl-telemetry stats"),
        "{err}"
    );
}
