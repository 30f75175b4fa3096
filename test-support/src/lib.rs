//! Helpers shared by the workspace's integration tests: where cargo put the built libraries
//! and plug-ins, and a free loopback port. Deliberately free of dependencies (in particular not
//! on `nixl-telemetry`, whose statics must exist once in a test binary).

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

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

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("cannot bind a loopback port")
        .port()
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
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for v in vars {
        std::env::remove_var(v);
    }
    Serial {
        vars,
        _guard: guard,
    }
}
