//! `nixl-telemetry serve` as a child process of a test ([`Sidecar`]), the ranks' stores it
//! reads ([`rank_store`]), and what the tests read of it: its endpoints ([`probe`]) and its
//! listening sockets ([`listening_sockets`]).

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Duration;

use assert_cmd::cargo::CommandCargoExt;
use nixl_telemetry_core::Event;
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_series::{hostname, Buckets, WorkloadLabels};
use nixl_telemetry_test_support::flood::request_from;

/// A rank's store in `dir` (agent `agent`, local rank `rank`, this process's pid, native
/// histograms kept when `native`) with `events` applied: its writer, alive while kept.
pub fn rank_store(
    dir: &std::path::Path,
    agent: &str,
    rank: u64,
    labels: WorkloadLabels,
    native: bool,
    events: &[Event],
) -> StoreWriter {
    let id = Identity::for_this_process(agent, &hostname(), &rank.to_string(), labels);
    let w = StoreWriter::create_with(dir, &id, &Buckets::default(), native).unwrap();
    w.apply(events);
    w
}

/// A `serve` process of a test; killed when dropped (a failing test leaves none behind).
pub struct Sidecar {
    child: Option<std::process::Child>,
    out: BufReader<std::process::ChildStdout>,
    /// The first line it printed (`serving ...`, `pushing ...`, `waiting: ...`).
    pub first_line: String,
}

impl Sidecar {
    /// Starts `serve --dir DIR` with `args` and `env` (the variables the defaults and labels
    /// come from are removed unless given), at log level WARN; returns once it printed its
    /// first line.
    pub fn start(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Sidecar {
        Sidecar::spawn(dir, args, env, Stdio::inherit())
    }

    /// [`Sidecar::start`], its stderr (its log) written to the file `log`.
    pub fn start_logging(
        dir: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Sidecar {
        let file = std::fs::File::create(log).unwrap();
        Sidecar::spawn(dir, args, env, file.into())
    }

    fn spawn(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Sidecar {
        let mut cmd = Command::cargo_bin("nixl-telemetry").unwrap();
        cmd.args(["serve", "--dir"])
            .arg(dir)
            .args(args)
            .env("NIXL_LOG_LEVEL", "WARN")
            .stdout(Stdio::piped())
            .stderr(stderr);
        for v in [
            "NIXL_TELEMETRY_LABELS",
            "NIXL_TELEMETRY_LABELS_FROM",
            "SLURM_JOB_ID",
            "OTEL_METRIC_EXPORT_INTERVAL",
            "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
            "NIXL_TELEMETRY_MP_STALE_TTL",
            "NIXL_TELEMETRY_PUSH_INSTANCE",
        ] {
            cmd.env_remove(v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut serve = cmd.spawn().unwrap();
        let mut out = BufReader::new(serve.stdout.take().unwrap());
        let mut first_line = String::new();
        out.read_line(&mut first_line).unwrap();
        Sidecar {
            child: Some(serve),
            out,
            first_line,
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The address after `http://` in its first line (`serving http://ADDR/metrics ...`,
    /// `pushing ... (push only; health at http://ADDR/health)`).
    pub fn address(&self) -> SocketAddr {
        let rest = self.first_line.split("http://").nth(1).unwrap_or_default();
        rest.split('/')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {:?}", self.first_line))
    }

    /// Stops it with SIGTERM: it exits 0 and says `stopped`; what it printed after its first
    /// line.
    pub fn stop(mut self) -> String {
        let mut serve = self.child.take().unwrap();
        terminate(serve.id());
        assert!(serve.wait().unwrap().success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        assert!(rest.contains("stopped"), "{rest}");
        rest
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends SIGTERM to `pid` (a child of this test).
pub fn terminate(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `GET path` on `addr` (from 127.0.0.1): the status and the body as JSON (`Null` when it is
/// not), or `None` without an answer.
pub fn probe(addr: SocketAddr, path: &str) -> Option<(u16, serde_json::Value)> {
    let (status, body) = request_from(
        Ipv4Addr::LOCALHOST,
        addr,
        path,
        Duration::ZERO,
        Duration::from_secs(10),
    )
    .ok()?;
    Some((status, serde_json::from_str(&body).unwrap_or_default()))
}

/// The listening TCP sockets of process `pid` (from `/proc`): the local addresses (as
/// `/proc/net/tcp` writes them) of its socket inodes that `/proc/net/tcp` or `tcp6` list in
/// state LISTEN (`0A`).
pub fn listening_sockets(pid: u32) -> Vec<String> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut listening = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for row in text.lines().skip(1) {
            let f: Vec<&str> = row.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                listening.push(f[1].to_owned());
            }
        }
    }
    listening
}
