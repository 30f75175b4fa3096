//! `nixl-telemetry read`: the NIXL reader's format and JSON with filters, stopping while a
//! writer keeps writing, and `--follow` (bursts, Ctrl+C, truncated, missing and replaced rings,
//! `--peek`).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use nixl_telemetry_core::{Event, EventType, RingWriter};

fn fixture_copy(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    let dst = dir.join(name);
    std::fs::copy(src, &dst).unwrap();
    dst
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
fn read_reports_what_the_ring_lost_and_skips_its_loss_file_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let c = nixl_telemetry_core::Collector::new(
        "lossy",
        nixl_telemetry_core::Config {
            buffer_size: 8,
            run_interval: std::time::Duration::from_secs(3600),
            exporter: nixl_telemetry_core::ExporterChoice::Buffer(
                dir.path().to_owned(),
                nixl_telemetry_core::ring::layout::V4,
            ),
            enabled_metrics: nixl_telemetry_core::MetricMask::ALL,
        },
    )
    .unwrap();
    // 8 slots, 7 usable: one whole transfer fits, the second is lost whole.
    c.add_xfer_stats(10, true, 1, 2);
    c.add_xfer_stats(20, true, 1, 2);
    c.flush();
    assert!(dir.path().join(".lossy.lost").exists());
    let (text, err) = run_with_status(&["read".as_ref(), dir.path().as_os_str()], 0);
    assert!(
        text.contains("Events the writer could not put into this ring: 4"),
        "{text}"
    );
    assert!(text.contains("Total events read: 4"), "{text}");
    assert!(
        !err.contains("not a ring"),
        "the loss file is not a ring: {err}"
    );
    drop(c);
    // The count outlives the agent, as its ring does: a look after the job still sees it, and
    // `stats` reports it too (text and JSON).
    let (text, _) = run_with_status(
        &["read".as_ref(), "--peek".as_ref(), dir.path().as_os_str()],
        0,
    );
    assert!(
        text.contains("Events the writer could not put into this ring: 4"),
        "{text}"
    );
    let text = stdout_of(&["stats".as_ref(), dir.path().as_os_str()]);
    assert!(
        text.contains("Events the writer could not put into this ring: 4"),
        "{text}"
    );
    let json = stdout_of(&["stats".as_ref(), "--json".as_ref(), dir.path().as_os_str()]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["agents"][0]["ring_lost"], 4, "{json}");
}

