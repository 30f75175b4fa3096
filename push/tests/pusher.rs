//! The push loop against a scripted receiver on 127.0.0.1: intervals, the last push at drop,
//! refused pushes (no retries; a duplicate or out-of-order refusal says the identity may be
//! shared), Retry-After, backoff while the receiver is down, a receiver that never answers,
//! the last push bounded whatever the receiver does, and an encoder that panics. And the scale benchmark's smoke run
//! (`examples/scale.rs`, two simulated nodes against a real Prometheus for two seconds), so that
//! `scripts/bench-scale.sh` cannot break unnoticed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, Once};
use std::time::{Duration, Instant};

use nixl_telemetry_push::{
    AgentPush, Body, Client, Payload, PushConfig, PushStatsSnapshot, Pusher, Target,
};
use nixl_telemetry_test_support::receiver::{Answer, Receiver};

/// Every log message of the process (each test names its exporter differently).
static LOG: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct TestLogger;
impl log::Log for TestLogger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        LOG.lock().unwrap().push((r.level(), r.args().to_string()));
    }
    fn flush(&self) {}
}

fn install_logger() {
    static LOGGER: Once = Once::new();
    LOGGER.call_once(|| {
        let _ = log::set_logger(&TestLogger);
        log::set_max_level(log::LevelFilter::Debug);
    });
}

/// The messages of exporter `name` at `level`.
fn logged(level: log::Level, name: &str) -> Vec<String> {
    LOG.lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == level && m.starts_with(&format!("{name}:")))
        .map(|(_, m)| m.clone())
        .collect()
}

fn warnings(name: &str) -> Vec<String> {
    logged(log::Level::Warn, name)
}

/// A payload whose body is the value of a shared counter (the "cumulative state"), recording
/// the value last accepted and the `exits` counter each build was given.
struct Counter {
    value: Arc<AtomicU64>,
    built: u64,
    accepted: Arc<AtomicU64>,
    exits: Arc<Mutex<Vec<u64>>>,
}

impl Payload for Counter {
    fn build(&mut self, pushes: &nixl_telemetry_push::PushStatsSnapshot) -> Body {
        self.exits.lock().unwrap().push(pushes.exits);
        self.built = self.value.load(Ordering::SeqCst);
        Body {
            bytes: self.built.to_string().into_bytes(),
            content_type: "text/plain",
            content_encoding: None,
            headers: &[("X-Test", "1")],
        }
    }
    fn sent(&mut self, _answer: &[u8]) {
        self.accepted.store(self.built, Ordering::SeqCst);
    }
}

struct Setup {
    pusher: Pusher,
    value: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
    /// The `exits` counter of each build, in order.
    exits: Arc<Mutex<Vec<u64>>>,
}

fn start(name: &str, url: &str, interval_ms: u64, final_ms: u64) -> Setup {
    start_with(name, url, interval_ms, 2000, final_ms)
}

/// [`start`] with a push timeout of `timeout_ms`.
fn start_with(name: &str, url: &str, interval_ms: u64, timeout_ms: u64, final_ms: u64) -> Setup {
    install_logger();
    let mut target = Target::new(url.parse().unwrap(), Duration::from_millis(timeout_ms));
    target
        .headers
        .push(("X-Scope-OrgID".into(), "tenant".into()));
    let value = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(u64::MAX));
    let exits = Arc::new(Mutex::new(Vec::new()));
    let pusher = Pusher::start(
        Client::new(target).unwrap(),
        Box::new(Counter {
            value: value.clone(),
            built: 0,
            accepted: accepted.clone(),
            exits: exits.clone(),
        }),
        PushConfig {
            name: name.into(),
            interval: Duration::from_millis(interval_ms),
            timeout: Duration::from_millis(timeout_ms),
            final_timeout: Duration::from_millis(final_ms),
            final_setting: FINAL_SETTING,
        },
    )
    .unwrap();
    Setup {
        pusher,
        value,
        accepted,
        exits,
    }
}

const LONG: Duration = Duration::from_secs(30);

/// The name these loops give their final-push bound.
const FINAL_SETTING: &str = "TEST_FINAL_PUSH_MS";

