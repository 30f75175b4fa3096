//! `nixl-telemetry top`: a live view of agents, refreshed in place every second like `top`:
//! per agent TX/RX bytes/s and requests/s, transfer-time p50/p99, post-time p50, errors/s (by
//! status below the table) and staging drops/s, plus a node total.
//!
//! Sources: rings (files or directories) and scrape URLs (`http://host:port/metrics`).
//! A ring is peeked by default, so `top` never takes events from the ring's reader; with
//! `--consume` it is the reader itself (then nothing else should read the ring). A scrape
//! endpoint gives cumulative counters and histogram buckets: rates are the deltas between two
//! scrapes, percentiles are interpolated inside the buckets as Prometheus'
//! `histogram_quantile` does. Plain ANSI escapes, no terminal library: `q` or Ctrl+C quits.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nixl_telemetry::event::EVENT_TYPE_COUNT;
use nixl_telemetry::EventType;

use crate::output::{self, CliError, CliResult};
use crate::rings::{self, Mode, RingSet};
use crate::scrape::{self, Identity, Totals, Url};
use crate::sketch::Sketch;
use crate::stats::Summary;

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

/// A distribution over one interval, from a ring's values or a histogram's bucket deltas.
#[derive(Clone, Debug, Default)]
pub enum Dist {
    /// Nothing observed.
    #[default]
    Empty,
    /// The values themselves (rings).
    Sketch(Sketch),
    /// Cumulative bucket counts by upper bound, ending with `+Inf` (scrapes).
    Buckets(Vec<(f64, f64)>),
    /// Merged from incompatible sources (sketches and buckets, or other bounds).
    Mixed,
}

impl Dist {
    fn merge(&mut self, other: &Dist) {
        *self = match (std::mem::take(self), other) {
            (d, Dist::Empty) => d,
            (Dist::Empty, o) => o.clone(),
            (Dist::Sketch(mut a), Dist::Sketch(b)) => {
                a.merge(b);
                Dist::Sketch(a)
            }
            (Dist::Buckets(mut a), Dist::Buckets(b))
                if a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0) =>
            {
                for (x, y) in a.iter_mut().zip(b) {
                    x.1 += y.1;
                }
                Dist::Buckets(a)
            }
            _ => Dist::Mixed,
        };
    }

    /// The `q` quantile, in the values' unit.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        match self {
            Dist::Empty | Dist::Mixed => None,
            Dist::Sketch(s) => s.quantile(q).map(|v| v as f64),
            Dist::Buckets(b) => bucket_quantile(b, q),
        }
    }
}

/// Prometheus' `histogram_quantile` over cumulative `(upper bound, count)` buckets: linear
/// interpolation inside the bucket holding the rank; the `+Inf` bucket gives the largest
/// finite bound.
fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last().map(|b| b.1)?;
    if total <= 0.0 || !buckets.last()?.0.is_infinite() {
        return None;
    }
    let rank = q * total;
    let (mut low, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank && count > below {
            if bound.is_infinite() {
                return Some(low);
            }
            return Some(low + (bound - low) * (rank - below) / (count - below));
        }
        (low, below) = (bound, count);
    }
    Some(low)
}

/// What one agent did per second over the last interval.
#[derive(Clone, Debug)]
pub struct Rates {
    /// Per event type: the sum of values per second (bytes, requests, errors, drops).
    pub per_s: [f64; EVENT_TYPE_COUNT],
    /// Transfer times (µs).
    pub xfer: Dist,
    /// Post times (µs).
    pub post: Dist,
}

impl Rates {
    /// The rates of the events summarised in `summary`, read over `seconds`.
    pub fn from_summary(summary: &Summary, seconds: f64) -> Rates {
        let mut per_s = [0.0; EVENT_TYPE_COUNT];
        for t in EventType::ALL {
            per_s[t as usize] = summary.sum_of(t) as f64 / seconds;
        }
        let dist = |t| {
            summary
                .sketch_of(t)
                .cloned()
                .map_or(Dist::Empty, Dist::Sketch)
        };
        Rates {
            per_s,
            xfer: dist(EventType::AgentXferTime),
            post: dist(EventType::AgentXferPostTime),
        }
    }