/// In a ring directory other users can write, `nobody` replaces the ring's loss file with a link
/// to a count of its own, then with a file of its own: readers believe neither, and say so
/// (`read`, `stats` in text and JSON, `top`) rather than show a number or nothing. Needs root,
/// to act as `nobody`; otherwise it says why and passes.
#[test]
fn a_loss_count_planted_by_another_user_is_not_reported() {
    use nixl_telemetry_test_support::other_user::{other_user_or_skip, run_as_other_user};
    use std::os::unix::fs::PermissionsExt;
    let Some((uid, gid)) = other_user_or_skip() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = scratch.path().join("rings");
    std::fs::create_dir(&dir).unwrap();
    let c = nixl_telemetry_core::Collector::new(
        "shared",
        nixl_telemetry_core::Config {
            buffer_size: 8,
            run_interval: std::time::Duration::from_secs(3600),
            exporter: nixl_telemetry_core::ExporterChoice::Buffer(
                dir.clone(),
                nixl_telemetry_core::ring::layout::V4,
            ),
            enabled_metrics: nixl_telemetry_core::MetricMask::ALL,
        },
    )
    .unwrap();
    c.add_xfer_stats(10, true, 1, 2);
    c.flush();
    drop(c);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lost = dir.join(".shared.lost");
    let mut forged = std::fs::read(&lost).unwrap();
    forged[16..24].copy_from_slice(&123_456_789u64.to_ne_bytes());
    let theirs = scratch.path().join("theirs");
    std::fs::write(&theirs, &forged).unwrap();
    std::os::unix::fs::chown(&theirs, Some(uid), Some(gid)).unwrap();
    std::fs::remove_file(&lost).unwrap();
    run_as_other_user("ln", &["-s".as_ref(), theirs.as_os_str(), lost.as_os_str()]);
    let (text, _) = run_with_status(&["read".as_ref(), "--peek".as_ref(), dir.as_os_str()], 0);
    assert!(!text.contains("123456789"), "a link was believed: {text}");
    let untrusted = format!(
        "Events the writer could not put into this ring: untrusted ({} is a symbolic link: not \
         believed)",
        lost.display()
    );
    assert!(text.contains(&untrusted), "{text}");
    std::fs::remove_file(&lost).unwrap();
    run_as_other_user("cp", &[theirs.as_os_str(), lost.as_os_str()]);
    let (text, _) = run_with_status(&["read".as_ref(), "--peek".as_ref(), dir.as_os_str()], 0);
    assert!(
        !text.contains("123456789"),
        "another user's file was believed: {text}"
    );
    let why = format!("{} is owned by uid {uid}, not uid 0", lost.display());
    assert!(
        text.contains(&format!("untrusted ({why}: not believed)")),
        "{text}"
    );
    let text = stdout_of(&["stats".as_ref(), dir.as_os_str()]);
    assert!(
        text.contains(&format!("untrusted ({why}: not believed)")),
        "{text}"
    );
    let json = stdout_of(&["stats".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let agent = &doc["agents"][0];
    assert_eq!(agent["ring_lost"], "untrusted", "{json}");
    assert_eq!(agent["ring_lost_untrusted"], why.as_str(), "{json}");
    let top = ["top", "--once", "--interval", "0.5"].map(std::ffi::OsStr::new);
    let frame = stdout_of(&[&top[..], &[dir.as_os_str()]].concat());
    assert!(frame.contains("loss count untrusted"), "{frame}");
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

/// `read ring | head -5` consumed every event of the ring and said nothing, even when all of
/// its output fit in the pipe (404 events): now, from a real `head -5`, what was consumed is
/// what `head` read (one block: 8 KiB for GNU head, well under half the output), said on
/// stderr, and the rest, the ring's last events, are left. Exactly what is consumed is
/// `a_pipe_closed_early_leaves_exactly_the_events_its_reader_did_not_take`'s part.
#[test]
fn a_destructive_read_into_head_leaves_what_head_did_not_read() {
    for events in [404u64, 12_000] {
        let dir = tempfile::tempdir().unwrap();
        let ring = RingWriter::create(dir.path(), "big", 16384).unwrap();
        let all: Vec<Event> = (0..events)
            .map(|i| Event::new(EventType::AgentTxBytes, i))
            .collect();
        assert_eq!(ring.push_batch(&all), all.len());
        let bin = assert_cmd::cargo::cargo_bin("nixl-telemetry");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "'{}' read '{}' | head -5",
                bin.display(),
                ring.path().display()
            ))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("the events not printed are left in the ring"),
            "{err}"
        );
        let consumed = printed_before_close(&err);
        let left = values_left(ring.path());
        assert_eq!(left, (consumed..events).collect::<Vec<_>>(), "{err}");
        assert!(consumed < 404 / 2, "{events} events: {consumed} consumed");
    }
}

/// The count of events `read` says were printed before its output was closed.
fn printed_before_close(stderr: &str) -> u64 {
    let after = stderr
        .split("the output was closed after ")
        .nth(1)
        .unwrap_or_else(|| panic!("no closed output reported: {stderr}"));
    after.split(' ').next().unwrap().parse().unwrap()
}

/// The values of the events whose output is complete in `bytes` (`read`'s text or JSON lines):
/// an event block or a JSON line cut short by the closed pipe is not one of them.
fn values_written(bytes: &[u8], json: bool) -> Vec<u64> {
    let text = String::from_utf8_lossy(bytes);
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    if json {
        return complete
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["value"].as_u64())
            .map(Option::unwrap)
            .collect();
    }
    let mut values = Vec::new();
    let mut value: Option<u64> = None;
    for line in complete.lines() {
        if let Some(v) = line.strip_prefix("Value: ") {
            value = Some(v.parse().unwrap());
        } else if line == "=".repeat(27) {
            values.extend(value.take());
        }
    }
    values
}

/// The values of the events left in the ring at `path`, oldest first.
fn values_left(path: &Path) -> Vec<u64> {
    let ring = nixl_telemetry_core::RingReader::open(path).unwrap();
    let left = ring.peek(None, usize::MAX).unwrap().events;
    left.iter().map(|e| e.value).collect()
}

