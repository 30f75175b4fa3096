//! `nixl-telemetry serve --dir DIR [--port P] [--local]`: serve every live `prometheus_mp`
//! store of a directory at `GET /metrics`, as a standalone process (a node sidecar, a systemd
//! unit) that outlives the ranks. It runs the plug-in's own store scan, endpoint and election
//! (the `nixl-telemetry-mp-store` library):
//! it takes part in the election for the address like a rank (so it never fights a serving
//! rank for the port, and takes over when that rank exits), and ranks that run with
//! `NIXL_TELEMETRY_MP_SERVE=0` only write their stores. With `--remote-write URL` or
//! `--otlp URL` it also pushes the stores' series ([`crate::push`]), whether or not it holds
//! the port; with `--push-only` it only pushes: no election, no scrape port (one sidecar per
//! job, however many jobs share the node), and its health checks on a loopback port of their
//! own (`--health-address`). Its `/health`, `/readyz` and `/livez` say whether the pushes
//! deliver and its loop turns as well ([`crate::serve_health`]). Runs until SIGINT or
//! SIGTERM, then makes the last push.
//!
//! `--textfile PATH` writes the same page to `PATH` every `--interval` seconds instead, for
//! node_exporter's textfile collector ([`textfile`]); no port is opened. The file is removed
//! when `serve` stops, so node_exporter does not go on serving a stale page. Pushing works with
//! it too.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nixl_telemetry_base::settings::{self as declared, process_settings, Setting};
use nixl_telemetry_mp_store::config::{self, Aggregate, ScanConfig};
use nixl_telemetry_mp_store::election::{Role, RETRY};
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_mp_store::{dir, join_election, textfile};
use nixl_telemetry_series::endpoint::{Limits, Server};

use crate::output::{CliError, CliResult};
use crate::serve_health::{self, Delivery, HealthOnly, Heartbeat};

/// A failure of the settings or of the endpoint, reported like the library's errors.
fn failure(message: String) -> CliError {
    nixl_telemetry_core::Error::invalid(message).into()
}

/// `[default: NAME, else DEFAULT]`, for the help of an option whose default is the setting
/// `setting` the ranks read: both taken from its declaration.
pub(crate) fn default_from(setting: &Setting) -> String {
    format!(
        "[default: {}, else {}]",
        setting.name,
        setting.default_str()
    )
}

/// `serve`'s options; each defaults to the variable the ranks read.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The store directory (the ranks' NIXL_TELEMETRY_MULTIPROC_DIR); created 0700 if missing.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// TCP port.
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u16).range(1..),
          help = format!("TCP port {}", default_from(&declared::PROMETHEUS_PORT)))]
    port: Option<u16>,
    /// Bind 127.0.0.1 only [default: NIXL_TELEMETRY_PROMETHEUS_LOCAL, else 0.0.0.0].
    #[arg(long)]
    local: bool,
    /// Seconds a departed rank's store is still served.
    #[arg(long, value_name = "SECONDS",
          help = format!("Seconds a departed rank's store is still served {}",
                         default_from(&declared::MP_STALE_TTL)))]
    stale_ttl: Option<u64>,
    /// `sum` adds node totals beside the per-rank series, `none` does not.
    #[arg(long, value_name = "MODE",
          help = format!("`sum` adds node totals beside the per-rank series, `none` does not {}",
                         default_from(&declared::MP_AGGREGATE)))]
    aggregate: Option<String>,
    /// Write the page to this file (ending in .prom, in node_exporter's
    /// --collector.textfile.directory) every --interval seconds instead of serving a port.
    #[arg(long, value_name = "PATH")]
    textfile: Option<PathBuf>,
    /// Push only (with --remote-write or --otlp): bind no scrape port and take no part in the
    /// election, so that each job on a node can run its own sidecar; its health checks are
    /// served on --health-address.
    #[arg(long, conflicts_with_all = ["textfile", "port", "local"])]
    push_only: bool,
    /// The address of --push-only's health checks (GET /health, /readyz, /livez; no
    /// /metrics) [default: 127.0.0.1:0, a free loopback port, printed at the start].
    #[arg(long, value_name = "ADDR", requires = "push_only")]
    health_address: Option<SocketAddr>,
    /// /health and /readyz answer 503 once no push has been accepted for this many push
    /// intervals (counted from the start until the first is).
    #[arg(long, value_name = "N", default_value_t = serve_health::DEFAULT_PUSH_INTERVALS,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    health_push_intervals: u32,
    /// Seconds between two writes of --textfile.
    #[arg(long, value_name = "SECONDS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    interval: u64,
    /// Pushing the stores' series to a remote-write or OTLP receiver as well.
    #[command(flatten)]
    push: crate::push::PushArgs,
}

/// The store scan settings and address `args` ask for, the environment filling what they leave out.
fn settings(args: &ServeArgs) -> Result<(ScanConfig, SocketAddr), String> {
    let env_addr = config::addr_from(&process_settings)?;
    let ip = if args.local {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        env_addr.ip()
    };
    let addr = SocketAddr::new(ip, args.port.unwrap_or(env_addr.port()));
    let stale_ttl = match args.stale_ttl {
        Some(s) => Duration::from_secs(s.min(i64::MAX as u64 / 1_000_000_000)),
        None => config::stale_ttl_from(&process_settings)?,
    };
    let aggregate = match &args.aggregate {
        Some(a) => Aggregate::parse("--aggregate", a)?,
        None => config::aggregate_from(&process_settings)?,
    };
    let scan = ScanConfig {
        dir: args.dir.clone(),
        stale_ttl,
        aggregate,
    };
    Ok((scan, addr))
}

