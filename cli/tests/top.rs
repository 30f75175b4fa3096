//! `nixl-telemetry top`: one frame (`--once`) from rings and from a scrape endpoint, and the
//! live view in a real terminal (tmux), quit with q and with Ctrl+C.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nixl_telemetry::{Event, EventType, RingWriter};

const BIN: &str = env!("CARGO_BIN_EXE_nixl-telemetry");

/// A writer adding one transfer's events every 10 ms until dropped.
struct Busy {
    ring: Arc<RingWriter>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(dir: &Path, name: &str) -> Busy {
        let ring = Arc::new(RingWriter::create(dir, name, 1 << 16).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (ring, stop) = (ring.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ring.push_batch(&[
                        Event::new(EventType::AgentXferPostTime, 8),
                        Event::new(EventType::AgentXferTime, 120),
                        Event::new(EventType::AgentTxBytes, 1 << 20),
                        Event::new(EventType::AgentTxRequestsNum, 1),
                        Event::new(EventType::AgentErrBackend, 1),
                    ]);
                    std::thread::sleep(Duration::from_millis(10));
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
        assert!(row.contains("MB/s") && row.contains("120 us"), "{row}");
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
    let left = nixl_telemetry::RingReader::open(dir.path().join("solo")).unwrap();
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
    // p50 in the bucket (0, 100], p99 in (100, 1000]: shown as the buckets, not as values
    // interpolated inside them (histogram_quantile would say 982 us for the p99).
    assert!(
        rank.contains(" <=100 us ") && rank.contains(" <=1.0 ms "),
        "{rank}"
    );
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
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "150",
        "-y",
        "40",
        &command,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

#[test]
fn live_view_in_a_terminal_quits_with_q() {
    quit_with("q", "q");
}

#[test]
fn live_view_in_a_terminal_quits_with_ctrl_c() {
    quit_with("c", "C-c");
}

/// A finished ring (its writer gone) has no activity in the interval: its row shows what the
/// ring holds, and says so, rather than `0 B/s` and `-`.
#[test]
fn once_on_a_finished_ring_shows_its_totals() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ring = RingWriter::create(dir.path(), "done", 1 << 10).unwrap();
        for _ in 0..10 {
            ring.push_batch(&[
                Event::new(EventType::AgentXferTime, 120),
                Event::new(EventType::AgentTxBytes, 1_000_000),
                Event::new(EventType::AgentTxRequestsNum, 1),
                Event::new(EventType::AgentErrBackend, 1),
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
    assert!(row.contains(" 120 us "), "{row}");
    // 10 requests and 10 errors: counts, not rates.
    assert_eq!(row.matches(" 10 ").count(), 2, "{row}");
    assert!(
        row.contains("idle for ") && row.contains("totals of the 40 events seen"),
        "{row}"
    );
    // Peeked: the ring still holds them.
    let left = nixl_telemetry::RingReader::open(dir.path().join("done")).unwrap();
    assert_eq!(left.len(), 40);
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
        row.contains(" <=100 us ") && row.contains(" <=1.0 ms "),
        "{row}"
    );
    assert!(
        row.contains("idle for ") && row.contains("totals since the exporter started"),
        "{row}"
    );
}
