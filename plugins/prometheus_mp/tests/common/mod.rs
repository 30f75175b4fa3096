//! Helpers of the `prometheus_mp` integration tests: rank processes (this test binary run
//! again as a child that creates an agent exporting through the plug-in, records a known
//! transfer, or keeps recording (`recording`), and waits for its standard input to close), a
//! foreign port holder, finding which
//! process listens on a port, polling with a deadline, the Prometheus plug-in tests' HTTP
//! client and the store library tests' store parser and sample sets (shared, not copied).
//!
//! The plug-in is a cdylib: `cargo build --workspace --all-targets` must run before
//! `cargo test` (cargo test does not build cdylibs).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufReader, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

#[path = "../../../prometheus/tests/common/mod.rs"]
mod http;
mod recording;
#[path = "../../../../mp-store/tests/common/mod.rs"]
mod store_files;

#[allow(unused_imports)] // not every test binary uses all of them
pub use http::{
    exchange, get, poll, port_closed, scrape, scrape_as, scrape_text, tool, Prometheus, Scrape,
    ACCEPT_PROTOBUF,
};
use nixl_telemetry_test_support::child;
pub use nixl_telemetry_test_support::free_port;
#[allow(unused_imports)] // not every test binary uses all of them
pub use recording::{accepted, spawn_recording, stores_of, transfers_in, RECORDING};
#[allow(unused_imports)] // not every test binary uses all of them
pub use store_files::{parse_store, sample_set, Parsed};

/// The variable that makes this test binary a child: `rank` or `hold-port`.
const ROLE: &str = "MP_TEST_ROLE";
/// A rank's transfer: bytes (its transfer time is a tenth of it, in µs).
const BYTES: &str = "MP_TEST_BYTES";
/// A rank's agent name.
const AGENT: &str = "MP_TEST_AGENT";
/// Set to `rank/ranks/n`: the rank records its `n` transfers of [`rank_transfers`] instead of
/// one.
pub const TRANSFERS: &str = "MP_TEST_TRANSFERS";

