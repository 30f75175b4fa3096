//! Whom NIXL's configuration file is trusted from, and what it may cost: each case runs in a
//! child process (the file is read once per process) under a deadline, so a read that hangs
//! fails the test instead of hanging it.
//!
//! - A FIFO without a writer, `/dev/zero`, and a valid file of 87 MB are refused at once with a
//!   message naming the file (they hung, grew to gigabytes, or took seconds and a gigabyte).
//! - A file owned by another user, or writable by others, is refused with the fix, and so is a
//!   token file it names (as root, playing `nobody`).
//! - A fork while another thread reads the file does not wait for that read, and the child does
//!   not wait forever on a read nobody in it will finish; threads asking for a setting during
//!   the read wait for it, and the file is read once.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nixl_telemetry_base::settings::{self, SETTINGS};
use nixl_telemetry_core::Collector;
use nixl_telemetry_test_support::child;
use nixl_telemetry_test_support::other_user::other_user;

const CASE: &str = "NIXL_TEST_TRUST_CASE";

/// Runs `case` in a child with `NIXL_CONFIG_FILE` = `file` (or none), no other NIXL setting
/// but `env`; fails if it has not ended within 30 s, and returns its stderr when it passed.
fn run_child(case: &str, file: Option<&Path>, env: &[(&str, &str)]) -> String {
    let mut cmd = child::test("child");
    cmd.env(CASE, case)
        .env_remove(settings::file::CONFIG_FILE_VAR)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for s in SETTINGS {
        cmd.env_remove(s.name);
    }
    if let Some(file) = file {
        cmd.env(settings::file::CONFIG_FILE_VAR, file);
    }
    let home = tempfile::tempdir().unwrap();
    cmd.env("HOME", home.path()).envs(env.iter().copied());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("case {case} did not end within 30 s: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "case {case} failed:\n{out}\n{err}");
    err
}

/// Creating a collector fails, and the message contains every one of `parts`.
fn creation_fails_with(parts: &[&str]) {
    let started = Instant::now();
    let e = Collector::from_env("agent", true)
        .err()
        .expect("creation must fail");
    for part in parts {
        assert!(e.message.contains(part), "{part:?} not in: {}", e.message);
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "refusing took {:?}",
        started.elapsed()
    );
}

/// The child's side of every case (does nothing in the parent).
#[test]
fn child() {
    let Some(case) = std::env::var_os(CASE) else {
        return;
    };
    let file = std::env::var(settings::file::CONFIG_FILE_VAR).unwrap_or_default();
    match case.to_str().unwrap() {
        "fifo" => creation_fails_with(&[&file, "is a FIFO, not a regular file"]),
        "device" => creation_fails_with(&["/dev/zero", "is a device, not a regular file"]),
        "huge" => creation_fails_with(&[&file, "is larger than 1048576 bytes"]),
        "foreign" => creation_fails_with(&[&file, "is owned by uid", "use a file of your own"]),
        "writable" => creation_fails_with(&[&file, "writable by group or others", "chmod go-w"]),
        "foreign_token" => {
            // The file itself is the user's; the token file it names is not.
            let e = Collector::from_env("agent", true)
                .err()
                .expect("creation must fail");
            assert!(
                e.message
                    .contains("NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE")
                    && e.message.contains("is owned by uid"),
                "{}",
                e.message
            );
        }
        "fork_during_read" => fork_during_read(),
        "concurrent_first_reads" => concurrent_first_reads(),
        "fork_during_the_first_log" => fork_during_the_first_log(),
        other => panic!("unknown case {other}"),
    }
}

#[test]
fn a_fifo_a_device_or_a_huge_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("nixl.cfg");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    run_child("fifo", Some(&fifo), &[]);
    run_child("device", Some(Path::new("/dev/zero")), &[]);
    // 87 MB of valid TOML (comment lines).
    let huge = dir.path().join("huge.cfg");
    let line = format!("# {}\n", "x".repeat(86));
    std::fs::write(&huge, line.repeat(87 * 1024 * 1024 / line.len())).unwrap();
    run_child("huge", Some(&huge), &[]);
}

#[test]
fn a_file_writable_by_others_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nixl.cfg");
    std::fs::write(&file, "NIXL_TELEMETRY_EXPORTER = \"NOP\"\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    run_child("writable", Some(&file), &[]);
}