/// Waits (at most [`LONG`]) until `cond` holds: the receiver records a request before the
/// pusher has read the answer and counted it.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LONG, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn pushes_every_interval_with_the_state_of_then_and_a_last_push_at_drop() {
    let rx = Receiver::start(Answer::Status(204, String::new()));
    let s = start("interval", &rx.url("/w"), 100, 3000);
    s.value.store(5, Ordering::SeqCst);
    let first = rx.wait_for(2, LONG);
    let r = &first[0];
    assert_eq!(r.path, "/w");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("x-test"), Some("1"));
    assert_eq!(r.header("x-scope-orgid"), Some("tenant"));
    assert!(r
        .header("user-agent")
        .unwrap()
        .starts_with("nixl-telemetry/"));
    for pair in first.windows(2) {
        assert!(pair[1].at - pair[0].at >= Duration::from_millis(90));
    }
    s.value.store(42, Ordering::SeqCst);
    let before = s.pusher.stats();
    let n = rx.requests().len();
    drop(s.pusher);
    let all = rx.requests();
    assert!(all.len() > n, "the last push was made at drop");
    assert_eq!(all.last().unwrap().body, b"42");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 42);
    // Only the last push says the sender exits.
    let exits = s.exits.lock().unwrap().clone();
    assert_eq!(exits.len(), all.len(), "{exits:?}");
    assert_eq!(exits.last(), Some(&1), "{exits:?}");
    assert!(
        exits[..exits.len() - 1].iter().all(|&e| e == 0),
        "{exits:?}"
    );
    assert!(before.attempts >= 2 && before.failures == 0, "{before:?}");
    assert!(before.successes + 1 >= before.attempts, "{before:?}");
    assert!(warnings("interval").is_empty());
}

#[test]
fn a_short_job_gets_its_final_state_out_through_the_last_push() {
    let rx = Receiver::start(Answer::Status(200, "ok".into()));
    let s = start("short", &rx.url("/w"), 3_600_000, 3000);
    s.value.store(7, Ordering::SeqCst);
    assert_eq!(s.pusher.stats().attempts, 0);
    drop(s.pusher);
    let all = rx.requests();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].body, b"7");
}

#[test]
fn a_refused_push_is_warned_once_counted_and_not_retried() {
    let rx = Receiver::start(Answer::Status(400, "out of order sample".into()));
    let s = start("refused", &rx.url("/w"), 200, 1000);
    let got = rx.wait_for(4, LONG);
    // No retry storm: refused pushes are an interval apart.
    for pair in got.windows(2) {
        assert!(pair[1].at - pair[0].at >= Duration::from_millis(190));
    }
    let stats = s.pusher.stats();
    assert!(stats.failures >= 3 && stats.successes == 0, "{stats:?}");
    // The refusal once, and once that another sender may share this identity.
    let w = warnings("refused");
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("HTTP 400") && w[0].contains("out of order sample"),
        "{w:?}"
    );
    assert!(
        w[1].contains("another process may be pushing under this sender's identity")
            && w[1].contains("NIXL_TELEMETRY_PUSH_INSTANCE"),
        "{w:?}"
    );
    rx.answer(Answer::Status(204, String::new()));
    let n = rx.requests().len();
    rx.wait_for(n + 2, LONG);
    eventually("a success", || s.pusher.stats().successes >= 1);
    drop(s.pusher);
}

#[test]
fn retry_after_is_honoured() {
    let rx = Receiver::start(Answer::RetryAfter(503, 2));
    // The interval is 300 ms: without Retry-After the retry would come after a backoff of at
    // most 300 ms.
    let s = start("retry-after", &rx.url("/w"), 300, 1000);
    let first = rx.wait_for(1, LONG);
    rx.answer(Answer::Status(204, String::new()));
    let got = rx.wait_for(2, LONG);
    assert!(got[1].at - first[0].at >= Duration::from_millis(1990));
    let w = warnings("retry-after");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("HTTP 503") && w[0].contains("will retry"),
        "{w:?}"
    );
    eventually("the retry is counted", || s.pusher.stats().successes >= 1);
    assert_eq!(s.pusher.stats().failures, 1);
    drop(s.pusher);
}

