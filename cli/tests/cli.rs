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
    let cases: [(PathBuf, &str); 5] = [
        (dir.path().join("missing"), "does not exist"),
        (small, "too small"),
        (wrong_version.clone(), "version mismatch: expected 4, got 3"),
        (text_file, "version mismatch"),
        (dir.path().to_owned(), "telemetry file"),
    ];
    for (path, needle) in cases {
        for sub in ["read", "stats"] {
            let out = cmd()
                .arg(sub)
                .arg(&path)
                .assert()
                .code(1)
                .get_output()
                .clone();
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{sub} {}: {err}", path.display());
            assert!(err.starts_with("nixl-telemetry: error: "), "{err}");
            assert!(err.contains(needle), "{sub} {}: {err}", path.display());
            assert!(!err.contains("panicked"));
        }
    }
    assert_eq!(std::fs::read(&wrong_version).unwrap(), v3, "left untouched");
}

#[test]
fn demo_runs_and_accounts_for_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let out = cmd()
        .args([
            "demo",
            "--seconds",
            "0.5",
            "--rate",
            "50",
            "--threads",
            "2",
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
    assert!(text.contains("=== Summary ==="));
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
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = std::sync::Arc::clone(&text);
    let thread = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut t = sink.lock().unwrap();
            t.push_str(&line);
            t.push('\n');
        }
    });
    (text, thread)
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
    use std::time::{Duration, Instant};

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

    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) takes two integers and touches no memory of this process. `pid` is our own
    // child and has not been reaped yet (`wait_for_lines` panics if `try_wait` ever saw it exit),
    // so the id cannot have been recycled for an unrelated process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("read --follow did not exit after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
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
        .map(|e| serde_json::json!({"event": e.name(), "type": e.event_type, "value": e.value}))
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

#[test]
fn read_follow_refuses_a_ring_truncated_under_it_with_exit_1() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "live", 64).unwrap();
    let burst = [Event::new(EventType::AgentTxBytes, 7)];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"))
        .args(["read", "--follow", "--format", "json"])
        .arg(ring.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (text, stdout_thread) = collect_stdout(&mut child);
    assert_eq!(ring.push_batch(&burst), 1);
    wait_for_lines(&mut child, &text, 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(ring.path())
        .unwrap()
        .set_len(0)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "read --follow did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    stdout_thread.join().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{status}; stderr: {stderr}");
    assert!(
        stderr.contains("was truncated while it was being read"),
        "{stderr}"
    );
}