/// As root: a world-writable `~/.nixl.cfg` of `nobody` chose `remote_write`, an attacker's URL
/// and root's token file, and root's token went to the attacker. Now the file is refused; and a
/// file of root's own naming a token file of `nobody`'s is refused too.
#[test]
fn files_of_another_user_are_refused() {
    let (uid, gid) = match other_user() {
        Ok(ids) => ids,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nixl.cfg");
    let token = dir.path().join("token");
    std::fs::write(&token, "root's token\n").unwrap();
    std::fs::write(
        &file,
        format!(
            "NIXL_TELEMETRY_EXPORTER = \"remote_write\"\n\
             NIXL_TELEMETRY_REMOTE_WRITE_URL = \"http://127.0.0.1:9/api/v1/write\"\n\
             NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE = \"{}\"\n",
            token.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&file, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    run_child("foreign", Some(&file), &[]);
    // Root's own file, naming a token file that is nobody's.
    std::os::unix::fs::chown(&file, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&token, Some(uid), Some(gid)).unwrap();
    let plugins = nixl_telemetry_test_support::built_plugins(&["remote_write"]);
    run_child(
        "foreign_token",
        Some(&file),
        &[("NIXL_PLUGIN_DIR", plugins.to_str().unwrap())],
    );
}

/// Polls `done` every 10 ms until it holds or 20 s have passed; returns whether it held.
fn within_20_s(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Another thread begins the configuration file's first read, through `first`, and is held
/// there (as a slow file system would hold it); the process forks meanwhile and the child runs
/// `in_child`, which must return true and not hang; then the read is let go and `first`'s
/// result returned. Fails when `fork()` returned only once the read was let go: it waited for
/// the read (it did: 6 s for a 3 s read).
fn fork_while_the_read_is_held<T: Send + 'static>(
    first: impl FnOnce() -> T + Send + 'static,
    in_child: impl FnOnce() -> bool,
) -> T {
    use nixl_telemetry_base::settings::file::test_hooks;
    test_hooks::hold_reads();
    let reader = std::thread::spawn(first);
    test_hooks::wait_for_a_held_read();
    // Should the fork wait for the read, only this lets it go (after 20 s), and the fork
    // returns after that: the order the assertion below checks.
    let watchdog = std::thread::spawn(|| {
        within_20_s(test_hooks::reads_released);
        test_hooks::release_reads();
    });
    // SAFETY: the child calls only what a forked child of this library may (`in_child` uses
    // the library as a new process would), and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = if in_child() { 0 } else { 1 };
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let read_released_before_the_fork_returned = test_hooks::reads_released();
    test_hooks::release_reads();
    watchdog.join().unwrap();
    let mut status = 0;
    let ended = within_20_s(|| {
        // SAFETY: polls the child forked above.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
    });
    if !ended {
        // SAFETY: the child forked above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the child forked during the read hangs");
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    assert!(
        !read_released_before_the_fork_returned,
        "fork() returned only once the configuration file's read was released: it waited for it"
    );
    reader.join().unwrap()
}

/// The read is a setting's lookup; the child creates a collector (it hung in `Once::call` when
/// the read-once cache was a `OnceLock`); the parent's read then completes.
fn fork_during_read() {
    let value = fork_while_the_read_is_held(
        || settings::process_settings("NIXL_TELEMETRY_BUFFER_SIZE"),
        || matches!(Collector::from_env("child", true), Ok(c) if c.stats().events_accepted == 0),
    );
    assert_eq!(
        value.unwrap().as_deref(),
        Some("64"),
        "the parent's read still completes"
    );
}

/// The read is the log threshold's, for the warning about an invalid FPM configuration: the
/// child logs and asks for the FPM policy (both hung on the parent's unfinished `OnceLock`s).
fn fork_during_the_first_log() {
    use nixl_telemetry_core::fpm::{FpmTrace, OpenErrorKind};
    let disabled = || {
        FpmTrace::open_from_env("ns", "backend", "1")
            .err()
            .map(|e| e.kind)
            == Some(OpenErrorKind::Disabled)
    };
    let parent = fork_while_the_read_is_held(disabled, || {
        log::warn!("the child logs");
        disabled()
    });
    assert!(parent);
}

/// Threads asking for a setting while another reads the file wait for that read: the file is
/// read once.
fn concurrent_first_reads() {
    use nixl_telemetry_base::settings::file::test_hooks;
    let read = || settings::process_settings("NIXL_TELEMETRY_BUFFER_SIZE");
    test_hooks::hold_reads();
    let first = std::thread::spawn(read);
    test_hooks::wait_for_a_held_read();
    let others: Vec<_> = (0..4).map(|_| std::thread::spawn(read)).collect();
    let all_waiting = within_20_s(|| test_hooks::waits_for_the_reader() >= 4);
    test_hooks::release_reads();
    assert!(all_waiting, "{} waits", test_hooks::waits_for_the_reader());
    for thread in std::iter::once(first).chain(others) {
        assert_eq!(thread.join().unwrap().unwrap().as_deref(), Some("64"));
    }
    assert_eq!(test_hooks::reads_held(), 1, "the file was read once");
}

#[test]
fn a_fork_during_the_read_waits_for_it_neither_in_the_parent_nor_in_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nixl.cfg");
    std::fs::write(
        &file,
        "NIXL_TELEMETRY_BUFFER_SIZE = 64\nNIXL_TELEMETRY_EXPORTER = \"NOP\"\n",
    )
    .unwrap();
    run_child("fork_during_read", Some(&file), &[]);
}

#[test]
fn a_fork_during_the_first_log_leaves_the_child_a_working_logger_and_fpm_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nixl.cfg");
    std::fs::write(&file, "NIXL_LOG_LEVEL = \"WARN\"\n").unwrap();
    run_child(
        "fork_during_the_first_log",
        Some(&file),
        &[("DYN_FPM_TRACE", "maybe")],
    );
}

#[test]
fn threads_asking_during_the_read_wait_for_it_and_the_file_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nixl.cfg");
    std::fs::write(&file, "NIXL_TELEMETRY_BUFFER_SIZE = 64\n").unwrap();
    run_child("concurrent_first_reads", Some(&file), &[]);
}