#[test]
fn a_receiver_that_is_down_is_retried_with_backoff_then_gets_the_latest_state() {
    // Reserve a port, then leave it closed: connections are refused.
    let port = nixl_telemetry_test_support::free_port();
    let s = start("down", &format!("http://127.0.0.1:{port}/w"), 2_000, 1000);
    s.value.store(1, Ordering::SeqCst);
    let start = Instant::now();
    while s.pusher.stats().failures < 3 {
        assert!(start.elapsed() < Duration::from_secs(60), "no retries");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Three failures: the first push an interval after the start, then backoffs of 250 and
    // 500 ms, each at least halved by the jitter; far fewer than a retry storm would make.
    assert!(start.elapsed() >= Duration::from_millis(2_000 + 375));
    assert!(s.pusher.stats().failures <= 6, "{:?}", s.pusher.stats());
    assert_eq!(warnings("down").len(), 1, "{:?}", warnings("down"));
    s.value.store(99, Ordering::SeqCst);
    let rx = Receiver::start_on(port, Answer::Status(204, String::new()));
    let got = rx.wait_for(1, LONG);
    assert_eq!(
        got[0].body, b"99",
        "the unsent state was superseded by the latest one"
    );
    eventually("99 is accepted", || s.accepted.load(Ordering::SeqCst) == 99);
    drop(s.pusher);
}

#[test]
fn a_receiver_that_never_answers_bounds_the_drop() {
    let rx = Receiver::start(Answer::Never);
    let s = start("never", &rx.url("/w"), 100, 500);
    rx.wait_for(1, LONG);
    // The drop returns although the push in flight never ends (the test would hang
    // otherwise), and says the bound cut the last push, and what is not delivered.
    drop(s.pusher);
    cut_once(
        "never",
        500,
        &[
            "its thread is left to end",
            "not delivered: what was recorded since the start",
        ],
    );
}

/// The pushes counted by the message exporter `name` logged when its pusher was dropped.
fn pushes_at_stop(name: &str) -> u64 {
    let stopped = logged(log::Level::Info, name);
    let message = stopped
        .iter()
        .find_map(|m| m.strip_prefix(&format!("{name}: stopped after ")))
        .unwrap_or_else(|| panic!("no stop message in {stopped:?}"));
    message.split(' ').next().unwrap().parse().unwrap()
}

/// The final-push bound of the two tests below: far longer than they may take.
const FINAL_MS: u64 = 20_000;

#[test]
fn a_receiver_that_refuses_connections_gets_one_last_attempt() {
    // Nothing listens on a port reserved for this test: connections are refused.
    let port = nixl_telemetry_test_support::free_port();
    let s = start(
        "refusing",
        &format!("http://127.0.0.1:{port}/w"),
        200,
        FINAL_MS,
    );
    eventually("a failed push", || s.pusher.stats().failures >= 1);
    let before = s.pusher.stats().attempts;
    let start = Instant::now();
    drop(s.pusher);
    let waited = start.elapsed();
    // One attempt (two if a retry had started just before the drop), not retries until
    // FINAL_MS had passed.
    let last = pushes_at_stop("refusing") - before;
    assert!((1..=2).contains(&last), "{last} pushes at the drop");
    assert!(waited < Duration::from_millis(FINAL_MS / 2), "{waited:?}");
    let w = warnings("refusing");
    assert!(w.iter().any(|m| m.contains("not retried")), "{w:?}");
}

#[test]
fn a_receiver_that_hangs_gets_one_last_attempt_bounded_by_the_timeout() {
    let rx = Receiver::start(Answer::Never);
    // Pushes time out after 1 s.
    let s = start_with("hanging", &rx.url("/w"), 100, 1000, FINAL_MS);
    eventually("a push timed out", || s.pusher.stats().failures >= 1);
    let before = rx.requests().len();
    let start = Instant::now();
    drop(s.pusher);
    let waited = start.elapsed();
    eventually("the last attempt arrived", || rx.requests().len() > before);
    // The receiver saw one attempt (two if a retry had started just before the drop: the drop
    // waits for it), each cut by the 1 s timeout, not attempts until FINAL_MS had passed.
    let last = rx.requests().len() - before;
    assert!((1..=2).contains(&last), "{last} requests at the drop");
    assert!(waited < Duration::from_millis(FINAL_MS / 2), "{waited:?}");
}

/// The URL of a receiver that cannot be reached: `refused`, nothing listens on its port
/// (connections are refused); else a listener that closes every connection it accepts, before
/// any answer, counting them.
fn unreachable(refused: bool) -> (String, Arc<AtomicU64>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicU64::new(0));
    if refused {
        drop(listener);
    } else {
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                count.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
    }
    (format!("http://127.0.0.1:{port}/w"), accepted)
}

