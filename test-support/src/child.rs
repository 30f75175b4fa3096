//! A test run again in a child process: the test binary itself (`current_exe`) started with
//! `--exact <test> --nocapture --test-threads=1`, so that one test body runs alone in a fresh
//! process (process-wide settings, signals, a file read once per process, several "ranks" of
//! one node). The test tells its two roles apart by a variable of the environment that the
//! parent sets for the child (a marker such as `NIXL_TEST_CHILD`).
//!
//! With `--nocapture`, libtest prints `test <name> ... ` before the child's own output, on the
//! same line: [`read_marked`] finds a line the child printed wherever it starts.
//!
//! For a child that must share the parent's memory at the moment it starts (a fork test), see
//! [`crate::forked`].

use std::io::BufRead;
use std::process::{Command, Output};

/// The environment variable [`in_child`] sets in the child.
pub const CHILD_VAR: &str = "NIXL_TEST_CHILD";

/// A command running this executable again, with no argument (a bench's own `main`, which
/// tells its roles apart by its environment); [`test()`] for a test of a libtest binary.
pub fn this_binary() -> Command {
    Command::new(std::env::current_exe().expect("cannot locate the test executable"))
}

/// A command running the test `name` of this test binary, alone, in a child process. The
/// caller adds the child's marker (and the rest of its environment) and runs it
/// ([`output_ok`], `output`, `spawn`).
pub fn test(name: &str) -> Command {
    let mut cmd = this_binary();
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    cmd
}

/// Runs `cmd` to its end and returns its output, after asserting that it exited successfully
/// (the failure message names `what` and shows the child's status, stdout and stderr).
pub fn output_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run the child: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Reads `out` (a child's stdout) line by line until a line contains `marker`, and returns
/// what follows the marker on that line, trimmed; `None` when the output ends first.
pub fn read_marked(out: &mut impl BufRead, marker: &str) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out
            .read_line(&mut line)
            .expect("cannot read the child's output")
            == 0
        {
            return None;
        }
        if let Some(at) = line.find(marker) {
            return Some(line[at + marker.len()..].trim().to_owned());
        }
    }
}

/// Runs the test `name` of this binary again in a child process with [`CHILD_VAR`]` = 1` (for
/// process-wide settings such as a file-size limit) and asserts that it passed; true in the
/// child, which then runs the test's body.
pub fn in_child(name: &str) -> bool {
    if std::env::var_os(CHILD_VAR).is_some() {
        return true;
    }
    output_ok(test(name).env(CHILD_VAR, "1"), &format!("child {name}"));
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_marked_skips_to_the_marked_line_and_returns_its_rest() {
        let mut out = "noise\ntest child ... READY 42 \nREADY 7\n".as_bytes();
        assert_eq!(read_marked(&mut out, "READY ").as_deref(), Some("42"));
        assert_eq!(read_marked(&mut out, "READY ").as_deref(), Some("7"));
        assert_eq!(read_marked(&mut out, "READY "), None);
    }

    #[test]
    fn the_child_runs_the_named_test_alone_with_the_marker() {
        if std::env::var_os("TEST_SUPPORT_CHILD_PROBE").is_some() {
            println!("PROBE {}", std::process::id());
            return;
        }
        let out = output_ok(
            test("child::tests::the_child_runs_the_named_test_alone_with_the_marker")
                .env("TEST_SUPPORT_CHILD_PROBE", "1"),
            "probe",
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let pid = read_marked(&mut stdout.as_bytes(), "PROBE ").expect("the child printed");
        assert_ne!(pid, std::process::id().to_string(), "a process of its own");
        assert!(stdout.contains("1 passed"), "one test ran: {stdout}");
    }

    #[test]
    fn a_failing_child_fails_the_parent() {
        if std::env::var_os("TEST_SUPPORT_CHILD_FAIL").is_some() {
            panic!("the child fails");
        }
        let run = std::panic::catch_unwind(|| {
            output_ok(
                test("child::tests::a_failing_child_fails_the_parent")
                    .env("TEST_SUPPORT_CHILD_FAIL", "1"),
                "failing child",
            )
        });
        let message = run.expect_err("the parent must fail");
        let text = message.downcast_ref::<String>().unwrap();
        assert!(text.contains("the child fails"), "{text}");
    }
}