    /// The rates between two scrapes `seconds` apart (a counter that went down was reset: its
    /// new value is its increase).
    fn from_scrapes(before: Option<&Totals>, now: &Totals, seconds: f64) -> Rates {
        let increase = |old: f64, new: f64| if new >= old { new - old } else { new };
        let mut per_s = [0.0; EVENT_TYPE_COUNT];
        for (i, rate) in per_s.iter_mut().enumerate() {
            let old = before.map_or(0.0, |b| b.counters[i]);
            *rate = increase(old, now.counters[i]) / seconds;
        }
        let buckets = |old: Option<&Vec<(f64, f64)>>, new: &Vec<(f64, f64)>| {
            if new.is_empty() {
                return Dist::Empty;
            }
            let delta: Vec<(f64, f64)> = new
                .iter()
                .enumerate()
                .map(|(i, &(le, n))| {
                    let o = old
                        .and_then(|o| o.get(i))
                        .filter(|o| o.0 == le)
                        .map_or(0.0, |o| o.1);
                    (le, increase(o, n))
                })
                .collect();
            Dist::Buckets(delta)
        };
        Rates {
            per_s,
            xfer: buckets(before.map(|b| &b.xfer_buckets), &now.xfer_buckets),
            post: buckets(before.map(|b| &b.post_buckets), &now.post_buckets),
        }
    }

    fn add(&mut self, other: &Rates) {
        for (a, b) in self.per_s.iter_mut().zip(other.per_s) {
            *a += b;
        }
        self.xfer.merge(&other.xfer);
        self.post.merge(&other.post);
    }

    fn errors(&self) -> f64 {
        EventType::ALL
            .iter()
            .filter(|t| t.is_error())
            .map(|t| self.per_s[*t as usize])
            .sum()
    }
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// The agent (and the labels telling its series apart).
    pub name: String,
    /// Its rates; `None` before the first full interval or while it cannot be read.
    pub rates: Option<Rates>,
    /// Why it shows no rates, or a warning.
    pub note: Option<String>,
    /// A sum of other rows (a `prometheus_mp` node total): left out of the node total.
    pub aggregate: bool,
}

/// One screen.
pub struct Frame {
    /// The first line.
    pub title: String,
    /// One row per agent.
    pub rows: Vec<Row>,
    /// Lines shown below the table.
    pub notes: Vec<String>,
}

fn bytes_per_s(v: f64) -> String {
    let units = ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"];
    let mut v = v;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < units.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} {}", units[0])
    } else {
        format!("{v:.1} {}", units[unit])
    }
}

fn per_s(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e4 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.1}"),
    }
}

fn micros(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 1000.0 => format!("{v:.0} us"),
        Some(v) if v < 1e6 => format!("{:.1} ms", v / 1e3),
        Some(v) => format!("{:.2} s", v / 1e6),
    }
}

impl Frame {
    /// The frame's lines (without escapes).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.title.clone(), String::new()];
        let width = self
            .rows
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(0)
            .clamp(12, 40);
        lines.push(format!(
            "{:<width$} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
            "AGENT",
            "TX",
            "RX",
            "TX req/s",
            "RX req/s",
            "xfer p50",
            "xfer p99",
            "post p50",
            "err/s",
            "drops/s"
        ));
        let mut node: Option<Rates> = None;
        let mut counted = 0;
        let mut error_lines = Vec::new();
        let row_line = |name: &str, rates: Option<&Rates>, note: Option<&str>| {
            let Some(r) = rates else {
                return format!("{name:<width$} {}", note.unwrap_or("-"));
            };
            let p = |t: EventType| r.per_s[t as usize];
            let mut line = format!(
                "{name:<width$} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
                bytes_per_s(p(EventType::AgentTxBytes)),
                bytes_per_s(p(EventType::AgentRxBytes)),
                per_s(p(EventType::AgentTxRequestsNum)),
                per_s(p(EventType::AgentRxRequestsNum)),
                micros(r.xfer.quantile(0.5)),
                micros(r.xfer.quantile(0.99)),
                micros(r.post.quantile(0.5)),
                per_s(r.errors()),
                per_s(p(EventType::AgentTelemetryEventsDropped)),
            );
            if let Some(note) = note {
                line.push_str("  ");
                line.push_str(note);
            }
            line
        };
        for row in &self.rows {
            let shown = if row.aggregate {
                format!("{} (sum)", row.name)
            } else {
                row.name.clone()
            };
            lines.push(row_line(&shown, row.rates.as_ref(), row.note.as_deref()));
            let Some(r) = &row.rates else { continue };
            let by_status: Vec<String> = EventType::ALL
                .iter()
                .filter(|t| t.is_error() && r.per_s[**t as usize] > 0.0)
                .map(|t| {
                    format!(
                        "{} {}",
                        t.status_label().unwrap_or("?"),
                        per_s(r.per_s[*t as usize])
                    )
                })
                .collect();
            if !by_status.is_empty() {
                error_lines.push(format!("  {}: {}", row.name, by_status.join(", ")));
            }
            if !row.aggregate {
                counted += 1;
                match &mut node {
                    Some(n) => n.add(r),
                    None => node = Some(r.clone()),
                }
            }
        }
        if self.rows.len() > 1 {
            let name = format!("node ({counted} agents)");
            lines.push(row_line(&name, node.as_ref(), None));
        }
        if !error_lines.is_empty() {
            lines.push(String::new());
            lines.push("errors/s by status:".into());
            lines.extend(error_lines);
        }
        if !self.notes.is_empty() {
            lines.push(String::new());
            lines.extend(self.notes.iter().cloned());
        }
        lines
    }
}