/// The debug message of a retry of the last push, of exporter `name`.
fn last_push_retries(name: &str) -> Vec<String> {
    logged(log::Level::Debug, name)
        .into_iter()
        .filter(|m| m.contains("retrying the last push"))
        .collect()
}

/// Asserts that exporter `name` warned once that its final-push bound, `ms`, cut its last push,
/// saying each of `parts` (the push's own failure may be warned too, by its thread, after the
/// drop has returned).
fn cut_once(name: &str, ms: u64, parts: &[&str]) {
    let cut: Vec<String> = warnings(name)
        .into_iter()
        .filter(|m| m.contains("cut the last push short"))
        .collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    let prefix = format!("{name}: {FINAL_SETTING}={ms} cut the last push short");
    assert!(cut[0].starts_with(&prefix), "{cut:?}");
    for part in parts {
        assert!(cut[0].contains(part), "{part} in {cut:?}");
    }
}

#[test]
fn destroy_tries_an_unreachable_receiver_once_without_backoff_before_any_push() {
    // A loop younger than its interval (an hour): no push has failed yet, yet the receiver
    // gets one attempt, and no backoff is slept, however long the final-push bound.
    for (name, refused) in [("unreachable-refused", true), ("unreachable-closed", false)] {
        let (url, accepted) = unreachable(refused);
        let s = start(name, &url, 3_600_000, FINAL_MS);
        assert_eq!(s.pusher.stats().attempts, 0);
        drop(s.pusher);
        assert_eq!(pushes_at_stop(name), 1, "{name}");
        assert_eq!(last_push_retries(name), Vec::<String>::new(), "{name}");
        let w = warnings(name);
        assert!(
            w.iter()
                .any(|m| m.contains("the last push got no answer; not retried at exit")),
            "{w:?}"
        );
        if !refused {
            assert_eq!(accepted.load(Ordering::SeqCst), 1, "{name}: one connection");
        }
    }
}

#[test]
fn destroy_retries_only_a_receiver_that_answered_and_only_within_the_bound() {
    // A receiver that answers 503 to every push: the last push is retried with backoff (it
    // asked for it), until the bound leaves no time for the next retry, which the drop says.
    let rx = Receiver::start(Answer::Status(503, "busy".into()));
    let s = start("answered", &rx.url("/w"), 3_600_000, 1000);
    drop(s.pusher);
    assert!(rx.requests().len() >= 2, "{:?}", rx.requests().len());
    assert!(!last_push_retries("answered").is_empty());
    cut_once("answered", 1000, &["no push was accepted"]);
}

#[test]
fn destroy_waits_for_a_silent_receiver_at_most_the_final_push_bound_and_says_so() {
    // Before any push: the last push is the one attempt, cut by the bound (the push timeout is
    // a minute).
    let rx = Receiver::start(Answer::Never);
    let s = start_with("silent-young", &rx.url("/w"), 3_600_000, 60_000, 300);
    drop(s.pusher);
    assert_eq!(rx.requests().len(), 1);
    let start = "not delivered: what was recorded since the start (no push was accepted";
    cut_once("silent-young", 300, &[start]);
    // After accepted pushes, the receiver falls silent with a push in flight: the drop waits
    // for it at most the bound, and counts what is not delivered since the last accepted push.
    let rx = Receiver::start(Answer::Status(204, String::new()));
    let s = start_with("silent-later", &rx.url("/w"), 100, 60_000, 300);
    eventually("an accepted push", || s.pusher.stats().successes >= 1);
    rx.answer(Answer::Never);
    let n = rx.requests().len();
    rx.wait_for(n + 1, LONG);
    drop(s.pusher);
    cut_once(
        "silent-later",
        300,
        &[
            "its thread is left to end",
            "not delivered: what was recorded since the last accepted push, ",
        ],
    );
}

