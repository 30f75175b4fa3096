//! Helpers shared by the `nixl-telemetry` command's tests (one test file per subcommand): running
//! the command and reading its output, and rings holding known events.
#![allow(dead_code)]

pub mod pipe;
pub mod sidecar;

use std::path::Path;

use assert_cmd::Command;
use nixl_telemetry_core::{Event, EventType, RingWriter};

pub fn cmd() -> Command {
    Command::cargo_bin("nixl-telemetry").unwrap()
}

/// Runs the command, checks its exit status, and returns its stdout and stderr.
pub fn run_with_status(args: &[&std::ffi::OsStr], code: i32) -> (String, String) {
    let out = cmd().args(args).assert().code(code).get_output().clone();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `stats --format json` of `paths`.
pub fn stats_json(paths: &[&Path]) -> serde_json::Value {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["stats".as_ref(), "--format".as_ref(), "json".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    serde_json::from_str(&stdout_of(&args)).unwrap()
}

pub fn stdout_of(args: &[&std::ffi::OsStr]) -> String {
    let out = cmd()
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

pub fn ring_with(dir: &Path, name: &str, events: &[Event]) -> RingWriter {
    let ring = RingWriter::create(dir, name, 64).unwrap();
    assert_eq!(ring.push_batch(events), events.len());
    ring
}

pub fn sample_events() -> Vec<Event> {
    vec![
        Event::new(EventType::AgentTxBytes, 100),
        Event::new(EventType::AgentXferTime, 40),
        Event::new(EventType::AgentErrBackend, 1),
    ]
}
