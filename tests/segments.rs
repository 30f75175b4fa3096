//! The segment store through the public API, across modules: the row envelope the FPM trace
//! writes, unwritable locations and prefixes locked by another process (FPM trace and `TRACE`
//! exporter), how our reader, Python's `gzip` and `gzip -cd` see a truncated final member; and
//! the hostile environment: files planted by other users (segments, lock files), write errors
//! and full disks (a file-size limit, in a child process), file modes under any umask.
//!
//! The writer's own tests (rolling, restart, retention, the periodic flush) are unit tests
//! beside it, in `src/segments/writer/tests.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use nixl_telemetry_core::fpm::OpenErrorKind;
use nixl_telemetry_core::fpm::{
    CaptureMode, FpmConfig, FpmPayload, FpmTrace, QueuedRequests, ScheduledRequests, Source,
};
use nixl_telemetry_core::segments::testing::{
    event_of_row_len, member_of, names, rows, segment, segment_sizes, writer,
};
use nixl_telemetry_core::segments::{ManualClock, SegmentReader, SegmentWriter};
use nixl_telemetry_test_support::child::in_child;
use nixl_telemetry_test_support::manual_fpm_trace;

#[test]
fn the_envelope_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let config = FpmConfig {
        output_path: dir.path().join("dynamo-fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let (clock, trace) = manual_fpm_trace(&config, "4192", 1_782_777_600_000, 8192);
    clock.advance_ms(1250);
    let payload = FpmPayload {
        version: 1,
        worker_id: "4192".into(),
        dp_rank: 0,
        counter_id: 42,
        wall_time: 0.025,
        scheduled_requests: ScheduledRequests {
            num_prefill_requests: 2,
            sum_prefill_tokens: 256,
            var_prefill_length: 12.5,
            sum_prefill_kv_tokens: 64,
            num_decode_requests: 3,
            sum_decode_kv_tokens: 1024,
            var_decode_kv_tokens: 0.0,
        },
        queued_requests: QueuedRequests {
            num_prefill_requests: 1,
            sum_prefill_tokens: 128,
            ..QueuedRequests::default()
        },
    };
    trace.record_msgpack(&payload.to_msgpack());
    trace.pump();
    let stats = trace.close();
    assert_eq!((stats.recorded, stats.written), (1, 1));
    let file = dir.path().join("dynamo-fpm.4192.000000.jsonl.gz");
    assert_eq!(
        rows(&file),
        [concat!(
            r#"{"timestamp":1250,"event":{"schema":"dynamo.fpm.trace.v1","#,
            r#""source":{"namespace":"default","component":"backend","producer_id":"4192"},"#,
            r#""capture_mode":"full","observed_at_unix_ms":1782777601250,"#,
            r#""fpm":{"version":1,"worker_id":"4192","dp_rank":0,"counter_id":42,"wall_time":0.025,"#,
            r#""scheduled_requests":{"num_prefill_requests":2,"sum_prefill_tokens":256,"#,
            r#""var_prefill_length":12.5,"sum_prefill_kv_tokens":64,"num_decode_requests":3,"#,
            r#""sum_decode_kv_tokens":1024,"var_decode_kv_tokens":0.0},"#,
            r#""queued_requests":{"num_prefill_requests":1,"sum_prefill_tokens":128,"#,
            r#""var_prefill_length":0.0,"num_decode_requests":0,"sum_decode_kv_tokens":0,"#,
            r#""var_decode_kv_tokens":0.0}}}}"#
        )]
    );
    // One gzip member with flate2's default header: MTIME 0, OS 255.
    let bytes = fs::read(&file).unwrap();
    assert_eq!(&bytes[..4], &[0x1f, 0x8b, 8, 0]);
    assert_eq!(&bytes[4..8], &[0, 0, 0, 0]);
    assert_eq!(bytes[9], 255);
}

#[test]
fn an_unwritable_location_disables_only_that_producer() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where a directory should be: unwritable even for root.
    fs::write(dir.path().join("blocker"), b"").unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let blocked = FpmConfig {
        output_path: dir.path().join("blocker/sub/fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let err = FpmTrace::open_manual(Source::new("n", "c", "1"), &blocked, clock.clone(), 16)
        .err()
        .unwrap();
    assert_eq!(err.kind, OpenErrorKind::Unwritable);
    assert!(err.message.contains("blocker"), "{}", err.message);

    let good = FpmConfig {
        output_path: dir.path().join("ok/fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let trace = FpmTrace::open_manual(Source::new("n", "c", "2"), &good, clock, 16).unwrap();
    trace.record(FpmPayload::heartbeat("2", 0, 1));
    assert_eq!(trace.close().written, 1);
    assert_eq!(
        names(&dir.path().join("ok")),
        ["fpm.2.000000.jsonl.gz", "fpm.2.lock"]
    );
}

/// Writes four members into one segment and cuts the file inside the last one. Returns the
/// file, the rows of the complete members and the offset where the last member starts.
fn truncated_segment(dir: &Path) -> (PathBuf, Vec<String>, u64) {
    let mut w = writer(&dir.join("fpm"), "p", 1 << 30, 10);
    let path = segment(dir, "p", 0);
    let mut expected = Vec::new();
    let mut last_start = 0;
    for member in 0..4 {
        last_start = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        for i in 0..50 {
            let event = format!("member {member} row {i} {}", "y".repeat(i * 7));
            if member < 3 {
                expected.push(format!(r#"{{"timestamp":0,"event":"{event}"}}"#));
            }
            w.push(&event);
        }
        w.flush();
    }
    w.close();
    let len = fs::metadata(&path).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(last_start + (len - last_start) / 2).unwrap();
    (path, expected, last_start)
}

#[test]
fn a_truncated_last_member_is_read_up_to_the_cut_by_our_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected, offset) = truncated_segment(dir.path());
    let (got, outcome) = SegmentReader::read_rows(&path).unwrap();
    let got: Vec<String> = got
        .into_iter()
        .map(|r| String::from_utf8(r).unwrap())
        .collect();
    // Every complete member's rows, then possibly some complete rows of the cut member.
    assert_eq!(&got[..expected.len()], &expected[..]);
    assert!(got[expected.len()..]
        .iter()
        .all(|r| r.starts_with(r#"{"timestamp":0,"event":"member 3 row "#) && r.ends_with("\"}")));
    assert_eq!(outcome.members, 3);
    let t = outcome.truncated.unwrap();
    assert_eq!((t.path, t.offset), (path, offset));
}

#[test]
fn a_truncated_last_member_is_read_up_to_the_cut_by_python_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected, _) = truncated_segment(dir.path());
    let script = r#"
import gzip, sys
n = 0
try:
    with gzip.open(sys.argv[1], "rt") as f:
        for line in f:
            if line.endswith("\n"):
                n += 1
                print(line, end="")
    print("NO ERROR", file=sys.stderr)
except EOFError as e:
    print("EOFError:", e, file=sys.stderr)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python3 is needed for this test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("EOFError"), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= expected.len());
    assert_eq!(&lines[..expected.len()], &expected[..]);
}

#[test]
fn a_truncated_last_member_is_read_up_to_the_cut_by_gzip_cd() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected, _) = truncated_segment(dir.path());
    let out = Command::new("gzip")
        .arg("-cd")
        .arg(&path)
        .output()
        .expect("gzip is needed for this test");
    assert_eq!(out.status.code(), Some(1), "gzip reports the truncation");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(&lines[..expected.len()], &expected[..]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected end of file"));
}

#[test]
fn a_prefix_locked_by_another_process_is_refused_to_fpm_and_trace_writers() {
    use nixl_telemetry_base::error::Status;
    use nixl_telemetry_core::exporter::{TraceExporter, TraceExporterConfig};
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("fpm.node_a.lock");
    // Another process holds the lock until its stdin closes.
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import fcntl,sys\nf=open(sys.argv[1],'a')\nfcntl.flock(f,fcntl.LOCK_EX)\n\
             print('locked',flush=True)\nsys.stdin.read()",
        ])
        .arg(&lock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");

    let clock = Arc::new(ManualClock::new(0));
    let config = FpmConfig {
        output_path: dir.path().join("fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let err = FpmTrace::open_manual(Source::new("n", "c", "node/a"), &config, clock.clone(), 16)
        .err()
        .unwrap();
    assert_eq!(err.kind, OpenErrorKind::AlreadyOpen);
    assert!(err.message.contains("fpm.node_a"), "{}", err.message);
    let exporter_config = TraceExporterConfig {
        path: dir.path().join("fpm"),
        ..TraceExporterConfig::default()
    };
    let err = TraceExporter::with_clock(&exporter_config, "node:a", clock.clone())
        .err()
        .unwrap();
    assert_eq!(err.status, Status::NotAllowed);
    assert!(err.message.contains("fpm.node_a"), "{}", err.message);

    holder.stdin.take().unwrap().write_all(b"").unwrap();
    assert!(holder.wait().unwrap().success());
    let trace =
        FpmTrace::open_manual(Source::new("n", "c", "node/a"), &config, clock.clone(), 16).unwrap();
    // While the FPM trace writes, the exporter of an agent of the same file name is refused.
    let err = TraceExporter::with_clock(&exporter_config, "node:a", clock)
        .err()
        .unwrap();
    assert_eq!(err.status, Status::NotAllowed);
    trace.record(FpmPayload::heartbeat("w", 0, 1));
    assert_eq!(trace.close().written, 1);
    assert_eq!(
        names(dir.path()),
        ["fpm.node_a.000000.jsonl.gz", "fpm.node_a.lock"]
    );
}

#[test]
fn a_write_error_during_a_roll_advances_the_index_once_and_counts_one_roll() {
    if !in_child("a_write_error_during_a_roll_advances_the_index_once_and_counts_one_roll") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut w = writer(&d.join("fpm"), "p", 150, 10);
    w.push(&event_of_row_len(60));
    w.flush();
    let first_len = fs::metadata(segment(d, "p", 0)).unwrap().len();
    w.push(&event_of_row_len(60));
    let old = set_file_size_limit(first_len + 4);
    // The next row rolls: the flush before the roll fails (segment 0 cannot grow).
    w.push(&event_of_row_len(60));
    set_file_size_limit(old);
    let stats = w.stats();
    assert_eq!((stats.write_errors, stats.rows_lost), (1, 1));
    assert_eq!(stats.segments_rolled, 1, "one failed roll counts once");
    assert_eq!(w.index(), 1, "one failed roll advances the index once");
    let stats = w.close();
    assert_eq!(stats.rows_written, 2);
    assert_eq!(
        rows(&segment(d, "p", 0)).len(),
        1,
        "the partial member was cut off"
    );
    assert_eq!(rows(&segment(d, "p", 1)).len(), 1);
    assert!(!segment(d, "p", 2).exists());
}

// ---- Hostile files, full disks, other users (issue 15) ----

/// The user owning the planted files of the hostile-file tests, and the user whose writer meets
/// them (numeric ids: no account is needed).
const ATTACKER: u32 = 65533;
const VICTIM: u32 = 65534;

/// A world-writable sticky directory, like `/tmp`, shared by a test (which creates it and
/// removes it, as root) and the child process that runs its body: files are planted there as
/// root and owned by [`ATTACKER`], then the child becomes [`VICTIM`].
struct Sticky {
    dir: PathBuf,
}

fn sticky_path(test: &str, parent_pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/nixl-hostile-{test}-{parent_pid}"))
}

/// Removes a directory tree when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// In the test process: runs `test` in a child process (see [`Sticky`]) and returns `None`; or
/// skips it with a message when this machine forbids it (creating files owned by another user
/// needs root). In the child: the directory, still as root.
fn in_sticky_dir_as_root_then_victim(test: &str) -> Option<Sticky> {
    use std::os::unix::fs::PermissionsExt;
    if std::env::var_os(nixl_telemetry_test_support::child::CHILD_VAR).is_some() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        return Some(Sticky {
            dir: sticky_path(test, parent),
        });
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped {test}: planting files owned by another user needs root");
        return None;
    }
    let dir = sticky_path(test, std::process::id());
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir(&dir).unwrap();
    let _cleanup = RemoveOnDrop(dir.clone());
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
    in_child(test);
    None
}

impl Sticky {
    /// Creates `name` with `bytes` and `mode`, owned by [`ATTACKER`].
    fn plant(&self, name: &str, mode: u32, bytes: &[u8]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.join(name);
        fs::write(&path, bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&path, Some(ATTACKER), Some(ATTACKER)).unwrap();
        path
    }

    /// Drops root for good: this process is [`VICTIM`] from now on.
    fn become_victim(&self) {
        // SAFETY: plain system calls on no memory of ours (setgroups with an empty list).
        unsafe {
            assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
            assert_eq!(libc::setgid(VICTIM), 0);
            assert_eq!(libc::setuid(VICTIM), 0);
        }
    }
}

fn owner_and_mode(path: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(path).unwrap();
    (m.uid(), m.mode() & 0o7777)
}

/// Sets the soft `RLIMIT_FSIZE` (and ignores SIGXFSZ, so that a write over the limit fails with
/// EFBIG, as one on a full disk fails with ENOSPC); returns the previous soft limit. Only for
/// child processes: the limit is process-wide.
fn set_file_size_limit(soft: libc::rlim_t) -> libc::rlim_t {
    // SAFETY: getrlimit/setrlimit on a zeroed, then filled, local struct; ignoring SIGXFSZ
    // installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        let old = lim.rlim_cur;
        lim.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
        old
    }
}

/// The regular files of `prefix`'s segments, by index, with their sizes.
/// `gzip -cd <prefix>.*.jsonl.gz` (the shell's glob, in its order): exit status and lines.
fn gzip_cd_all(dir: &Path, producer: &str) -> (Option<i32>, Vec<String>) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -cd fpm.{producer}.*.jsonl.gz"))
        .current_dir(dir)
        .output()
        .expect("sh and gzip are needed for this test");
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (out.status.code(), lines)
}

#[test]
fn files_of_another_user_are_neither_history_nor_deleted() {
    let Some(sticky) =
        in_sticky_dir_as_root_then_victim("files_of_another_user_are_neither_history_nor_deleted")
    else {
        return;
    };
    // Low indexes that retention would delete first, and the highest index there is.
    let planted: Vec<PathBuf> = [0, 1, 5, u64::MAX]
        .iter()
        .map(|&i| {
            let name = format!("fpm.p.{i:06}.jsonl.gz");
            sticky.plant(&name, 0o644, &member_of("planted"))
        })
        .collect();
    sticky.become_victim();
    let d = &sticky.dir;
    let mut w = writer(&d.join("fpm"), "p", 40, 2);
    assert_eq!(w.index(), 0, "foreign files do not move the restart index");
    for _ in 0..8 {
        w.push(&event_of_row_len(35));
        w.flush();
    }
    let stats = w.close();
    assert_eq!((stats.rows_written, stats.rows_lost), (8, 0), "{stats:?}");
    for p in &planted {
        assert_eq!(
            owner_and_mode(p).0,
            ATTACKER,
            "{} is untouched",
            p.display()
        );
    }
    // Ours: 2, 3, 4, 6, 7, 8, 9, 10 were written (0, 1 and 5 are taken); two are kept.
    let ours: Vec<u64> = segment_sizes(d, "p")
        .iter()
        .map(|s| s.0)
        .filter(|&i| owner_and_mode(&segment(d, "p", i)).0 == VICTIM)
        .collect();
    assert_eq!(ours, [9, 10], "{stats:?}");
}

#[test]
fn a_lock_file_planted_or_held_by_another_user_does_not_disable_the_producer() {
    use nixl_telemetry_base::logging;
    use nixl_telemetry_core::exporter::{TraceExporter, TraceExporterConfig};
    use std::os::fd::AsRawFd;
    let Some(sticky) = in_sticky_dir_as_root_then_victim(
        "a_lock_file_planted_or_held_by_another_user_does_not_disable_the_producer",
    ) else {
        return;
    };
    // Pre-created 0644: the victim cannot even open it for writing.
    sticky.plant("fpm.ro.lock", 0o644, b"");
    // Pre-created 0666 and held locked by another process (here: another open file).
    let held = sticky.plant("fpm.held.lock", 0o666, b"");
    let holder = fs::File::open(&held).unwrap();
    // SAFETY: flock on a descriptor `holder` keeps open.
    let locked = unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    sticky.become_victim();
    let d = &sticky.dir;
    let clock = Arc::new(ManualClock::new(0));
    let config = FpmConfig {
        output_path: d.join("fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    for producer in ["ro", "held"] {
        let (opened, logged) = logging::capture(|| {
            FpmTrace::open_manual(Source::new("n", "c", producer), &config, clock.clone(), 16)
        });
        let trace = opened.unwrap_or_else(|e| panic!("{producer}: {e}"));
        let warnings = logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!("fpm.{producer}.lock")),
            "{}",
            warnings[0]
        );
        trace.record(FpmPayload::heartbeat("w", 0, 1));
        assert_eq!(trace.close().written, 1, "{producer}");
        assert_eq!(
            owner_and_mode(&segment(d, producer, 0)),
            (VICTIM, 0o600),
            "{producer}"
        );
    }
    // The TRACE exporter goes through the same guard.
    let exporter = TraceExporter::with_clock(
        &TraceExporterConfig {
            path: d.join("fpm"),
            ..TraceExporterConfig::default()
        },
        "held",
        clock,
    );
    assert!(exporter.is_ok(), "{:?}", exporter.err());
    drop(holder);
}