/// Where rows come from.
pub enum Source {
    /// Rings, and what each one got since the last frame.
    Rings(RingSet, Vec<Summary>),
    /// A scrape endpoint, and its last scrape.
    Url {
        url: Url,
        last: Option<(Instant, std::collections::BTreeMap<Identity, Totals>)>,
    },
}

/// The display name of a scraped series: `agent_name`, with the other labels (but `hostname`,
/// unless the hosts differ) as `k=v`.
fn series_name(id: &Identity, show_host: bool) -> String {
    let agent = id
        .iter()
        .find(|(k, _)| k == "agent_name")
        .map_or("?", |(_, v)| v.as_str());
    let mut name = agent.to_owned();
    for (k, v) in id {
        if k == "agent_name" || (k == "hostname" && !show_host) {
            continue;
        }
        name.push_str(&format!(" {k}={v}"));
    }
    name
}

impl Source {
    /// A scrape endpoint.
    pub fn url(url: Url) -> Source {
        Source::Url { url, last: None }
    }

    /// Takes the rings' new events into the current frame's summaries. Called often between
    /// frames: a peeked ring shows only events still unread, so looking often sees the events
    /// another reader consumes soon after they arrive.
    pub fn collect(&mut self, mode: Mode) {
        let Source::Rings(set, summaries) = self else {
            return;
        };
        summaries.resize_with(set.rings.len(), Summary::default);
        for (ring, summary) in set.rings.iter_mut().zip(summaries) {
            let limit = ring.reader().map_or(0, |r| r.capacity() as usize);
            let _ = ring.take_batches(mode, limit, true, |events| {
                events.iter().for_each(|e| summary.add(e));
                Ok(())
            });
        }
    }