/// SIGINT and SIGTERM, blocked in every thread (the endpoint's thread inherits the mask) and
/// waited for synchronously, so no handler runs at all.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill the local set they are given, and
    // pthread_sigmask only reads it; no other thread exists yet, so every later thread
    // inherits this mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`; true when one arrived.
fn signalled(set: &libc::sigset_t, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: sigtimedwait reads the set and the timeout, both live locals, and may write no
    // siginfo (NULL is allowed).
    unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) > 0 }
}

/// Writes the page to `path` every `interval` until SIGINT or SIGTERM, then removes it.
fn run_textfile(
    scan: ScanConfig,
    path: &std::path::Path,
    interval: Duration,
    signals: &libc::sigset_t,
) -> CliResult {
    let scan = StoreScan::new(scan);
    let mut out = std::io::stdout();
    writeln!(
        out,
        "writing {} every {}s for {}",
        path.display(),
        interval.as_secs(),
        scan.config().dir.display()
    )?;
    out.flush()?;
    let mut failing = false;
    loop {
        match textfile::write_atomically(path, &scan.scrape()) {
            Ok(()) if failing => {
                failing = false;
                eprintln!("nixl-telemetry serve: writing {} again", path.display());
            }
            Ok(()) => {}
            // Once per run of failures; the next interval tries again.
            Err(e) if !failing => {
                failing = true;
                eprintln!(
                    "nixl-telemetry serve: cannot write {} ({e}); retrying every {}s",
                    path.display(),
                    interval.as_secs()
                );
            }
            Err(_) => {}
        }
        if signalled(signals, interval) {
            break;
        }
    }
    let _ = std::fs::remove_file(path);
    writeln!(out, "stopped")?;
    Ok(())
}

/// Where `serve --push-only` answers its health checks when `--health-address` is not given:
/// a free loopback port.
const DEFAULT_HEALTH_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// Pushes only, answering health checks on `args`' health address, until SIGINT or SIGTERM.
fn run_push_only(
    args: &ServeArgs,
    scan: ScanConfig,
    health: nixl_telemetry_mp_store::store_scan::HealthDetails,
    heartbeat: &Heartbeat,
    signals: &libc::sigset_t,
) -> CliResult {
    let addr = args.health_address.unwrap_or(DEFAULT_HEALTH_ADDRESS);
    let dir = scan.dir.display().to_string();
    let scan = std::sync::Arc::new(StoreScan::new(scan));
    scan.set_health_details(health);
    let server = Server::bind(
        addr,
        Limits::default(),
        std::sync::Arc::new(HealthOnly(scan)),
    )
    .map_err(|e| failure(format!("--health-address {addr} cannot be served: {e}")))?;
    let mut out = std::io::stdout();
    writeln!(
        out,
        "pushing {dir} (push only; health at http://{}/health)",
        server.local_addr()
    )?;
    out.flush()?;
    while !signalled(signals, RETRY) {
        heartbeat.beat();
    }
    Ok(())
}

/// Runs the endpoint (or writes the textfile) until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> CliResult {
    nixl_telemetry_base::logging::init();
    let signals = stop_signals();
    let (scan, addr) = settings(args).map_err(failure)?;
    dir::prepare(&scan.dir).map_err(failure)?;
    if let Some(path) = &args.textfile {
        textfile::check_path(path).map_err(|e| failure(format!("--textfile {e}")))?;
    }
    if args.push_only && args.push.remote_write.is_none() && args.push.otlp.is_none() {
        return Err(failure(
            "--push-only needs --remote-write URL or --otlp URL".to_owned(),
        ));
    }
    let pushers = crate::push::start(&args.push, &scan).map_err(failure)?;
    let heartbeat = std::sync::Arc::new(Heartbeat::new());
    let health = serve_health::details(
        Delivery::new(&pushers, args.health_push_intervals),
        heartbeat.clone(),
    );
    if args.push_only {
        let served = run_push_only(args, scan, health, &heartbeat, &signals);
        // The last push of every protocol (bounded by its final-push setting).
        drop(pushers);
        if served.is_ok() {
            writeln!(std::io::stdout(), "stopped")?;
        }
        return served;
    }
    if let Some(path) = &args.textfile {
        let interval = Duration::from_secs(args.interval);
        let written = run_textfile(scan, path, interval, &signals);
        // The last push, once the file is gone.
        drop(pushers);
        return written;
    }
    let election = join_election(&scan, addr);
    election.scan().set_health_details(health);
    let dir = election.dir().display().to_string();
    let mut out = std::io::stdout();
    let mut shown = None;
    loop {
        heartbeat.beat();
        let role = election.poll(Instant::now()).map_err(failure)?;
        if shown != Some(role) {
            shown = Some(role);
            match role {
                Role::Serving(a) => writeln!(out, "serving http://{a}/metrics for {dir}")?,
                Role::Standby => writeln!(
                    out,
                    "waiting: another process serves {dir} on {addr}; taking over when it exits"
                )?,
                Role::Blocked => writeln!(
                    out,
                    "waiting: {addr} is held by a process that is not a rank of {dir}"
                )?,
            }
            out.flush()?;
        }
        if signalled(&signals, RETRY) {
            break;
        }
    }
    drop(election);
    // The last push of every protocol (bounded by its final-push setting).
    drop(pushers);
    writeln!(out, "stopped")?;
    Ok(())
}