#[test]
fn a_full_disk_neither_creates_segments_nor_deletes_history() {
    if !in_child("a_full_disk_neither_creates_segments_nor_deletes_history") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A 0-byte segment left by a crash (between creating a file and writing to it).
    fs::write(segment(d, "p", 0), b"").unwrap();
    // Three rows of 35 bytes per segment.
    let mut w = writer(&d.join("fpm"), "p", 120, 3);
    let mut written = Vec::new();
    let mut push = |w: &mut SegmentWriter, text: String, kept: bool| {
        let event = format!("{text}{}", "x".repeat(35 - 27 - text.len()));
        if kept {
            written.push(format!(r#"{{"timestamp":0,"event":"{event}"}}"#));
        }
        w.push(&event);
        w.flush();
    };
    for i in 0..6 {
        push(&mut w, format!("a{i}"), true);
    }
    assert_eq!(
        segment_sizes(d, "p").len(),
        2,
        "{:?}",
        segment_sizes(d, "p")
    );
    assert!(
        segment_sizes(d, "p").iter().all(|s| s.1 > 0),
        "the crash's empty segment is gone"
    );
    // The disk is full: nothing can grow (and the next row starts a new segment).
    let old = set_file_size_limit(0);
    for i in 0..40 {
        push(&mut w, format!("b{i}"), false);
    }
    let during = segment_sizes(d, "p");
    set_file_size_limit(old);
    assert!(
        during.len() <= 3,
        "no new segment per failed batch: {during:?}"
    );
    assert!(
        during.iter().filter(|s| s.1 == 0).count() <= 1,
        "at most the active segment is empty: {during:?}"
    );
    let stats = w.stats();
    assert_eq!((stats.write_errors, stats.rows_lost), (40, 40), "{stats:?}");
    // Writing works again.
    for i in 0..2 {
        push(&mut w, format!("c{i}"), true);
    }
    let stats = w.close();
    assert_eq!(stats.rows_written, 8, "{stats:?}");
    let after = segment_sizes(d, "p");
    assert!(after.iter().all(|s| s.1 > 0), "no empty segment: {after:?}");
    assert_eq!(after.len(), 3, "{after:?}");
    // The rows written before the outage are still there, and every segment reads.
    let (status, lines) = gzip_cd_all(d, "p");
    assert_eq!(status, Some(0), "{lines:?}");
    assert_eq!(lines, written);
}

#[test]
fn a_writer_whose_every_write_failed_leaves_no_empty_segment() {
    if !in_child("a_writer_whose_every_write_failed_leaves_no_empty_segment") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut w = writer(&d.join("fpm"), "p", 1 << 20, 3);
    let old = set_file_size_limit(0);
    for _ in 0..5 {
        w.push("lost");
        w.flush();
    }
    let stats = w.close();
    set_file_size_limit(old);
    assert_eq!((stats.write_errors, stats.rows_lost), (5, 5));
    assert_eq!(names(d), Vec::<String>::new());
}

#[test]
fn files_and_directories_are_private_whatever_the_umask() {
    use nixl_telemetry_core::exporter::{Exporter, TraceExporter, TraceExporterConfig};
    use nixl_telemetry_core::{Event, EventType};
    if !in_child("files_and_directories_are_private_whatever_the_umask") {
        return;
    }
    // SAFETY: umask has no preconditions (process-wide: this is a child process).
    unsafe { libc::umask(0) };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let clock = Arc::new(ManualClock::new(0));
    let config = FpmConfig {
        output_path: d.join("fpm-a/deeper/fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let trace =
        FpmTrace::open_manual(Source::new("n", "c", "p"), &config, clock.clone(), 16).unwrap();
    trace.record(FpmPayload::heartbeat("w", 0, 1));
    trace.close();
    let mut exporter = TraceExporter::with_clock(
        &TraceExporterConfig {
            path: d.join("trace-a/deeper/nixl"),
            ..TraceExporterConfig::default()
        },
        "agent",
        clock,
    )
    .unwrap();
    exporter.export_batch(&[Event::new(EventType::AgentTxBytes, 1)]);
    drop(exporter);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for (path, mode) in [
        ("fpm-a", 0o700),
        ("fpm-a/deeper", 0o700),
        ("fpm-a/deeper/fpm.p.000000.jsonl.gz", 0o600),
        ("fpm-a/deeper/fpm.p.lock", 0o600),
        ("trace-a", 0o700),
        ("trace-a/deeper", 0o700),
        ("trace-a/deeper/nixl.agent.000000.jsonl.gz", 0o600),
        ("trace-a/deeper/nixl.agent.lock", 0o600),
    ] {
        assert_eq!(owner_and_mode(&d.join(path)), (me, mode), "{path}");
    }
}