    /// Rows of the activity since the last call, which took `seconds` (no rates with
    /// `baseline`; a scrape endpoint's first call gives none either).
    pub fn sample(&mut self, mode: Mode, seconds: f64, baseline: bool) -> Vec<Row> {
        self.collect(mode);
        match self {
            Source::Rings(set, summaries) => {
                set.rescan();
                let mut rows = Vec::new();
                summaries.resize_with(set.rings.len(), Summary::default);
                for (ring, summary) in set.rings.iter_mut().zip(summaries) {
                    let summary = std::mem::take(summary);
                    let note = match ring.reader() {
                        None => Some("waiting for the ring".to_owned()),
                        Some(r) if mode == Mode::Peek && r.len() + 1 >= r.capacity() => Some(
                            "ring full: nothing drains it, its writer is losing events \
                             (use --consume to be its reader)"
                                .to_owned(),
                        ),
                        Some(_) => None,
                    };
                    let rates = (!baseline && ring.reader().is_some())
                        .then(|| Rates::from_summary(&summary, seconds));
                    rows.push(Row {
                        name: ring.name.clone(),
                        rates,
                        note,
                        aggregate: false,
                    });
                }
                rows
            }
            Source::Url { url, last } => match scrape::scrape(url) {
                Err(e) => vec![Row {
                    name: url.to_string(),
                    rates: None,
                    note: Some(format!("cannot scrape: {e}")),
                    aggregate: false,
                }],
                Ok(now) => {
                    let at = Instant::now();
                    let hosts: std::collections::BTreeSet<&str> = now
                        .keys()
                        .filter_map(|id| id.iter().find(|(k, _)| k == "hostname"))
                        .map(|(_, v)| v.as_str())
                        .collect();
                    let previous = last.as_ref();
                    let rows = now
                        .iter()
                        .map(|(id, totals)| {
                            let rates = previous.map(|(then, before)| {
                                let secs = at.duration_since(*then).as_secs_f64().max(1e-3);
                                Rates::from_scrapes(before.get(id), totals, secs)
                            });
                            // A label set contained in another one is a sum over it.
                            let aggregate = now.keys().any(|other| {
                                other.len() > id.len() && id.iter().all(|l| other.contains(l))
                            });
                            Row {
                                name: series_name(id, hosts.len() > 1),
                                rates,
                                note: None,
                                aggregate,
                            }
                        })
                        .collect::<Vec<_>>();
                    *last = Some((at, now));
                    if rows.is_empty() {
                        return vec![Row {
                            name: url.to_string(),
                            rates: None,
                            note: Some("no NIXL telemetry series at this endpoint".into()),
                            aggregate: false,
                        }];
                    }
                    rows
                }
            },
        }
    }
}

/// The terminal, in the state a full-screen view needs: keys read one at a time without echo
/// (Ctrl+C still raises SIGINT), the alternate screen and a hidden cursor; restored on drop.
struct Screen {
    saved: Option<libc::termios>,
}

fn is_tty(fd: libc::c_int) -> bool {
    // SAFETY: isatty takes a file descriptor and touches no memory of ours.
    unsafe { libc::isatty(fd) == 1 }
}

