//! The Go-built receivers of the tests: Prometheus 3.16 and its `promtool`
//! ([`prometheus3`]), the OpenTelemetry Collector ([`collector`]) and VictoriaMetrics
//! ([`victoria`]), beside Debian's Prometheus 2.42 ([`crate::prometheus`]).
//!
//! `scripts/install-test-deps.sh` builds each from its module in `test-deps/go/` into
//! `${XDG_CACHE_HOME:-$HOME/.cache}/nixl-telemetry/go-bin/<name>-<version>`, the version being
//! the one the module's `go.mod` requires; [`GoProgram::path`] finds it by the same rule. A
//! server is started on 127.0.0.1 port 0, the port it bound read back from its log
//! ([`Server::bound_port`]), and is ready once its ready endpoint answers (`/-/ready`,
//! `/health`; the Collector, which has none without an extension, once it logs that it is);
//! it is killed when dropped. A missing program fails the test with what to run or install,
//! unless `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1` ([`skipped`]).

pub mod collector;
pub mod prometheus3;
pub mod victoria;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::poll_for;
use crate::promql::PromQl;

/// Set to `1`, the tests of the Go-built receivers pass without running (for a machine
/// without Go); CI never sets it.
pub const SKIP_VAR: &str = "NIXL_TELEMETRY_SKIP_GO_RECEIVERS";

/// True (with a note on standard error) when [`SKIP_VAR`] is `1`: the calling test returns
/// without running.
pub fn skipped() -> bool {
    let skip = std::env::var(SKIP_VAR).as_deref() == Ok("1");
    if skip {
        eprintln!("{SKIP_VAR}=1: this test of a Go-built receiver does not run");
    }
    skip
}

/// A fresh directory for the servers' configuration, data and logs, or None (with the note of
/// [`skipped`]) when the tests of the Go-built receivers are skipped:
/// `let Some(work) = scratch() else { return };`.
pub fn scratch() -> Option<tempfile::TempDir> {
    (!skipped()).then(|| tempfile::tempdir().expect("a temporary directory"))
}

/// A program built from a module of `test-deps/go/`.
#[derive(Clone, Copy, Debug)]
pub enum GoProgram {
    /// Prometheus 3.16's server.
    Prometheus,
    /// Prometheus 3.16's `promtool`.
    Promtool,
    /// The OpenTelemetry Collector of `test-deps/go/otelcol/main.go`.
    Collector,
    /// VictoriaMetrics' single-node server.
    VictoriaMetrics,
}

impl GoProgram {
    /// Its name in the cache (before `-<version>`), its module's directory in `test-deps/go/`,
    /// and the module whose required version names the build.
    fn parts(self) -> (&'static str, &'static str, &'static str) {
        const PROMETHEUS: &str = "github.com/prometheus/prometheus";
        match self {
            GoProgram::Prometheus => ("prometheus", "prometheus", PROMETHEUS),
            GoProgram::Promtool => ("promtool", "prometheus", PROMETHEUS),
            GoProgram::Collector => (
                "otelcol",
                "otelcol",
                "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusremotewriteexporter",
            ),
            GoProgram::VictoriaMetrics => (
                "victoria-metrics",
                "victoria-metrics",
                "github.com/VictoriaMetrics/VictoriaMetrics",
            ),
        }
    }

    /// The built program, or a panic saying how to build it (and which Go that needs).
    pub fn path(self) -> PathBuf {
        let (name, dir, module) = self.parts();
        let go_mod = crate::workspace_root()
            .join("test-deps/go")
            .join(dir)
            .join("go.mod");
        let text = std::fs::read_to_string(&go_mod)
            .unwrap_or_else(|e| panic!("{}: {e}", go_mod.display()));
        let word = |first: &str| {
            text.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|w| w.len() >= 2 && w[0] == first)
                .map(|w| w[1].to_owned())
        };
        let version =
            word(module).unwrap_or_else(|| panic!("{} requires no {module}", go_mod.display()));
        let path = cache_dir().join(format!("{name}-{version}"));
        assert!(
            path.is_file(),
            "{} is missing: run `bash scripts/install-test-deps.sh`, which builds it from \
             test-deps/go/{dir} with Go {} or newer (install Go from https://go.dev/dl/ if it \
             says Go is missing or too old), or set {SKIP_VAR}=1 to skip the tests of the \
             Go-built receivers",
            path.display(),
            word("go").unwrap_or_default()
        );
        path
    }
}

/// Where `scripts/install-test-deps.sh` puts the programs it builds.
fn cache_dir() -> PathBuf {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache"),
    };
    base.join("nixl-telemetry/go-bin")
}

/// A running server: killed (and waited for) when dropped.
pub struct Server {
    child: Child,
    log: PathBuf,
    what: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `program` with `args`, its standard output and error into `log`.
    pub fn spawn(what: &'static str, program: GoProgram, args: &[String], log: &Path) -> Server {
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new(program.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Server {
            child,
            log: log.to_owned(),
            what,
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The port the server says it bound: the first line of its log containing `marker`, from
    /// which `port` reads it. Panics with the log when the server exits or never says it.
    pub fn bound_port(&mut self, marker: &str, port: impl Fn(&str) -> Option<u16>) -> u16 {
        let found = poll_for(Duration::from_secs(60), || {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}):\n{}", self.what, self.log());
            }
            self.log()
                .lines()
                .filter(|l| l.contains(marker))
                .find_map(&port)
        });
        found.unwrap_or_else(|| panic!("{} never logged {marker:?}:\n{}", self.what, self.log()))
    }

    /// Waits until `ready` says so, panicking with the log when the server exits or never does.
    pub fn wait_ready(&mut self, mut ready: impl FnMut(&Server) -> bool) {
        let ok = poll_for(Duration::from_secs(60), || {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}):\n{}", self.what, self.log());
            }
            ready(self).then_some(())
        });
        assert!(ok.is_some(), "{} never ready:\n{}", self.what, self.log());
    }
}

/// A server with a remote-write receiver at `/api/v1/write` and a Prometheus-compatible query
/// API, which is its [`PromQl`] (`Deref`): Prometheus 3 ([`prometheus3::start`]) or
/// VictoriaMetrics ([`victoria::start`]). Killed when dropped.
pub struct QueryServer {
    _server: Server,
    api: PromQl,
    port: u16,
}

impl std::ops::Deref for QueryServer {
    type Target = PromQl;
    fn deref(&self) -> &PromQl {
        &self.api
    }
}

impl QueryServer {
    /// `server`, bound to `port`, its log at `log`.
    fn new(server: Server, port: u16, log: &Path) -> QueryServer {
        QueryServer {
            _server: server,
            api: PromQl::new(port, log),
            port,
        }
    }

    /// The remote-write receiver's URL.
    pub fn write_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/write", self.port)
    }
}

/// Every complete line of the JSON Lines file `path` (a writer may be adding the last one),
/// parsed; none when the file does not exist yet.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The port of `host:port` at the end of `word` (`127.0.0.1:41234`, `http://127.0.0.1:41234/`).
pub fn port_in(word: &str) -> Option<u16> {
    let rest = word.split("127.0.0.1:").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|p| *p != 0)
}

/// True when `GET http://127.0.0.1:<port><path>` answers 200.
pub fn answers_ok(port: u16, path: &str) -> bool {
    ureq::get(&format!("http://127.0.0.1:{port}{path}"))
        .timeout(Duration::from_secs(5))
        .call()
        .is_ok_and(|r| r.status() == 200)
}