/// A ring of `events` events, valued 0, 1, ...
fn counted_ring(dir: &Path, events: usize) -> RingWriter {
    let ring = RingWriter::create(dir, "r", (events + 1).next_power_of_two()).unwrap();
    let batch: Vec<Event> = (0..events as u64)
        .map(|v| Event::new(EventType::AgentTxBytes, v))
        .collect();
    assert_eq!(ring.push_batch(&batch), events);
    ring
}

/// Where each event's output ends in `read`'s output `bytes` (text or JSON lines), in order.
fn event_ends(bytes: &[u8], json: bool) -> Vec<usize> {
    let last_line = if json {
        "}\n".to_owned()
    } else {
        "=".repeat(27) + "\n"
    };
    let mut at = 0;
    let mut ends = Vec::new();
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        at += line.len();
        if line.ends_with(last_line.as_bytes()) {
            ends.push(at);
        }
    }
    ends
}

/// `read ring | head -5` consumed what the pipe accepted and nobody read, all of a 404-event
/// ring: now, for rings smaller and larger than the pipe and than `read`'s chunks (4,096
/// events), in each format, following or not, the pipe is closed once `read` has written the
/// output of the first `through` events into it, and its reader took all of that but the last
/// `short` bytes: with `read` done writing, or blocked in a write, or with the end of a chunk
/// unread. The events consumed are exactly those whose whole line the reader took, as `read`
/// says on stderr; the others, those left in the pipe included, are left in the ring.
#[test]
fn a_pipe_closed_early_leaves_exactly_the_events_its_reader_did_not_take() {
    use pipe::{DEFAULT_SIZE, ONE_PAGE};
    for (events, pipe_size, follow, through, short) in [
        // All written into the pipe; the reader took a few lines, one block of `head`, all but
        // the last event's last byte.
        (404usize, DEFAULT_SIZE, false, 404, 20_000),
        (404, DEFAULT_SIZE, false, 404, 16_000),
        (404, DEFAULT_SIZE, false, 404, 1),
        (404, DEFAULT_SIZE, true, 404, 20_000),
        // `read` blocked in a write into a full pipe (of one page).
        (404, ONE_PAGE, false, 200, 4_000),
        (20_000, ONE_PAGE, false, 5, 100),
        // The end of a chunk in the pipe, `read` done writing that chunk.
        (20_000, DEFAULT_SIZE, false, 8192, 1_000),
        (20_000, DEFAULT_SIZE, true, 8192, 1_000),
        (300_000, DEFAULT_SIZE, false, 81_920, 1_000),
    ] {
        for format in ["json", "text"] {
            let dir = tempfile::tempdir().unwrap();
            let ring = counted_ring(dir.path(), events);
            let json = format == "json";
            let mut args: Vec<&std::ffi::OsStr> = vec!["read".as_ref(), "--format".as_ref()];
            args.extend([format.as_ref(), ring.path().as_os_str()]);
            // Where each event's output ends: as in the output of a look (following, the text
            // has one more line before the events).
            let look = stdout_of(&[&args[..], &["--peek".as_ref()]].concat());
            let extra = if follow && !json {
                "Press Ctrl+C to stop reading telemetry...\n".len()
            } else {
                0
            };
            let end = event_ends(look.as_bytes(), json)[through - 1] + extra;
            if follow {
                args.push("--follow".as_ref());
            }
            let case = format!(
                "{events} events, {format}, follow {follow}, {pipe_size}-byte pipe closed with \
                 the output of {through} events in it, {short} bytes of it unread"
            );
            // A one-page pipe takes more only once emptied: closed at once, with `read` blocked
            // in a write.
            let held = if pipe_size == ONE_PAGE { 0 } else { short };
            let got = pipe::read_then_close(end - short, held, pipe_size, &args);
            assert_eq!(got.read.len(), end - short, "{case}");
            let taken = values_written(&got.read, json);
            assert_eq!(taken, (0..taken.len() as u64).collect::<Vec<_>>(), "{case}");
            let (taken, left) = (taken.len(), values_left(ring.path()));
            assert_eq!(printed_before_close(&got.stderr), taken as u64, "{case}");
            assert_eq!(
                left,
                (taken as u64..events as u64).collect::<Vec<_>>(),
                "{case}"
            );
        }
    }
}