impl Screen {
    fn enter() -> Screen {
        let mut saved = None;
        if is_tty(0) {
            let mut t = std::mem::MaybeUninit::<libc::termios>::uninit();
            // SAFETY: tcgetattr writes a termios into the pointer it is given, which points to
            // storage of that type; it is read only when the call succeeded.
            if unsafe { libc::tcgetattr(0, t.as_mut_ptr()) } == 0 {
                // SAFETY: initialised by the successful tcgetattr above.
                let original = unsafe { t.assume_init() };
                let mut raw = original;
                raw.c_lflag &= !(libc::ICANON | libc::ECHO);
                raw.c_cc[libc::VMIN] = 0;
                raw.c_cc[libc::VTIME] = 0;
                // SAFETY: a valid termios for the terminal on fd 0.
                if unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) } == 0 {
                    saved = Some(original);
                }
            }
        }
        print!("\x1b[?1049h\x1b[?25l");
        let _ = std::io::stdout().flush();
        Screen { saved }
    }

    /// The terminal's size (columns, rows), if known.
    fn size() -> Option<(usize, usize)> {
        let mut ws = std::mem::MaybeUninit::<libc::winsize>::zeroed();
        // SAFETY: TIOCGWINSZ writes a winsize into the pointer, which points to one.
        let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, ws.as_mut_ptr()) } == 0;
        // SAFETY: zero-initialised, and filled in when the call succeeded.
        let ws = unsafe { ws.assume_init() };
        (ok && ws.ws_col > 0).then_some((ws.ws_col as usize, ws.ws_row as usize))
    }

    fn draw(&self, lines: &[String]) -> std::io::Result<()> {
        let (cols, rows) = Screen::size().unwrap_or((usize::MAX, usize::MAX));
        let mut text = String::from("\x1b[H");
        for line in lines.iter().take(rows.max(1)) {
            text.extend(line.chars().take(cols));
            text.push_str("\x1b[K\r\n");
        }
        text.push_str("\x1b[J");
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        if let Some(t) = &self.saved {
            // SAFETY: restores the termios read by `enter` on the same terminal.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

/// Waits until `deadline`, calling `tick` about every 50 ms; returns true when the user asked
/// to quit (q, or Ctrl+C).
fn wait_for_quit(deadline: Instant, keys: &mut bool, mut tick: impl FnMut()) -> bool {
    loop {
        tick();
        if output::interrupted() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let slice = (deadline - now).min(Duration::from_millis(50));
        if !*keys {
            std::thread::sleep(slice);
            continue;
        }
        let mut fd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        let ready = unsafe { libc::poll(&mut fd, 1, slice.as_millis() as libc::c_int) };
        if ready <= 0 {
            continue; // timeout, or EINTR (Ctrl+C: checked above)
        }
        let mut buf = [0u8; 64];
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            *keys = false; // end of input: no keys will come
            continue;
        }
        if buf[..n as usize]
            .iter()
            .any(|&b| b == b'q' || b == b'Q' || b == 3)
        {
            return true;
        }
    }
}

/// Parses the sources of the command line.
fn sources(args: &[String]) -> Result<Vec<Source>, CliError> {
    let mut out = Vec::new();
    let mut paths = Vec::new();
    for a in args {
        if a.contains("://") {
            let url = Url::parse(a).map_err(CliError::Usage)?;
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
    // The first look is the baseline: a ring's backlog and a scrape's totals are not rates.
    for s in &mut sources {
        if let Source::Rings(set, _) = s {
            for ring in &mut set.rings {
                ring.skip_backlog();
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_interpolate_like_prometheus() {
        let b = [(10.0, 2.0), (100.0, 4.0), (f64::INFINITY, 4.0)];
        assert_eq!(bucket_quantile(&b, 0.5), Some(10.0));
        assert_eq!(bucket_quantile(&b, 0.75), Some(55.0));
        assert_eq!(bucket_quantile(&b, 0.25), Some(5.0));
        let inf = [(10.0, 1.0), (f64::INFINITY, 3.0)];
        assert_eq!(bucket_quantile(&inf, 0.99), Some(10.0));
        assert_eq!(bucket_quantile(&[(f64::INFINITY, 0.0)], 0.5), None);
    }

    #[test]
    fn scrape_deltas_become_rates_and_rows_sum_into_the_node() {
        let mut a = Totals::default();
        a.counters[EventType::AgentTxBytes as usize] = 1000.0;
        a.xfer_buckets = vec![(10.0, 1.0), (f64::INFINITY, 1.0)];
        let mut b = a.clone();
        b.counters[EventType::AgentTxBytes as usize] = 3000.0;
        b.counters[EventType::AgentErrBackend as usize] = 4.0;
        b.xfer_buckets = vec![(10.0, 1.0), (f64::INFINITY, 5.0)];
        let r = Rates::from_scrapes(Some(&a), &b, 2.0);
        assert_eq!(r.per_s[EventType::AgentTxBytes as usize], 1000.0);
        assert_eq!(r.errors(), 2.0);
        assert_eq!(
            r.xfer.quantile(0.5),
            Some(10.0),
            "all four new in the +Inf bucket"
        );
        // A reset counter counts from zero.
        let reset = Rates::from_scrapes(Some(&b), &a, 1.0);
        assert_eq!(reset.per_s[EventType::AgentTxBytes as usize], 1000.0);
        let frame = Frame {
            title: "t".into(),
            rows: vec![
                Row {
                    name: "a".into(),
                    rates: Some(r.clone()),
                    note: None,
                    aggregate: false,
                },
                Row {
                    name: "b".into(),
                    rates: Some(r),
                    note: None,
                    aggregate: false,
                },
            ],
            notes: vec![],
        };
        let lines = frame.lines();
        let node = lines
            .iter()
            .find(|l| l.starts_with("node (2 agents)"))
            .unwrap();
        assert!(node.contains("2.0 KB/s"), "{node}");
        assert!(lines.iter().any(|l| l == "  a: backend 2.0"), "{lines:?}");
    }

    #[test]
    fn units() {
        assert_eq!(bytes_per_s(999.0), "999 B/s");
        assert_eq!(bytes_per_s(12_345_678.0), "12.3 MB/s");
        assert_eq!(micros(Some(150.0)), "150 us");
        assert_eq!(micros(Some(2500.0)), "2.5 ms");
        assert_eq!(micros(None), "-");
        assert_eq!(per_s(12345.0), "12.3k");
    }
}
