//! Helpers shared by the workspace's integration tests: where cargo put the built libraries
//! and plug-ins, a free loopback port, polling until a condition holds ([`poll_for`]), the C
//! ABI's last-error message, certificates for https ([`certs`]), a test run again in a child
//! process ([`child`]), forked children ([`forked`]), a file system that fills up
//! ([`full_disk`]), a scrape with a chosen `Accept` header
//! ([`scrape`]), an idle-connection flood and the requests made beside it ([`flood`]) on raw
//! sockets ([`sockets`]), the Go-built receivers: Prometheus 3, the OpenTelemetry Collector and
//! VictoriaMetrics ([`receivers`]), OTLP requests as JSON ([`otlp_json`]), the dashboard's
//! and recording rules' queries ([`monitoring`]), and a thread's CPU time ([`thread_cpu`]). It depends on `nixl-telemetry` (with its
//! `test-util` hooks) as an ordinary library, so an integration test links one copy of it and
//! its statics exist once; the crate's own unit tests do not use it.

pub mod certs;
pub mod child;
pub mod flood;
pub mod forked;
pub mod full_disk;
pub mod fuzz;
pub mod monitoring;
pub mod other_user;
pub mod otlp_json;
pub mod ports;
pub mod prometheus;
pub mod promql;
pub mod receiver;
pub mod receivers;
pub mod scrape;
pub mod sockets;
pub mod transfers;

use nixl_telemetry_base::sync::LockUnpoisoned;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The workspace's root directory (the repository: `scripts/`, `c_tests/`, `include/`, ...).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support/ has a parent directory")
}

/// `target/<profile>`: an integration test runs as `target/<profile>/deps/<test>-<hash>`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("cannot locate the test executable");
    let dir = exe
        .parent()
        .expect("the test executable has no parent directory");
    let profile = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("deps/ has no parent directory")
    } else {
        dir
    };
    profile.to_path_buf()
}

/// The profile directory, after checking that the exporter plug-ins `names`
/// (`libtelemetry_exporter_<name>.so`) were built there: `cargo test` does not build cdylibs.
pub fn built_plugins(names: &[&str]) -> PathBuf {
    let dir = profile_dir();
    for name in names {
        let so = dir.join(format!("libtelemetry_exporter_{name}.so"));
        assert!(
            so.exists(),
            "{} is missing: run `cargo build --workspace --all-targets` before `cargo test`",
            so.display()
        );
    }
    dir
}

/// A collector configuration for exporter plug-in `name`: 64 events, an hour between flushes
/// (tests flush explicitly), every metric on.
pub fn plugin_config(name: &str) -> nixl_telemetry_core::Config {
    nixl_telemetry_core::Config {
        buffer_size: 64,
        run_interval: Duration::from_secs(3600),
        exporter: nixl_telemetry_core::ExporterChoice::Plugin(name.into()),
        enabled_metrics: nixl_telemetry_core::MetricMask::ALL,
    }
}

/// Runs `program` with `args` in `dir`: whether it succeeded, and everything it printed
/// (standard output, then standard error).
pub fn run_in(dir: &Path, program: &Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

/// Calls `f` every 200 ms until it gives a value (at most `limit`).
pub fn poll_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// [`poll_for`] for 60 s, panicking with `what` when nothing came.
pub fn poll<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_for(Duration::from_secs(60), f).unwrap_or_else(|| panic!("never: {what}"))
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): what the benches' measured
/// threads spend, kernel time included.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A port for a server that must be told its port before it binds: reserved for this test
/// process, below the kernel's ephemeral range ([`ports::reserve`]), so no other process is
/// given it meanwhile.
pub fn free_port() -> u16 {
    ports::reserve()
}

/// Tests of one binary share the process's environment (and a plug-in's per-process state):
/// this lock runs them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the test lock; clears its environment variables when the test ends.
pub struct Serial {
    vars: &'static [&'static str],
    _guard: MutexGuard<'static, ()>,
}

impl Drop for Serial {
    fn drop(&mut self) {
        for v in self.vars {
            std::env::remove_var(v);
        }
    }
}

/// Takes the test lock and clears `vars` (every variable the tests may set), now and again
/// when the returned guard is dropped.
pub fn serial(vars: &'static [&'static str]) -> Serial {
    let guard = SERIAL.lock_unpoisoned();
    for v in vars {
        std::env::remove_var(v);
    }
    Serial {
        vars,
        _guard: guard,
    }
}

/// [`serial`] for the tests of exporter plug-ins `plugins`: checks that they were built
/// ([`built_plugins`]) and makes their directory a plug-in directory (once per process).
pub fn plugin_serial(plugins: &[&str], vars: &'static [&'static str]) -> Serial {
    static ADDED: std::sync::Once = std::sync::Once::new();
    let dir = built_plugins(plugins);
    ADDED.call_once(|| nixl_telemetry_core::plugin::add_plugin_dir(&dir).unwrap());
    serial(vars)
}

/// An FPM trace of producer `producer_id` (namespace `default`, component `backend`) driven by
/// [`nixl_telemetry_core::fpm::FpmTrace::pump`] and a manual clock starting at `unix_ms`, so that
/// every timing decision is the test's; `queue_capacity` is normally 8192.
pub fn manual_fpm_trace(
    config: &nixl_telemetry_core::fpm::FpmConfig,
    producer_id: &str,
    unix_ms: u64,
    queue_capacity: usize,
) -> (
    std::sync::Arc<nixl_telemetry_core::segments::ManualClock>,
    nixl_telemetry_core::fpm::FpmTrace,
) {
    let clock = std::sync::Arc::new(nixl_telemetry_core::segments::ManualClock::new(unix_ms));
    let trace = nixl_telemetry_core::fpm::FpmTrace::open_manual(
        nixl_telemetry_core::fpm::Source::new("default", "backend", producer_id),
        config,
        clock.clone(),
        queue_capacity,
    )
    .expect("the FPM trace opens");
    (clock, trace)
}