fn parse_share(share: &str) -> (usize, usize, usize) {
    let v: Vec<usize> = share.split('/').map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

/// The `n` transfers (time in µs, bytes) of rank `rank` of `ranks`: its share of
/// [`heavy_tailed`](nixl_telemetry_test_support::transfers::heavy_tailed)`(ranks * n)`, so
/// every rank records different transfers of the same distribution.
pub fn rank_transfers(rank: usize, ranks: usize, n: usize) -> Vec<(u64, u64)> {
    nixl_telemetry_test_support::transfers::heavy_tailed(ranks * n)[rank * n..(rank + 1) * n]
        .to_vec()
}

/// Set: the rank forks a child that sleeps a minute (it keeps everything the rank's process
/// had at the fork), and prints the child's pid after its own.
pub const FORK_SLEEPER: &str = "MP_TEST_FORK_SLEEPER";

/// The body of the `child` test of each test binary: in a child process, plays its role and
/// returns; in the test run itself, does nothing.
pub fn child_main() {
    match std::env::var(ROLE).as_deref() {
        Ok("rank") => rank(),
        Ok("hold-port") => {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            println!("READY {}", l.local_addr().unwrap().port());
            std::io::stdout().flush().unwrap();
            wait_for_stdin();
        }
        _ => {}
    }
}

fn wait_for_stdin() {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// A rank: an agent whose exporter is `prometheus_mp` (configured by the parent through the
/// environment), one transfer recorded and flushed (or, with [`TRANSFERS`], its share of
/// [`rank_transfers`]), then idle until stdin closes; with [`RECORDING`], it keeps recording.
fn rank() {
    let agent = std::env::var(AGENT).unwrap();
    let bytes: u64 = std::env::var(BYTES).unwrap().parse().unwrap();
    let c = nixl_telemetry_core::Collector::from_env(&agent, true)
        .unwrap_or_else(|e| panic!("creating {agent}: {e:?}"));
    if let Ok(spec) = std::env::var(RECORDING) {
        return recording::record(c, &spec);
    }
    match std::env::var(TRANSFERS) {
        Ok(share) => {
            let (rank, ranks, n) = parse_share(&share);
            for (i, &(time, size)) in rank_transfers(rank, ranks, n).iter().enumerate() {
                c.add_xfer_stats(time, true, size, time / 4);
                // Within the staging queue's room between flushes.
                if i % 500 == 499 {
                    c.flush();
                }
            }
        }
        Err(_) => {
            c.add_xfer_stats(bytes / 10, true, bytes, 3);
        }
    }
    c.flush();
    if std::env::var_os(FORK_SLEEPER).is_some() {
        let sleeper = nixl_telemetry_test_support::forked::fork(|_| {
            std::thread::sleep(std::time::Duration::from_secs(60));
            0
        });
        println!("READY {} {}", std::process::id(), sleeper.pid());
        std::io::stdout().flush().unwrap();
        // Left running: the test kills it.
        std::mem::forget(sleeper);
        wait_for_stdin();
        return;
    }
    println!("READY {}", std::process::id());
    std::io::stdout().flush().unwrap();
    wait_for_stdin();
    drop(c);
}

/// A child process of this test binary; killed when dropped.
pub struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Kept open: libtest fails a child whose stdout was closed.
    _stdout: BufReader<ChildStdout>,
    stderr: PathBuf,
    /// Its process id.
    pub pid: u32,
    /// What it printed after `READY`: its pid (a rank) or its port (a port holder).
    pub ready: String,
}

impl Proc {
    fn spawn(role: &str, env: &[(&str, String)], stderr: PathBuf) -> Proc {
        let mut cmd = child::test("child");
        cmd.env_clear()
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut proc = cmd.spawn().unwrap();
        let mut out = BufReader::new(proc.stdout.take().unwrap());
        let Some(ready) = child::read_marked(&mut out, "READY ") else {
            let _ = proc.wait();
            panic!(
                "child {role} exited before READY:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Proc {
            pid: proc.id(),
            stdin: proc.stdin.take(),
            _stdout: out,
            child: proc,
            stderr,
            ready,
        }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `kill -STOP` (`libc::SIGSTOP`) or `kill -CONT` (`libc::SIGCONT`), returning once the
    /// process is stopped, or running again.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) of our own child, not yet waited for.
        assert_eq!(unsafe { libc::kill(self.pid as i32, signal) }, 0);
        let stopped = signal == libc::SIGSTOP;
        poll(
            std::time::Duration::from_secs(10),
            "the process's state",
            || ((process_state(self.pid) == Some('T')) == stopped).then_some(()),
        );
    }

    /// Closes its stdin (a rank drops its agent and exits), waits, and returns its stderr.
    pub fn finish(mut self) -> String {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let err = self.stderr_text();
        assert!(status.success(), "child failed ({status}):\n{err}");
        err
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node for a test: a scratch directory, the store directory in it (`mp`, which the ranks
/// create) and a free port.
pub fn scratch_node() -> (tempfile::TempDir, PathBuf, u16) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    (scratch, dir, free_port())
}

/// The variables of ranks keeping native histograms, on a node that serves totals.
pub const NATIVE_WITH_TOTALS: [(&str, &str); 2] = [
    ("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true"),
    ("NIXL_TELEMETRY_MP_AGGREGATE", "sum"),
];

/// A rank process's settings.
pub struct RankSpec<'a> {
    /// `NIXL_TELEMETRY_MULTIPROC_DIR`.
    pub dir: &'a Path,
    /// `NIXL_TELEMETRY_PROMETHEUS_PORT` (loopback only).
    pub port: u16,
    /// The agent's name.
    pub agent: &'a str,
    /// `LOCAL_RANK`.
    pub local_rank: &'a str,
    /// The bytes of its one transfer.
    pub bytes: u64,
    /// More variables (`NIXL_TELEMETRY_MP_STALE_TTL`, `NIXL_TELEMETRY_MP_SERVE`, ...).
    pub extra: &'a [(&'a str, &'a str)],
}

/// Starts a rank and waits until it has recorded and flushed its transfer.
pub fn spawn_rank(spec: &RankSpec) -> Proc {
    let plugins = nixl_telemetry_test_support::built_plugins(&["prometheus_mp"]);
    let mut env: Vec<(&str, String)> = vec![
        ("NIXL_TELEMETRY_ENABLE", "1".into()),
        ("NIXL_TELEMETRY_EXPORTER", "prometheus_mp".into()),
        ("NIXL_PLUGIN_DIR", plugins.display().to_string()),
        (
            "NIXL_TELEMETRY_MULTIPROC_DIR",
            spec.dir.display().to_string(),
        ),
        ("NIXL_TELEMETRY_PROMETHEUS_PORT", spec.port.to_string()),
        ("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "1".into()),
        ("LOCAL_RANK", spec.local_rank.into()),
        (AGENT, spec.agent.into()),
        (BYTES, spec.bytes.to_string()),
    ];
    env.extend(spec.extra.iter().map(|(k, v)| (*k, v.to_string())));
    let stderr = spec
        .dir
        .parent()
        .unwrap()
        .join(format!("{}.stderr", spec.agent));
    Proc::spawn("rank", &env, stderr)
}

/// Starts a process that holds a loopback port (not a rank of any directory): the port.
pub fn spawn_port_holder(scratch: &Path) -> (Proc, u16) {
    let holder = Proc::spawn("hold-port", &[], scratch.join("holder.stderr"));
    let port = holder.ready.parse().unwrap();
    (holder, port)
}

/// A scrape, when the port answers.
pub fn try_scrape(port: u16) -> Option<Scrape> {
    let r = get(port, "/metrics").ok()?;
    (r.status == 200).then(|| Scrape {
        samples: nixl_telemetry_series::text::parse(&r.body).expect("parsable exposition"),
        body: r.body,
    })
}

/// The `pid` labels present in a scrape.
pub fn pids(s: &Scrape) -> BTreeSet<u32> {
    s.samples
        .iter()
        .filter_map(|x| x.label("pid")?.parse().ok())
        .collect()
}

/// Which of `candidates` has a socket listening on TCP `port` (from /proc/net/tcp{,6} and
/// the candidates' descriptors).
pub fn listening_pid(port: u16, candidates: &[u32]) -> Option<u32> {
    let mut inodes = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Some(local) = f.get(1) else { continue };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            // State 0A is LISTEN.
            if local_port == Some(port) && f.get(3) == Some(&"0A") {
                inodes.insert(format!("socket:[{}]", f[9]));
            }
        }
    }
    candidates.iter().copied().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| inodes.contains(&*l.to_string_lossy()))
            })
    })
}

/// The state letter of process `pid` (`R`, `S`, `T` when stopped, ...), from /proc.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which is in parentheses and may hold anything.
    stat.rsplit_once(") ")?.1.chars().next()
}

/// `nixl-telemetry serve --dir dir` (more arguments to add), logging warnings and errors.
pub fn serve_command(dir: &Path) -> std::process::Command {
    let cli = nixl_telemetry_test_support::profile_dir().join("nixl-telemetry");
    assert!(
        cli.exists(),
        "{} is missing: run `cargo build --workspace --all-targets` before `cargo test`",
        cli.display()
    );
    let mut serve = std::process::Command::new(&cli);
    serve
        .args(["serve", "--dir"])
        .arg(dir)
        .env("NIXL_LOG_LEVEL", "WARN");
    serve
}

/// Counts the lines of `text` containing `needle`.
pub fn count_lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}
