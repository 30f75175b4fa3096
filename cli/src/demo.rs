//! `nixl-telemetry demo`: a simulated multi-threaded NIXL agent (random transfer sizes and
//! latencies, some errors, memory registrations) writing into a BUFFER ring, while this
//! process reads the ring live and finally prints the summary and the loss accounting.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nixl_telemetry::{Collector, Config, EventType, ExporterChoice, MetricMask, RingReader};

use crate::output::{self, CliError, CliResult};
use crate::stats::Summary;

/// Options of the demo.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Directory for the ring file (default: a fresh temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Agent name (the ring file's name).
    #[arg(long, default_value = "demo-agent")]
    agent: String,
    /// How long the simulated agent runs, in seconds.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Number of producer threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Transfers per second per thread.
    #[arg(long, default_value_t = 10)]
    rate: u32,
    /// Do not print each event, only the final summary.
    #[arg(long)]
    quiet: bool,
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
    let pause = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
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

/// Runs the demo.
pub fn run(args: &DemoArgs) -> CliResult {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        return Err(CliError::Usage(
            "--seconds must be a positive number".into(),
        ));
    }
    let (dir, temporary) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => {
            let d =
                std::env::temp_dir().join(format!("nixl-telemetry-demo-{}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            (d, true)
        }
    };
    let result = run_in(args, &dir);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn run_in(args: &DemoArgs, dir: &std::path::Path) -> CliResult {
    let config = Config {
        buffer_size: 4096,
        run_interval: Duration::from_millis(100),
        exporter: ExporterChoice::Buffer(dir.to_owned()),
        enabled_metrics: MetricMask::ALL,
    };
    let collector = Arc::new(Collector::new(&args.agent, config)?);
    let path = dir.join(&args.agent);
    let mut ring = RingReader::open(&path)?;
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

    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..args.threads.max(1))
        .map(|i| {
            let (c, stop) = (collector.clone(), stop.clone());
            let seed =
                0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1) ^ std::process::id() as u64;
            let rate = args.rate;
            std::thread::spawn(move || simulate(&c, seed, rate, &stop))
        })
        .collect();

    output::catch_ctrl_c();
    let mut summary = Summary::default();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut show = |event: nixl_telemetry::Event, out: &mut std::io::StdoutLock| -> CliResult {
        summary.add(&event);
        if !args.quiet {
            output::write_event_block(out, &event)?;
        }
        Ok(())
    };
    while Instant::now() < deadline && !output::interrupted() {
        match ring.pop() {
            Some(e) => show(e, &mut out)?,
            None => {
                out.flush()?;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        let _ = p.join();
    }
    let collector = Arc::try_unwrap(collector)
        .map_err(|_| CliError::Usage("producer threads still hold the collector".into()))?;
    let stats = collector.close(); // stops the flush thread and flushes what is still staged
    while let Some(e) = ring.pop() {
        show(e, &mut out)?;
    }
    writeln!(out)?;
    writeln!(out, "=== Summary ===")?;
    summary.write_table(&mut out)?;
    writeln!(
        out,
        "collector: {} accepted, {} dropped at staging ({} drop reports), {} exported, {} lost at the ring",
        stats.events_accepted, stats.events_dropped, stats.drop_reports, stats.events_exported, stats.events_lost
    )?;
    let balanced = stats.events_exported + stats.events_lost
        == stats.events_accepted + stats.drop_reports
        && summary.total() == stats.events_exported;
    writeln!(
        out,
        "accounting: {} (read {} = exported {}; exported + lost = accepted + drop reports)",
        if balanced {
            "every event accounted for"
        } else {
            "MISMATCH"
        },
        summary.total(),
        stats.events_exported
    )?;
    out.flush()?;
    Ok(())
}
