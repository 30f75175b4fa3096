//! `nixl-telemetry demo`: a simulated multi-threaded NIXL agent (random transfer sizes and
//! latencies, some errors, memory registrations) writing into a BUFFER ring (or serving the
//! Prometheus endpoint), while this process shows a compact live summary (the `top` frame)
//! every second, then the summary and the loss accounting.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nixl_telemetry_base::settings;
use nixl_telemetry_core::{Collector, Config, EventType, ExporterChoice, MetricMask, RingReader};

use crate::output::{self, CliError, CliResult};
use crate::rings::Mode;
use crate::scrape;
use crate::stats::Summary;
use crate::top::{Frame, Observed, Rates, Row, Source};

/// Where the demo agent's telemetry goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoExporter {
    /// The shared-memory ring (`NIXL_TELEMETRY_DIR/<agent>`), read live by the demo.
    Buffer,
    /// The Prometheus plug-in's endpoint on `127.0.0.1:<port>`, scraped live by the demo.
    Prometheus,
}

/// Options of the demo.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Directory for the ring file, which is kept (and read without being consumed) so that
    /// `read` and `stats` can look at it afterwards. Default: a temporary directory, removed.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Agent name (the ring file's name).
    #[arg(long, default_value = "demo-agent")]
    agent: String,
    /// How long the simulated agent runs, in seconds (at most a day).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Number of producer threads (1 to 256).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
    /// Transfers per second per thread (1 to 100000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rate: u32,
    /// Print every event as NIXL's reader does instead of the live summary.
    #[arg(long, conflicts_with = "quiet")]
    events: bool,
    /// Print only the final summary.
    #[arg(long)]
    quiet: bool,
    /// Where the agent's telemetry goes.
    #[arg(long, value_enum, default_value = "buffer")]
    exporter: DemoExporter,
    /// TCP port of the Prometheus endpoint (with `--exporter prometheus`; loopback only).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
}

/// A small xorshift generator: good enough for simulated sizes and latencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One simulated agent thread: transfers with random sizes and latencies, an occasional
/// error, and memory (de)registrations.
fn simulate(collector: &Collector, seed: u64, rate: u32, stop: &AtomicBool) {
    let mut rng = Rng(seed | 1);
    let pause = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut registered = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match rng.below(100) {
            0..=4 => {
                // Backend failures and disconnects dominate real error mixes.
                let status = [-3, -3, -10, -2, -11][rng.below(5) as usize];
                let _ = collector.update_error(status);
            }
            5..=9 => {
                let bytes = 1 << (20 + rng.below(6));
                collector.update_data(EventType::AgentMemoryRegistered, bytes);
                registered += bytes;
            }
            10..=11 if registered > 0 => {
                collector.update_data(EventType::AgentMemoryDeregistered, registered);
                registered = 0;
            }
            _ => {
                let bytes = 4096u64 << rng.below(13);
                let post_us = 2 + rng.below(40);
                // About 12 GB/s plus jitter.
                let xfer_us = post_us + bytes / 12_000 + rng.below(25);
                collector.add_xfer_stats(xfer_us, rng.below(2) == 0, bytes, post_us);
            }
        }
        std::thread::sleep(pause);
    }
}