/// A reader that takes everything `read` writes into the pipe: every event is consumed once.
#[test]
fn a_pipe_read_to_its_end_consumes_every_event() {
    for (events, pipe_size) in [(404, pipe::DEFAULT_SIZE), (20_000, pipe::ONE_PAGE)] {
        for format in ["json", "text"] {
            let dir = tempfile::tempdir().unwrap();
            let ring = counted_ring(dir.path(), events);
            let args = ["read".as_ref(), "--format".as_ref(), format.as_ref()];
            let got = pipe::read_then_close(
                usize::MAX,
                0,
                pipe_size,
                &[&args[..], &[ring.path().as_os_str()]].concat(),
            );
            let taken = values_written(&got.read, format == "json");
            assert_eq!(taken, (0..events as u64).collect::<Vec<_>>(), "{format}");
            assert!(ring.is_empty(), "{format}: {} left", ring.len());
            assert_eq!(got.stderr, "", "{format}");
        }
    }
}

/// `--count N` prints the N oldest events of each ring and consumes exactly those (with
/// `--filter`, N printed and the skipped ones before the last of them); with `--peek`, none.
#[test]
fn read_count_consumes_exactly_the_events_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = (0..20)
        .map(|i| {
            let kind = if i % 2 == 0 {
                EventType::AgentTxBytes
            } else {
                EventType::AgentRxBytes
            };
            Event::new(kind, i)
        })
        .collect();
    let a = ring_with(dir.path(), "a", &events);
    let b = ring_with(dir.path(), "b", &events);
    let json = |args: &[&str], path: &Path| {
        let mut all: Vec<&std::ffi::OsStr> = vec!["read".as_ref(), "--format".as_ref()];
        all.push("json".as_ref());
        all.extend(args.iter().map(std::ffi::OsStr::new));
        all.push(path.as_os_str());
        values_written(stdout_of(&all).as_bytes(), true)
    };
    assert_eq!(json(&["--peek", "--count", "3"], a.path()), [0, 1, 2]);
    assert_eq!(values_left(a.path()), (0..20).collect::<Vec<_>>());
    assert_eq!(json(&["--count", "3"], a.path()), [0, 1, 2]);
    assert_eq!(values_left(a.path()), (3..20).collect::<Vec<_>>());
    // Three received-bytes events: 3, 5 and 7; the 4 and 6 skipped between them are consumed,
    // the 8 after the last one is not.
    let rx = ["--count", "3", "--filter", "agent_rx_bytes"];
    assert_eq!(json(&rx, a.path()), [3, 5, 7]);
    assert_eq!(values_left(a.path()), (8..20).collect::<Vec<_>>());
    // Of each ring, in text; more than a ring holds takes all of it.
    let text = stdout_of(&[
        "read".as_ref(),
        "--count".as_ref(),
        "2".as_ref(),
        dir.path().as_os_str(),
    ]);
    assert_eq!(values_written(text.as_bytes(), false), [8, 9, 0, 1]);
    assert!(text.contains("Total events read: 2\nFinal buffer size: 10 events"));
    assert!(text.contains("Total events read: 2\nFinal buffer size: 18 events"));
    assert_eq!(
        json(&["--count", "100"], b.path()),
        (2..20).collect::<Vec<_>>()
    );
    assert!(b.is_empty());
    // Not with --follow, nor 0: usage errors.
    for bad in [&["--follow", "--count", "1"][..], &["--count", "0"]] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["read".as_ref()];
        args.extend(bad.iter().map(std::ffi::OsStr::new));
        args.push(a.path().as_os_str());
        run_with_status(&args, 2);
    }
    assert_eq!(values_left(a.path()), (10..20).collect::<Vec<_>>());
}

/// An output that fails otherwise than by being closed (a full disk: `/dev/full`) consumes
/// nothing that was not written, and exits 1 naming the failure.
#[test]
fn a_failing_output_consumes_nothing_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_with(dir.path(), "r", &sample_events());
    for format in ["text", "json"] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"))
            .args(["read", "--format", format])
            .arg(ring.path())
            .stdout(full)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("cannot write output"), "{stderr}");
        assert_eq!(ring.len(), 3, "{format}: nothing consumed");
    }
}
