//! `nixl-telemetry top`: a live view of agents, refreshed in place every second like `top`:
//! per agent TX/RX bytes/s and requests/s, the p50/p90/p99 of transfer time and of transfer
//! request size (TX and RX together), post-time p50, errors/s (by status below the table) and
//! staging drops/s, plus a node total.
//!
//! Sources: rings (files or directories) and scrape URLs (`http://host:port/metrics`).
//! A ring is peeked by default, so `top` never takes events from the ring's reader; with
//! `--consume` it is the reader itself (then nothing else should read the ring). A scrape
//! endpoint gives cumulative counters and histograms: rates are the deltas between two scrapes.
//! Percentiles come from native histograms (a ring's events of the interval observed into
//! them; a scrape's, asked for in the protobuf exposition, subtracted), estimated as PromQL's
//! `histogram_quantile` does; the node row merges its ranks' histograms first. A scrape
//! answered in text has classic buckets only: a percentile is then the bucket holding it
//! (`<=1.00 ms`), not a value interpolated inside it. A row with no activity in the last
//! interval (a finished ring, an idle agent) shows the totals seen so far instead, and says
//! so. The table keeps the columns that fit the terminal. Plain ANSI escapes, no terminal
//! library: `q` or Ctrl+C quits.
//!
//! - [`rates`]: the rate and percentile arithmetic;
//! - [`source`]: the rings and scrape endpoints rows come from;
//! - [`frame`]: rendering a frame as lines;
//! - [`screen`]: the terminal.

mod frame;
mod rates;
mod screen;
mod source;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::output::{self, CliError, CliResult};
use crate::rings::{self, Mode, RingSet};
use crate::scrape;
pub use frame::{Frame, Row};
pub use rates::{Observed, Rates};
use screen::{is_tty, wait_for_quit, Screen};

/// The width in columns of the terminal on standard output, if it is one.
pub fn terminal_width() -> Option<usize> {
    is_tty(1)
        .then(Screen::size)
        .flatten()
        .map(|(columns, _)| columns)
}
pub use source::Source;

/// Options of `top`.
#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// Ring files, directories of rings (rings created later are picked up), or scrape URLs
    /// (http://host:port/metrics of the prometheus, doca or prometheus_mp exporters).
    #[arg(required = true, value_name = "PATH|DIR|URL")]
    sources: Vec<String>,
    /// Print one frame (the activity of one interval) and exit, for scripts and tests.
    #[arg(long)]
    once: bool,
    /// Seconds between frames.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
    /// Be the rings' reader: consume their events instead of peeking (use it when nothing
    /// else reads the rings, or they fill up and their writers lose events).
    #[arg(long)]
    consume: bool,
}

/// Parses the sources of the command line.
fn sources(args: &[String]) -> Result<Vec<Source>, CliError> {
    let mut out = Vec::new();
    let mut paths = Vec::new();
    for a in args {
        if a.contains("://") {
            let url = scrape::parse_url(a).map_err(CliError::Usage)?;
            out.push(Source::url(url));
        } else {
            paths.push(PathBuf::from(a));
        }
    }
    if !paths.is_empty() {
        out.insert(0, Source::Rings(RingSet::open(&paths, true)?, Vec::new()));
    }
    Ok(out)
}

/// Runs `top`.
pub fn run(args: &TopArgs) -> CliResult {
    if !(args.interval.is_finite() && args.interval >= 0.05) {
        return Err(CliError::Usage(
            "--interval must be a number of seconds, at least 0.05".into(),
        ));
    }
    output::catch_ctrl_c();
    let interactive = !args.once && is_tty(1);
    if interactive {
        rings::hold_notes(true);
    }
    let mut sources = sources(&args.sources)?;
    let mode = if args.consume {
        Mode::Consume
    } else {
        Mode::Peek
    };
    let started = Instant::now();
    let interval = Duration::from_secs_f64(args.interval);
    // The first look is the baseline: a ring's backlog and a scrape's totals are not rates
    // (they are the totals an idle row shows).
    for s in &mut sources {
        s.sample(mode, args.interval, true);
    }
    let screen = interactive.then(Screen::enter);
    let mut keys = interactive && is_tty(0);
    let mut notes: Vec<String> = Vec::new();
    let mut last = Instant::now();
    let mut next = last + interval;
    loop {
        let tick = || sources.iter_mut().for_each(|s| s.collect(mode));
        if wait_for_quit(next, &mut keys, tick) {
            break;
        }
        let now = Instant::now();
        let seconds = now.duration_since(last).as_secs_f64().max(1e-3);
        last = now;
        next += interval;
        if next < now {
            next = now + interval;
        }
        let rows: Vec<Row> = sources
            .iter_mut()
            .flat_map(|s| s.sample(mode, seconds, false))
            .collect();
        notes.extend(rings::take_notes());
        let keep = notes.len().saturating_sub(5);
        notes.drain(..keep);
        let up = started.elapsed().as_secs();
        let frame = Frame {
            title: format!(
                "nixl-telemetry top - {} agents - every {:.1} s - up {:02}:{:02}:{:02}{}",
                rows.iter().filter(|r| !r.aggregate).count(),
                args.interval,
                up / 3600,
                up / 60 % 60,
                up % 60,
                if interactive { " - q quits" } else { "" }
            ),
            rows,
            notes: notes.clone(),
            width: screen
                .as_ref()
                .and_then(|_| Screen::size())
                .map(|(columns, _)| columns),
        };
        let lines = frame.lines();
        match &screen {
            Some(screen) => screen.draw(&lines)?,
            None => {
                let stdout = std::io::stdout();
                let mut out = stdout.lock();
                for line in &lines {
                    writeln!(out, "{line}")?;
                }
                if !args.once {
                    writeln!(out)?;
                }
                out.flush()?;
            }
        }
        if args.once {
            let nothing = frame.rows.iter().all(|r| r.rates.is_none());
            return if nothing {
                Err(CliError::Failed(
                    "no source could be read (see the frame)".into(),
                ))
            } else {
                Ok(())
            };
        }
    }
    drop(screen);
    rings::hold_notes(false);
    Ok(())
}
