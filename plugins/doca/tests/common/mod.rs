//! Helpers shared by the DOCA plug-in's integration tests: finding the plug-ins, the test lock
//! and environment, free ports, scraping, building the C test double of NVIDIA's DOCA
//! libraries, and reading its call log.
//!
//! The plug-ins are cdylibs: `cargo build --workspace --all-targets` must run before
//! `cargo test` (cargo test does not build cdylibs).

#![allow(dead_code)]

#[allow(unused_imports)] // not every test binary scrapes
pub use nixl_telemetry_test_support::free_port;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nixl_telemetry_core::{plugin, Collector, Config, ExporterChoice, MetricMask};
use nixl_telemetry_series::text::{self, Sample};

/// Every variable a test may set, cleared before and after each test.
pub const VARS: [&str; 16] = [
    "NIXL_TELEMETRY_DOCA_BACKENDS",
    "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT",
    "NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL",
    "NIXL_TELEMETRY_DOCA_IPC_SOCKETS_DIR",
    "NIXL_TELEMETRY_DOCA_LIB_DIR",
    "NIXL_TELEMETRY_PROMETHEUS_PORT",
    "NIXL_TELEMETRY_PROMETHEUS_LOCAL",
    "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
    "DOCA_DOUBLE_LOG",
    "DOCA_DOUBLE_IPC_STATUS",
    "DOCA_DOUBLE_FAIL",
    "PROMETHEUS_ENDPOINT",
    "NIXL_TELEMETRY_LABELS",
    "NIXL_TELEMETRY_LABELS_FROM",
    "SLURM_JOB_ID",
    "NIXL_TELEMETRY_NATIVE_HISTOGRAMS",
];

use nixl_telemetry_base::sync::LockUnpoisoned;
pub use nixl_telemetry_test_support::Serial;

/// Takes the test lock, makes the plug-ins findable and clears the variables.
pub fn serial() -> Serial {
    let s = nixl_telemetry_test_support::serial(&VARS);
    plugin_dir();
    s
}

/// Makes target/<profile> a plug-in directory (once), checking the plug-ins were built.
pub fn plugin_dir() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = nixl_telemetry_test_support::built_plugins(&["doca", "prometheus"]);
        plugin::add_plugin_dir(&dir).unwrap();
    });
}

/// Points the DOCA plug-in's scrape backend at `port` on 127.0.0.1.
pub fn use_doca_port(port: u16) {
    std::env::set_var("NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT", port.to_string());
    std::env::set_var("NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL", "true");
}

/// A collector for `agent` exporting to plug-in `exporter`, without periodic flushes during
/// the test (tests flush explicitly, on their own thread).
pub fn try_collector(
    agent: &str,
    exporter: &str,
    buffer_size: usize,
) -> nixl_telemetry_core::Result<Collector> {
    Collector::new(
        agent,
        Config {
            buffer_size,
            run_interval: Duration::from_secs(3600),
            exporter: ExporterChoice::Plugin(exporter.into()),
            enabled_metrics: MetricMask::ALL,
        },
    )
}

/// Like [`try_collector`], failing the test on an error.
pub fn collector(agent: &str, exporter: &str, buffer_size: usize) -> Collector {
    try_collector(agent, exporter, buffer_size)
        .unwrap_or_else(|e| panic!("creating agent {agent} ({exporter}): {e:?}"))
}

/// `GET path` on 127.0.0.1:port: (status, body).
pub fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let text = String::from_utf8(all).expect("UTF-8 reply");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    Ok((head[9..12].parse().unwrap(), body.to_owned()))
}

/// The body and parsed samples of a successful scrape.
pub fn scrape(port: u16) -> (String, Vec<Sample>) {
    let (status, body) = get(port, "/metrics").expect("scrape");
    assert_eq!(status, 200, "{body}");
    let samples = text::parse(&body).expect("parsable exposition");
    (body, samples)
}

/// The value of `name` for `agent` with the extra labels `extra`.
pub fn value(samples: &[Sample], name: &str, agent: &str, extra: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.label("agent_name") == Some(agent)
                && extra.iter().all(|(k, v)| s.label(k) == Some(v))
        })
        .map(|s| s.value)
}

/// The agents present in a scrape, sorted.
pub fn agents(samples: &[Sample]) -> Vec<String> {
    let mut v: Vec<String> = samples
        .iter()
        .filter_map(|s| s.label("agent_name").map(str::to_owned))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// True when nothing accepts connections on 127.0.0.1:port.
pub fn port_closed(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_secs(2),
    )
    .is_err()
}

/// An empty directory, for "the DOCA libraries are not there".
pub fn empty_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Which test double to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Double {
    /// Every symbol the plug-in uses.
    Complete,
    /// Without `doca_telemetry_exporter_metrics_base_histogram_observe`.
    WithoutObserve,
}

fn double_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doca_double")
}

fn cc(args: &[&str]) {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&compiler)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {compiler:?}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the test double of NVIDIA's libraries (once per variant and process) into its own
/// directory, named like the real libraries: `libdoca_common.so` and
/// `libdoca_telemetry_exporter.so` (which depends on the former, as the real one does).
/// Returns the directory, for `NIXL_TELEMETRY_DOCA_LIB_DIR`.
pub fn double_dir(variant: Double) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(Double, tempfile::TempDir)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock_unpoisoned();
    if let Some((_, d)) = built.iter().find(|(v, _)| *v == variant) {
        return d.path().to_owned();
    }
    let dir = tempfile::tempdir().unwrap();
    let src = double_source_dir();
    let common = dir.path().join("libdoca_common.so");
    let exporter = dir.path().join("libdoca_telemetry_exporter.so");
    let s = |p: &Path| p.display().to_string();
    let common_c = s(&src.join("doca_common.c"));
    let exporter_c = s(&src.join("doca_telemetry_exporter.c"));
    let include = format!("-I{}", s(&src));
    let libdir = format!("-L{}", s(dir.path()));
    cc(&[
        "-shared",
        "-fPIC",
        "-Wall",
        "-Wextra",
        &include,
        "-Wl,-soname,libdoca_common.so",
        "-o",
        &s(&common),
        &common_c,
    ]);
    let mut args = vec![
        "-shared",
        "-fPIC",
        "-Wall",
        "-Wextra",
        &include,
        "-Wl,-soname,libdoca_telemetry_exporter.so",
        "-o",
    ];
    let exporter_s = s(&exporter);
    args.push(&exporter_s);
    if variant == Double::WithoutObserve {
        args.push("-DDOCA_DOUBLE_WITHOUT_OBSERVE");
    }
    args.extend([exporter_c.as_str(), libdir.as_str(), "-ldoca_common"]);
    cc(&args);
    let path = dir.path().to_owned();
    built.push((variant, dir));
    path
}

/// A fresh call-log file for the double (`DOCA_DOUBLE_LOG`), inside `dir`.
pub fn double_log(dir: &Path) -> PathBuf {
    let log = dir.join("calls.log");
    std::env::set_var("DOCA_DOUBLE_LOG", &log);
    log
}

/// The double's call log, one call per line (empty if nothing was called).
pub fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The warnings and errors among captured messages.
pub fn warnings(logged: &[(log::Level, String)]) -> Vec<String> {
    nixl_telemetry_base::logging::warnings(logged)
        .into_iter()
        .map(str::to_owned)
        .collect()
}
