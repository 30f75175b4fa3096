//! `nixl-telemetry top`: one frame (`--once`) from rings and from a scrape endpoint, and the
//! live view in a real terminal (tmux), quit with q and with Ctrl+C; the p50/p90/p99 of
//! transfer time and size from native histograms, per rank and for the node, from rings and
//! from the `prometheus` plug-in's protobuf exposition, against the exact quantiles.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nixl_telemetry_core::{Event, EventType, RingWriter};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::transfers::{exact_quantile, relative_error};

const BIN: &str = env!("CARGO_BIN_EXE_nixl-telemetry");

/// A writer adding one transfer's events every 10 ms until dropped.
struct Busy {
    ring: Arc<RingWriter>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(dir: &Path, name: &str) -> Busy {
        let batch = vec![
            Event::new(EventType::AgentXferPostTime, 8),
            Event::new(EventType::AgentXferTime, 120),
            Event::new(EventType::AgentTxBytes, 1 << 20),
            Event::new(EventType::AgentTxRequestsNum, 1),
            Event::new(EventType::AgentErrBackend, 1),
        ];
        Busy::start_with(dir, name, batch, Duration::from_millis(10))
    }

    /// A writer adding `batch` every `period` until dropped.
    fn start_with(dir: &Path, name: &str, batch: Vec<Event>, period: Duration) -> Busy {
        let ring = Arc::new(RingWriter::create(dir, name, 1 << 16).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (ring, stop) = (ring.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ring.push_batch(&batch);
                    std::thread::sleep(period);
                }
            })
        };
        Busy {
            ring,
            stop,
            thread: Some(thread),
        }
    }

    fn path(&self) -> PathBuf {
        self.ring.path().to_owned()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The cell of percentile `column` (`xfer p50`, ...) in the row starting with `row`, in a
/// frame's `lines` (`None` for `-`): cells are 9 wide, right-aligned under their headers.
fn cell(lines: &[&str], row: &str, column: &str) -> Option<String> {
    let header = lines.iter().find(|l| l.starts_with("AGENT "))?;
    let line = lines.iter().find(|l| l.starts_with(row))?;
    let end = header.find(column)? + column.len();
    let text: String = line.chars().skip(end - 9).take(9).collect();
    Some(text.trim().to_owned()).filter(|t| !t.is_empty() && t != "-")
}

/// A cell's `12.3 ms`, `4.10 KB`, in microseconds or bytes.
fn value_of(cell: &str) -> f64 {
    let (number, unit) = cell.split_once(' ').unwrap_or_else(|| panic!("{cell}"));
    let scale = match unit {
        "us" | "B" => 1.0,
        "ms" | "KB" => 1e3,
        "s" | "MB" => 1e6,
        "GB" => 1e9,
        _ => panic!("unit of {cell}"),
    };
    number.parse::<f64>().unwrap_or_else(|_| panic!("{cell}")) * scale
}

/// The largest relative error of a percentile shown by `top` from a native histogram:
/// PromQL's interpolation stays inside the bucket of the exact value (its width at the
/// default schema, 9.05%), and the cell rounds to three significant digits (0.5%).
fn shown_bound() -> f64 {
    bucket_width_bound(DEFAULT_SCHEMA) + 0.005
}

fn once(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(["top", "--once", "--interval", "0.5"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn once_from_rings_peeks_and_shows_rates_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let a = Busy::start(dir.path(), "rank-0");
    let b = Busy::start(dir.path(), "rank-1");
    let (code, out, err) = once(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("nixl-telemetry top - 2 agents"),
        "{out}"
    );
    assert!(lines.iter().any(|l| l.starts_with("AGENT ")), "{out}");
    for name in ["rank-0", "rank-1", "node (2 agents)"] {
        let row = lines
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(row.contains("MB/s"), "{row}");
        // Every transfer took 120 us: each percentile is within a bucket's width of it.
        for column in ["xfer p50", "xfer p90", "xfer p99"] {
            let shown = cell(&lines, name, column).unwrap_or_else(|| panic!("{out}"));
            assert!(
                relative_error(value_of(&shown), 120.0) <= shown_bound(),
                "{name} {column}: {shown}"
            );
        }
        let size = cell(&lines, name, "size p50").unwrap_or_else(|| panic!("{out}"));
        assert!(
            relative_error(value_of(&size), 1048576.0) <= shown_bound(),
            "{size}"
        );
    }
    assert!(out.contains("errors/s by status:"), "{out}");
    assert!(
        lines.iter().any(|l| l.starts_with("  rank-0: backend ")),
        "{out}"
    );
    // Peeked: the rings still hold every event.
    assert!(!a.ring.is_empty() && !b.ring.is_empty());
    drop((a, b));
}

#[test]
fn once_with_consume_is_the_rings_reader() {
    let dir = tempfile::tempdir().unwrap();
    let a = Busy::start(dir.path(), "solo");
    // A backlog that a peeking top would leave in the ring.
    let backlog = vec![Event::new(EventType::AgentRxBytes, 1); 20_000];
    assert_eq!(a.ring.push_batch(&backlog), backlog.len());
    let (code, out, err) = once(&["--consume", a.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    drop(a);
    let left = nixl_telemetry_core::RingReader::open(dir.path().join("solo")).unwrap();
    // Only what was written after top's last look is left (about 5 events per 10 ms).
    assert!(left.len() < 20_000, "{}", left.len());
}

/// Serves `bodies` to successive GET requests (the last one again), on a thread that stops
/// after `bodies.len() + 2` requests.
fn endpoint(bodies: Vec<String>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for i in 0..bodies.len() + 2 {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            // The whole request head, then the answer.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let body = &bodies[i.min(bodies.len() - 1)];
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn exposition(tx: u64, backend: u64, buckets: [u64; 3]) -> String {
    let rank = "agent_name=\"agent-x\",hostname=\"h\",pid=\"7\"";
    let total = "agent_name=\"agent-x\",hostname=\"h\"";
    let mut s = String::from("# TYPE agent_tx_bytes_total counter\n");
    for labels in [rank, total] {
        s += &format!("agent_tx_bytes_total{{{labels}}} {tx}\n");
        s += &format!("agent_errors_total{{{labels},status=\"backend\"}} {backend}\n");
        for (le, n) in ["100", "1000", "+Inf"].iter().zip(buckets) {
            s += &format!("agent_xfer_time_us_bucket{{{labels},le=\"{le}\"}} {n}\n");
        }
    }
    s
}

#[test]
fn once_from_a_scrape_endpoint_uses_counter_deltas_and_buckets() {
    let port = endpoint(vec![
        exposition(1000, 1, [0, 0, 0]),
        exposition(1_001_000, 5, [2, 4, 4]),
    ]);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let (code, out, err) = once(&[&url]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let rank = lines
        .iter()
        .find(|l| l.starts_with("agent-x pid=7"))
        .unwrap_or_else(|| panic!("{out}"));
    // A text page (no native histograms): p50 in the bucket (0, 100], p99 in (100, 1000],
    // shown as the buckets, not as values interpolated inside them (histogram_quantile would
    // say 982 us for the p99), and no sizes.
    assert_eq!(
        cell(&lines, "agent-x pid=7", "xfer p50").unwrap(),
        "<=100 us"
    );
    assert_eq!(
        cell(&lines, "agent-x pid=7", "xfer p99").unwrap(),
        "<=1.00 ms"
    );
    assert_eq!(cell(&lines, "agent-x pid=7", "size p50"), None);
    assert!(!rank.contains("982"), "{rank}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<=x, >x: the percentile lies in the histogram bucket")),
        "{out}"
    );
    assert!(rank.contains("MB/s"), "{rank}");
    // The label set without pid is a sum of the other: shown, not added to the node total.
    assert!(
        lines.iter().any(|l| l.starts_with("agent-x (sum)")),
        "{out}"
    );
    assert!(out.starts_with("nixl-telemetry top - 1 agents"), "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  agent-x pid=7: backend ")),
        "{out}"
    );
}

/// A `prometheus_mp` page as `serve` with node totals serves it: two ranks of job 100 on one
/// host, with the labels that make 66-character names, and the node total (no `agent_name`).
fn node_page() -> String {
    let ranks = [("1234567", "0"), ("1234568", "1")].map(|(pid, rank)| {
        format!(
            "agent_name=\"prefill\",hostname=\"gpu-node-017\",pid=\"{pid}\",\
             agent_instance=\"0\",local_rank=\"{rank}\",slurm_job_id=\"100\""
        )
    });
    let total = "hostname=\"gpu-node-017\",slurm_job_id=\"100\"".to_owned();
    let mut s = String::from("# TYPE agent_tx_bytes_total counter\n");
    for (labels, n) in [(&ranks[0], 1), (&ranks[1], 2), (&total, 3)] {
        s += &format!("agent_tx_bytes_total{{{labels}}} {}\n", n * 1_000_000);
        for (le, count) in ["100", "1000", "+Inf"].iter().zip([n, 2 * n, 2 * n]) {
            s += &format!("agent_xfer_time_us_bucket{{{labels},le=\"{le}\"}} {count}\n");
        }
    }
    s
}

/// An idle node page (its counters do not move) in a 200-column terminal, then at 120 and 80:
/// the node total reads `all agents slurm_job_id=100 (sum)`, explained under the table; at 200
/// columns every column and each row's idle note whole (below its row: 66 + 131 columns of
/// numbers leave no room beside it); narrower, the first columns, the names shortened in the
/// middle when the screen needs it, and the notes still whole.
#[test]
fn live_view_fits_long_names_and_idle_notes_to_the_terminal() {
    let Some(tmux) = Tmux::new("wide") else {
        return;
    };
    let port = endpoint(vec![node_page(); 2000]);
    tmux.start(
        200,
        &format!("{BIN} top --interval 0.2 http://127.0.0.1:{port}/metrics; sleep 60"),
    );
    let note = "totals since the exporter started";
    let rank0 = "prefill pid=1234567 agent_instance=0 local_rank=0 slurm_job_id=100";
    let screen = tmux.wait("every row's idle note", |s| s.matches(note).count() == 3);
    let lines: Vec<&str> = screen.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("AGENT ")).unwrap();
    for column in ["TX req", "post p50", "errors", "drops"] {
        assert!(header.contains(column), "{screen}");
    }
    assert!(lines.iter().any(|l| l.starts_with(rank0)), "{screen}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("all agents slurm_job_id=100 (sum) ")),
        "{screen}"
    );
    assert!(!lines.iter().any(|l| l.starts_with('?')), "{screen}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("(sum): a total its exporter adds")),
        "{screen}"
    );
    for (width, names_whole) in [(120, true), (80, false)] {
        let out = tmux.run(&[
            "resize-window",
            "-t",
            "t",
            "-x",
            &width.to_string(),
            "-y",
            "40",
        ]);
        assert!(out.status.success());
        let screen = tmux.wait(&format!("the {width}-column frame"), |s| {
            // Laid out for this width: a frame drawn before the resize is only cut by the
            // terminal, which leaves no whole "xfer p50", or "TX req" still there.
            s.lines()
                .any(|l| l.starts_with("AGENT ") && l.contains("xfer p50") && !l.contains("TX req"))
                && s.matches(note).count() == 3
        });
        let lines: Vec<&str> = screen.lines().collect();
        let header = lines.iter().find(|l| l.starts_with("AGENT ")).unwrap();
        assert!(header.contains("xfer p50"), "{width}: {screen}");
        assert_eq!(
            lines.iter().any(|l| l.starts_with(rank0)),
            names_whole,
            "{width}: {screen}"
        );
        if !names_whole {
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("prefill pid=123") && l.contains("…")),
                "{width}: {screen}"
            );
        }
    }
}

#[test]
fn once_reports_an_unreachable_source_and_fails() {
    let port = nixl_telemetry_test_support::free_port();
    let (code, out, _) = once(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cannot scrape"), "{out}");
    let (code, _, err) = once(&["https://example.invalid/metrics"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("https is not supported"), "{err}");
}

/// tmux on its own server socket (never the user's), killed at the end.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new(tag: &str) -> Option<Tmux> {
        let found = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var_os("NIXL_TELEMETRY_REQUIRE_TMUX").is_none(),
                "tmux is not installed (apt-get install tmux); scripts/test.sh installs it"
            );
            eprintln!("skipping: tmux is not installed (apt-get install tmux)");
            return None;
        }
        Some(Tmux {
            socket: format!("nixl-top-test-{}-{tag}", std::process::id()),
        })
    }

    /// Starts session `t`, `width` columns by 40 rows, running `command`.
    fn start(&self, width: u16, command: &str) {
        let width = width.to_string();
        let out = self.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &width,
            "-y",
            "40",
            command,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// Waits until the screen satisfies `done` (panics after 60 s).
    fn wait(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Runs `top` on `ring` in a 150x40 tmux pane, presses `key`, and checks the exit status and
/// that the terminal's normal screen is back.
fn quit_with(tag: &str, key: &str) {
    let Some(tmux) = Tmux::new(tag) else { return };
    let dir = tempfile::tempdir().unwrap();
    let busy = Busy::start(dir.path(), "live-agent");
    let command = format!(
        "{BIN} top {}; echo \"top exited with $?\"; sleep 60",
        busy.path().display()
    );
    tmux.start(150, &command);
    // A frame with rates, refreshed in place.
    let screen = tmux.wait("a frame with rates", |s| {
        s.lines()
            .any(|l| l.starts_with("live-agent") && l.contains("MB/s"))
    });
    assert!(
        screen.starts_with("nixl-telemetry top - 1 agents"),
        "{screen}"
    );
    assert!(screen.contains("q quits"), "{screen}");
    let first_up = screen.lines().next().unwrap().to_owned();
    tmux.wait("the next frame", |s| {
        s.lines().next() != Some(first_up.as_str())
    });
    let out = tmux.run(&["send-keys", "-t", "t", key]);
    assert!(out.status.success());
    let screen = tmux.wait("top to exit", |s| s.contains("top exited with"));
    assert!(screen.contains("top exited with 0"), "{screen}");
    assert!(
        !screen.contains("AGENT"),
        "the normal screen is restored: {screen}"
    );
}

/// One round of transfers with known times (us) and sizes (bytes), TX and RX in turn: 40%,
/// 45%, 10% and 5% of them on four plateaus, so that the p50, p90 and p99 of any number of
/// whole rounds (and of rounds of several ranks together) lie well inside one plateau
/// (1.2 ms and 70 kB, 9 ms and 1.2 MB, 70 ms and 20 MB): an interval's exact quantiles are the
/// round's.
fn round() -> Vec<(u64, u64, bool)> {
    let plateaus = [
        (150, 5_000, 8),
        (1_200, 70_000, 9),
        (9_000, 1_200_000, 2),
        (70_000, 20_000_000, 1),
    ];
    plateaus
        .iter()
        .flat_map(|&(time, size, n)| std::iter::repeat_n((time, size), n))
        .enumerate()
        .map(|(i, (time, size))| (time, size, i % 2 == 0))
        .collect()
}

/// A round's events, as an agent records its transfers.
fn round_events() -> Vec<Event> {
    round()
        .into_iter()
        .flat_map(|(time, size, tx)| {
            let (bytes, requests) = if tx {
                (EventType::AgentTxBytes, EventType::AgentTxRequestsNum)
            } else {
                (EventType::AgentRxBytes, EventType::AgentRxRequestsNum)
            };
            [
                Event::new(EventType::AgentXferTime, time),
                Event::new(bytes, size),
                Event::new(requests, 1),
            ]
        })
        .collect()
}

/// The percentile columns and the exact quantiles of a round's times and sizes.
fn exact_percentiles() -> Vec<(&'static str, f64)> {
    let mut times: Vec<u64> = round().iter().map(|t| t.0).collect();
    let mut sizes: Vec<u64> = round().iter().map(|t| t.1).collect();
    times.sort_unstable();
    sizes.sort_unstable();
    let exact = [
        ("xfer p50", exact_quantile(&times, 0.5)),
        ("xfer p90", exact_quantile(&times, 0.9)),
        ("xfer p99", exact_quantile(&times, 0.99)),
        ("size p50", exact_quantile(&sizes, 0.5)),
        ("size p90", exact_quantile(&sizes, 0.9)),
        ("size p99", exact_quantile(&sizes, 0.99)),
    ];
    // The plateaus, as the round's comment says.
    let values: Vec<f64> = exact.iter().map(|e| e.1).collect();
    assert_eq!(
        values,
        [1200.0, 9000.0, 70000.0, 70000.0, 1_200_000.0, 20_000_000.0]
    );
    exact.to_vec()
}

/// Waits for a frame of `top` in `tmux` showing every percentile of `rows`, and checks each
/// against the exact quantiles of a round. Returns the screen.
fn check_percentiles(tmux: &Tmux, rows: &[&str]) -> String {
    let exact = exact_percentiles();
    let screen = tmux.wait("percentiles of every row", |s| {
        let lines: Vec<&str> = s.lines().collect();
        rows.iter().all(|row| {
            exact
                .iter()
                .all(|(column, _)| cell(&lines, row, column).is_some())
        })
    });
    let lines: Vec<&str> = screen.lines().collect();
    for row in rows {
        for (column, exact) in &exact {
            let shown = cell(&lines, row, column).unwrap();
            assert!(
                !shown.starts_with(['<', '>']),
                "{row} {column}: a bucket, not a native estimate\n{screen}"
            );
            let error = relative_error(value_of(&shown), *exact);
            assert!(
                error <= shown_bound(),
                "{row} {column}: {shown} vs exact {exact} ({:.2}%)\n{screen}",
                error * 100.0
            );
        }
    }
    screen
}

/// Two ranks' rings in a 150-column terminal: the p50/p90/p99 of transfer time and size of
/// each rank and of the node (their histograms merged) match the exact quantiles within the
/// bound; at 80 columns, the rates and the transfer-time percentiles remain.
#[test]
fn live_view_shows_native_percentiles_of_rings_per_rank_and_node() {
    let Some(tmux) = Tmux::new("rings") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let period = Duration::from_millis(5);
    let ranks = [
        Busy::start_with(dir.path(), "rank-0", round_events(), period),
        Busy::start_with(dir.path(), "rank-1", round_events(), period),
    ];
    // A backlog of other transfers (10 us, 100 B) before top starts: its first look takes
    // them as the baseline, not as the first interval's.
    let backlog: Vec<Event> = (0..5000)
        .flat_map(|_| {
            [
                Event::new(EventType::AgentXferTime, 10),
                Event::new(EventType::AgentTxBytes, 100),
            ]
        })
        .collect();
    for rank in &ranks {
        assert_eq!(rank.ring.push_batch(&backlog), backlog.len());
    }
    let command = format!("{BIN} top --consume {}; sleep 60", dir.path().display());
    tmux.start(150, &command);
    let screen = check_percentiles(&tmux, &["rank-0 ", "rank-1 ", "node (2 agents)"]);
    assert!(
        screen.starts_with("nixl-telemetry top - 2 agents"),
        "{screen}"
    );
    assert!(!screen.contains("<=x, >x"), "{screen}");
    // Narrower: the columns that fit, the first ones kept.
    let out = tmux.run(&["resize-window", "-t", "t", "-x", "80", "-y", "40"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The frame drawn before the resize is cut by the terminal; the next one is laid out
    // for 80 columns.
    let narrow = tmux.wait("the 80-column frame", |s| {
        s.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>().join(" ")
                == "AGENT TX RX xfer p50 xfer p90 xfer p99 size p50"
        })
    });
    assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
    drop(ranks);
}

/// The `prometheus` plug-in with native histograms on, two agents in one process: `top`
/// scrapes its protobuf exposition and shows each rank's and the node's p50/p90/p99 of
/// transfer time and size within the bound of the exact quantiles.
#[test]
fn live_view_shows_native_percentiles_of_a_prometheus_scrape() {
    let Some(tmux) = Tmux::new("prom") else {
        return;
    };
    // The plug-in's settings, read when an agent is created (then cleared).
    const VARS: [&str; 3] = [
        "NIXL_TELEMETRY_NATIVE_HISTOGRAMS",
        "NIXL_TELEMETRY_PROMETHEUS_PORT",
        "NIXL_TELEMETRY_PROMETHEUS_LOCAL",
    ];
    let serial = nixl_telemetry_test_support::serial(&VARS);
    let plugins = nixl_telemetry_test_support::built_plugins(&["prometheus"]);
    nixl_telemetry_core::plugin::add_plugin_dir(&plugins).unwrap();
    let port = nixl_telemetry_test_support::free_port();
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true");
    std::env::set_var("NIXL_TELEMETRY_PROMETHEUS_PORT", port.to_string());
    std::env::set_var("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "true");
    let mut config = nixl_telemetry_test_support::plugin_config("prometheus");
    config.buffer_size = 4096;
    let agents: Vec<nixl_telemetry_core::Collector> = ["rank-0", "rank-1"]
        .iter()
        .map(|name| nixl_telemetry_core::Collector::new(name, config.clone()).unwrap())
        .collect();
    drop(serial);
    // Earlier transfers (10 us, 100 B), many more than the test adds: in the cumulative
    // histograms, not in the increase between two scrapes that top shows.
    for agent in &agents {
        for i in 0..50_000 {
            agent.add_xfer_stats(10, true, 100, 1);
            if i % 500 == 499 {
                agent.flush();
            }
        }
        agent.flush();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for agent in &agents {
                    for (time, size, tx) in round() {
                        agent.add_xfer_stats(time, tx, size, time / 4);
                    }
                    agent.flush();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    tmux.start(
        150,
        &format!("{BIN} top http://127.0.0.1:{port}/metrics; sleep 60"),
    );
    let screen = check_percentiles(&tmux, &["rank-0 ", "rank-1 ", "node (2 agents)"]);
    // Post times are native histograms too: no classic bucket anywhere.
    assert!(!screen.contains("<=x, >x"), "{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    let post = cell(&lines, "rank-0 ", "post p50").unwrap();
    // A quarter of each transfer's time: the p50 is 1200 / 4 = 300 us.
    assert!(
        relative_error(value_of(&post), 300.0) <= shown_bound(),
        "{post}"
    );
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

#[test]
fn live_view_in_a_terminal_quits_with_q() {
    quit_with("q", "q");
}

#[test]
fn live_view_in_a_terminal_quits_with_ctrl_c() {
    quit_with("c", "C-c");
}

/// A finished ring (its writer gone) has no activity in the interval: its row shows what the
/// ring holds, and says so, rather than `0 B/s` and `-`. In both ring layouts (version 5: NIXL's
/// open pull request #2018), a stalled transfer (its #2047) counting as an error.
#[test]
fn once_on_a_finished_ring_shows_its_totals() {
    for layout in nixl_telemetry_core::ring::layout::LAYOUTS {
        a_finished_ring_shows_its_totals(layout);
    }
}

fn a_finished_ring_shows_its_totals(layout: nixl_telemetry_core::ring::layout::Layout) {
    let dir = tempfile::tempdir().unwrap();
    {
        let ring = RingWriter::create_with(dir.path(), "done", 1 << 10, layout).unwrap();
        for i in 0..10 {
            let error = if i % 2 == 0 {
                EventType::AgentErrBackend
            } else {
                EventType::AgentErrXferStalled
            };
            ring.push_batch(&[
                Event::new(EventType::AgentXferTime, 120),
                Event::new(EventType::AgentTxBytes, 1_000_000),
                Event::new(EventType::AgentTxRequestsNum, 1),
                Event::new(error, 1),
            ]);
        }
    }
    let (code, out, err) = once(&[dir.path().join("done").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("done "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(" 10.0 MB ") && !row.contains("B/s"), "{row}");
    let lines: Vec<&str> = out.lines().collect();
    let p50 = cell(&lines, "done ", "xfer p50").unwrap_or_else(|| panic!("{out}"));
    assert!(
        relative_error(value_of(&p50), 120.0) <= shown_bound(),
        "{row}"
    );
    // 10 requests and 10 errors: counts, not rates.
    assert_eq!(row.matches(" 10 ").count(), 2, "{layout}: {row}");
    assert!(
        row.contains("idle for ") && row.contains("totals of the 40 events seen"),
        "{row}"
    );
    // Peeked: the ring still holds them.
    let left = nixl_telemetry_core::RingReader::open(dir.path().join("done")).unwrap();
    assert_eq!((left.len(), left.header().version), (40, layout.version));
}

/// An endpoint whose counters did not move: the totals since the exporter started.
#[test]
fn once_on_an_idle_scrape_endpoint_shows_its_totals() {
    let body = exposition(1_000_000, 3, [2, 4, 4]);
    let port = endpoint(vec![body.clone(), body]);
    let (code, out, err) = once(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert_eq!(code, 0, "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("agent-x pid=7"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(" 1.0 MB ") && !row.contains("B/s"), "{row}");
    assert!(
        row.contains(" <=100 us ") && row.contains(" <=1.00 ms "),
        "{row}"
    );
    assert!(
        row.contains("idle for ") && row.contains("totals since the exporter started"),
        "{row}"
    );
}