/// An encoder with a bug: its first push panics, its second is the loop's own counters as it
/// was given them, every later one panics. Each build is announced before it panics.
struct Scripted {
    builds: u64,
    announce: mpsc::Sender<u64>,
}

impl Payload for Scripted {
    fn build(&mut self, pushes: &PushStatsSnapshot) -> Body {
        self.builds += 1;
        let _ = self.announce.send(self.builds);
        if self.builds != 2 {
            panic!("encoder bug #{}", self.builds);
        }
        Body {
            bytes: format!("attempts={} failures={}", pushes.attempts, pushes.failures)
                .into_bytes(),
            content_type: "text/plain",
            content_encoding: None,
            headers: &[],
        }
    }
}

#[test]
fn a_panicking_encoder_is_reported_once_counted_and_does_not_hold_up_destroy() {
    install_logger();
    const FINAL: Duration = Duration::from_secs(30);
    let rx = Receiver::start(Answer::Status(204, String::new()));
    let (announce, builds) = mpsc::channel();
    let agent = AgentPush::start(
        "agent-p",
        "node-p",
        true,
        false,
        Target::new(rx.url("/w").parse().unwrap(), Duration::from_secs(2)),
        PushConfig {
            name: "panicking".into(),
            interval: Duration::from_millis(50),
            timeout: Duration::from_secs(2),
            final_timeout: FINAL,
            final_setting: FINAL_SETTING,
        },
        |_, _| {
            Box::new(Scripted {
                builds: 0,
                announce,
            })
        },
    )
    .unwrap();
    // The loop went on after the first push panicked, and counted it as a failed attempt in
    // the counters it pushes.
    let got = rx.wait_for(1, LONG);
    assert_eq!(got[0].body, b"attempts=1 failures=1");
    // Later pushes panic too: the loop still goes on, and only the first panic is reported.
    while builds.recv_timeout(LONG).expect("the loop went on") < 4 {}
    let errors = logged(log::Level::Error, "panicking");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("the push loop panicked") && errors[0].contains("encoder bug #1"),
        "{errors:?}"
    );
    // Destroying the agent makes the last push (its encoder panics as well) and returns
    // without waiting out the final-push timeout: the loop says it stopped, having counted
    // every build as an attempt and every panic as a failure.
    let start = Instant::now();
    drop(agent);
    let waited = start.elapsed();
    let last = builds.iter().last().expect("the last push was built");
    assert!(last > 4, "no push after the 4th build: {last}");
    let stopped = logged(log::Level::Info, "panicking");
    let expected = format!(
        "panicking: stopped after {last} pushes (1 accepted, {} failed,",
        last - 1
    );
    assert!(
        stopped.iter().any(|m| m.starts_with(&expected)),
        "{expected} in {stopped:?}"
    );
    assert!(
        warnings("panicking").is_empty(),
        "{:?}",
        warnings("panicking")
    );
    assert_eq!(logged(log::Level::Error, "panicking").len(), 1);
    // Far within the final-push timeout (it would have been waited out in full).
    assert!(waited < FINAL / 2, "{waited:?}");
}

/// The scale benchmark (`examples/scale.rs`, which `cargo test` builds) in a smoke run: two
/// simulated nodes push to a real Prometheus for two seconds, every 500 ms, and Prometheus then
/// has every sender's exact totals (the example checks them and says so in its row). Its
/// numbers mean nothing here.
#[test]
fn the_scale_benchmark_runs_and_every_senders_totals_are_exact() {
    let exe = nixl_telemetry_test_support::profile_dir().join("examples/scale");
    assert!(
        exe.exists(),
        "{} is missing: run `cargo build --workspace --all-targets` (or `cargo test -p \
         nixl-telemetry-push`, which builds the examples) before `cargo test`",
        exe.display()
    );
    let out = std::process::Command::new(&exe)
        .args(["--senders", "2", "--seconds", "2", "--interval-ms", "500"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let row: Vec<&str> = stdout.trim().split('|').map(str::trim).collect();
    // | nodes | interval | ... | failed pushes | totals exact |
    assert_eq!(row[1], "2", "{stdout}");
    assert_eq!(row[row.len() - 2], "yes", "{stdout}\n{stderr}");
}