/// Checks the combinations clap cannot.
fn validate(args: &DemoArgs) -> CliResult {
    if !(args.seconds > 0.0 && args.seconds <= 86_400.0) {
        return Err(CliError::Usage(format!(
            "--seconds must be a positive number of seconds, at most 86400 (got {})",
            args.seconds
        )));
    }
    if args.exporter == DemoExporter::Prometheus && args.dir.is_some() {
        return Err(CliError::Usage(
            "--dir names the ring's directory: it cannot go with --exporter prometheus".into(),
        ));
    }
    if args.exporter == DemoExporter::Prometheus && args.events {
        return Err(CliError::Usage(
            "--events prints the ring's events: it cannot go with --exporter prometheus".into(),
        ));
    }
    if args.exporter == DemoExporter::Buffer && args.port.is_some() {
        return Err(CliError::Usage(
            "--port is the Prometheus endpoint's: use it with --exporter prometheus".into(),
        ));
    }
    nixl_telemetry_core::ring::validate_file_name(&args.agent)
        .map_err(|e| CliError::Usage(format!("--agent: {}", e.message)))
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> CliResult {
    validate(args)?;
    if args.exporter == DemoExporter::Prometheus {
        return run_prometheus(args);
    }
    let (dir, temporary) = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            (d.clone(), false)
        }
        None => {
            let d =
                std::env::temp_dir().join(format!("nixl-telemetry-demo-{}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            (d, true)
        }
    };
    let result = run_ring(args, &dir, !temporary);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// The simulated agent: its collector and producer threads.
struct Agent {
    collector: Arc<Collector>,
    stop: Arc<AtomicBool>,
    producers: Vec<std::thread::JoinHandle<()>>,
}

impl Agent {
    fn start(args: &DemoArgs, exporter: ExporterChoice) -> Result<Agent, CliError> {
        let config = Config {
            buffer_size: 4096,
            run_interval: Duration::from_millis(100),
            exporter,
            enabled_metrics: MetricMask::ALL,
        };
        let collector = Arc::new(Collector::new(&args.agent, config)?);
        let stop = Arc::new(AtomicBool::new(false));
        let producers = (0..args.threads)
            .map(|i| {
                let (c, stop) = (collector.clone(), stop.clone());
                let seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(i) + 1)
                    ^ u64::from(std::process::id());
                let rate = args.rate;
                std::thread::spawn(move || simulate(&c, seed, rate, &stop))
            })
            .collect();
        Ok(Agent {
            collector,
            stop,
            producers,
        })
    }

    /// Stops the producers, then the collector (which flushes what is still staged).
    fn stop(self) -> Result<nixl_telemetry_core::CollectorStats, CliError> {
        self.stop.store(true, Ordering::Relaxed);
        for p in self.producers {
            let _ = p.join();
        }
        let collector = Arc::try_unwrap(self.collector)
            .map_err(|_| CliError::Failed("producer threads still hold the collector".into()))?;
        Ok(collector.close())
    }
}

/// Shows frames in place on a terminal (or one after the other when stdout is not one).
struct LiveView {
    tty: bool,
    shown: usize,
}

impl LiveView {
    fn new() -> LiveView {
        // SAFETY: isatty takes a file descriptor and touches no memory of ours.
        let tty = unsafe { libc::isatty(1) } == 1;
        LiveView { tty, shown: 0 }
    }

    fn show(&mut self, out: &mut impl Write, frame: &Frame) -> std::io::Result<()> {
        let lines = frame.lines();
        if self.tty && self.shown > 0 {
            // Back to the first line of the previous frame.
            write!(out, "\x1b[{}F", self.shown)?;
        }
        for line in &lines {
            if self.tty {
                writeln!(out, "{line}\x1b[K")?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        if self.tty {
            write!(out, "\x1b[J")?;
        } else {
            writeln!(out)?;
        }
        self.shown = lines.len();
        out.flush()
    }
}

fn frame(args: &DemoArgs, rows: Vec<Row>, started: Instant) -> Frame {
    Frame {
        title: format!(
            "demo agent '{}' - {:.0} of {} s - live, every second",
            args.agent,
            started.elapsed().as_secs_f64().min(args.seconds),
            args.seconds
        ),
        rows,
        notes: Vec::new(),
        width: crate::top::terminal_width(),
    }
}

fn run_ring(args: &DemoArgs, dir: &Path, keep: bool) -> CliResult {
    let agent = Agent::start(
        args,
        ExporterChoice::Buffer(dir.to_owned(), nixl_telemetry_core::ring::layout::V4),
    )?;
    let path = dir.join(&args.agent);
    let mut ring = RingReader::open(&path)?;
    // A kept ring is read without consuming it, so that it still holds the events afterwards.
    let mode = if keep { Mode::Peek } else { Mode::Consume };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "Demo agent '{}': {} threads x {} transfers/s for {} s, ring {}",
        args.agent,
        args.threads,
        args.rate,
        args.seconds,
        path.display()
    )?;
    writeln!(out, "Buffer capacity: {} events", ring.capacity())?;

    output::catch_ctrl_c();
    let mut summary = Summary::default();
    let mut interval = Observed::default();
    let mut cursor = None;
    let mut take = |ring: &mut RingReader| -> Vec<nixl_telemetry_core::Event> {
        match mode {
            Mode::Consume => {
                let most = ring.capacity() as usize;
                ring.by_ref().take(most).collect()
            }
            // `demo` reads with Consume or Peek only.
            Mode::Peek | Mode::Look => match ring.peek(cursor, usize::MAX) {
                Ok(p) => {
                    cursor = Some(p.next);
                    p.events
                }
                Err(_) => Vec::new(),
            },
        }
    };
    let mut view = LiveView::new();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let mut frame_at = started;
    let show = |events: Vec<nixl_telemetry_core::Event>,
                summary: &mut Summary,
                interval: &mut Observed,
                out: &mut std::io::StdoutLock|
     -> CliResult {
        for event in &events {
            summary.add(event);
            interval.add(event);
            if args.events {
                output::write_event_block(out, event, None)?;
            }
        }
        Ok(())
    };
    while Instant::now() < deadline && !output::interrupted() {
        let events = take(&mut ring);
        let idle = events.is_empty();
        show(events, &mut summary, &mut interval, &mut out)?;
        if !args.events && !args.quiet && frame_at.elapsed() >= Duration::from_secs(1) {
            let seconds = frame_at.elapsed().as_secs_f64();
            frame_at = Instant::now();
            let row = Row {
                name: args.agent.clone(),
                rates: Some(Rates::from_events(&interval, seconds)),
                note: None,
                totals: None,
                aggregate: false,
            };
            interval = Observed::default();
            view.show(&mut out, &frame(args, vec![row], started))?;
        }
        if idle {
            out.flush()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let stats = agent.stop()?;
    let rest = take(&mut ring);
    show(rest, &mut summary, &mut interval, &mut out)?;
    writeln!(out)?;
    writeln!(out, "=== Summary ===")?;
    summary.write_table(&mut out, true)?;
    accounting(&mut out, &stats, Some(summary.total()))?;
    if keep {
        writeln!(
            out,
            "The ring is kept: nixl-telemetry stats {0}  (or read --peek {0}, top {0})",
            path.display()
        )?;
        if stats.events_lost > 0 {
            writeln!(
                out,
                "The ring filled up: a kept ring is not consumed, so {} events found no room; \
                 lower --rate or --seconds to keep them all",
                stats.events_lost
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The collector's loss accounting; with `read`, also that every exported event was read.
fn accounting(
    out: &mut impl Write,
    stats: &nixl_telemetry_core::CollectorStats,
    read: Option<u64>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "collector: {} accepted, {} dropped at staging ({} drop reports), {} exported, {} lost at the exporter",
        stats.events_accepted, stats.events_dropped, stats.drop_reports, stats.events_exported, stats.events_lost
    )?;
    let balanced = stats.events_exported + stats.events_lost
        == stats.events_accepted + stats.drop_reports
        && read.is_none_or(|r| r == stats.events_exported);
    let verdict = if balanced {
        "every event accounted for"
    } else {
        "MISMATCH"
    };
    match read {
        Some(r) => writeln!(
            out,
            "accounting: {verdict} (read {r} = exported {}; exported + lost = accepted + drop reports)",
            stats.events_exported
        ),
        None => writeln!(
            out,
            "accounting: {verdict} (exported + lost = accepted + drop reports)"
        ),
    }
}

/// The directories the Prometheus plug-in is looked for in: next to this executable (cargo's
/// `target/<profile>/`) and the installed layout's `lib/plugins`.
fn add_plugin_dirs() {
    let Some(bin) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
    else {
        return;
    };
    for dir in [bin.join("../lib/plugins"), bin.clone()] {
        if dir.join("libtelemetry_exporter_prometheus.so").is_file() {
            if let Ok(dir) = dir.canonicalize() {
                let _ = nixl_telemetry_core::plugin::add_plugin_dir(&dir);
            }
        }
    }
}

fn run_prometheus(args: &DemoArgs) -> CliResult {
    let port = args.port.unwrap_or(settings::PROMETHEUS_PORT.default_u16());
    // Read by the plug-in when the collector is created; no other thread runs yet.
    std::env::set_var(settings::PROMETHEUS_PORT.name, port.to_string());
    std::env::set_var(settings::PROMETHEUS_LOCAL.name, "1");
    add_plugin_dirs();
    let agent =
        Agent::start(args, ExporterChoice::Plugin("prometheus".into())).map_err(|e| match e {
            CliError::Telemetry(e) if e.status == nixl_telemetry_core::Status::BindFailed => {
                CliError::Failed(format!(
                    "port {port} is in use by another process: choose another with --port"
                ))
            }
            e => e,
        })?;
    let url =
        scrape::parse_url(&format!("http://127.0.0.1:{port}/metrics")).map_err(CliError::Failed)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "Demo agent '{}': {} threads x {} transfers/s for {} s, Prometheus endpoint {url}",
        args.agent, args.threads, args.rate, args.seconds
    )?;
    writeln!(out, "While it runs:  curl -s {url}")?;
    writeln!(out, "           or:  nixl-telemetry top {url}")?;
    out.flush()?;
    output::catch_ctrl_c();
    let mut source = Source::url(url);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    source.sample(Mode::Peek, 1.0, true);
    let mut view = LiveView::new();
    let mut frame_at = Instant::now();
    while Instant::now() < deadline && !output::interrupted() {
        output::sleep_unless_interrupted(
            Duration::from_secs(1)
                .saturating_sub(frame_at.elapsed())
                .min(deadline.saturating_duration_since(Instant::now())),
        );
        if frame_at.elapsed() >= Duration::from_secs(1) && !args.quiet {
            let seconds = frame_at.elapsed().as_secs_f64();
            frame_at = Instant::now();
            let rows = source.sample(Mode::Peek, seconds, false);
            view.show(&mut out, &frame(args, rows, started))?;
        }
    }
    let stats = agent.stop()?;
    writeln!(out)?;
    accounting(&mut out, &stats, None)?;
    out.flush()?;
    Ok(())
}
