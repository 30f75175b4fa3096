//! The push loop shared by the push exporters: a thread of its own posting the current state
//! every interval (see the crate documentation for the guarantees). The thread is a
//! [`Worker`] of the base crate, with its panic policy.
//!
//! Timing:
//! - a push is made every `interval` (the first one an interval after the start);
//! - a push that may pass later ([`Outcome::Retry`]) is retried after the receiver's
//!   `Retry-After` (at most [`MAX_RETRY_AFTER`]), else after a capped exponential backoff with
//!   jitter: `min(cap, BASE * 2^(n-1))` times a random factor in [0.5, 1], `cap` being the
//!   interval (at most [`MAX_BACKOFF`]); every retry builds a new body from the state of then;
//! - a refused push ([`Outcome::Rejected`]) is not retried: the next push is an interval later;
//! - each distinct failure (an HTTP status, a kind of transport error) is logged once as a
//!   warning with the receiver's message, until a push succeeds again;
//! - dropping the [`Pusher`] makes the last push and waits for it at most `final_timeout`
//!   (retrying within that time if the receiver asks for it); a push still in flight is
//!   waited for within the same bound. When the receiver failed the push before (it is down,
//!   hangs or refuses), the last push is one attempt, bounded by the push timeout or what is
//!   left of `final_timeout`, whichever is shorter, and is not retried: a receiver that has
//!   been down for minutes does not hold up every destroy for `final_timeout`. A thread that
//!   could not finish in time is left to end on its own (plug-ins are never unloaded);
//! - a push whose encoder panics is reported once (by the worker: later panics are not logged
//!   again) and counted as an attempted and failed push; the next push is an interval later,
//!   and dropping the pusher does not wait for a thread that is gone.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nixl_telemetry_base::worker::{Task, Worker};

use crate::target::{Body, Client, Outcome};

/// The first retry's backoff (before jitter).
pub const BASE_BACKOFF: Duration = Duration::from_millis(250);
/// The longest backoff between retries (before jitter), when the interval is longer.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// What a push exporter gives the loop: the body of a push, built on the loop's thread from
/// the state of the moment.
pub trait Payload: Send + 'static {
    /// The body of a push of the current state, carrying the loop's own counters `pushes` (as
    /// they were before this push) as series of their own ([`PUSH_COUNTERS`]).
    fn build(&mut self, pushes: &PushStatsSnapshot) -> Body;
    /// The body last built was accepted, with this answer (a delta exporter moves its
    /// baseline here; OTLP reads a partial success from the answer).
    fn sent(&mut self, answer: &[u8]) {
        let _ = answer;
    }
}

/// How often and how long to push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushConfig {
    /// Names the exporter in log messages (`remote_write`, `otlp`).
    pub name: String,
    /// Time between pushes.
    pub interval: Duration,
    /// How long one push may take.
    pub timeout: Duration,
    /// How long dropping the pusher waits for the last push.
    pub final_timeout: Duration,
}

/// Counters of the pushes made.
#[derive(Debug, Default)]
pub struct PushStats {
    attempts: AtomicU64,
    successes: AtomicU64,
    failures: AtomicU64,
    bytes: AtomicU64,
}

/// [`PushStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushStatsSnapshot {
    /// Pushes attempted (requests started, and pushes whose encoder panicked).
    pub attempts: u64,
    /// Pushes the receiver accepted.
    pub successes: u64,
    /// Pushes that failed (retried, refused, or whose encoder panicked); the state they carried
    /// is in the next push.
    pub failures: u64,
    /// Bytes of the bodies the receiver accepted.
    pub bytes: u64,
}

/// One of the push loop's own counters, pushed beside the agents' series so the receiver shows
/// how its senders fare: its name (with `_total`, as the agents' counters, in both protocols;
/// no OTLP unit, so a Prometheus conversion keeps the name), help and value.
#[derive(Clone, Copy, Debug)]
pub struct PushCounter {
    /// The counter's name (`nixl_telemetry_push_attempts_total`).
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Reads its value from a snapshot.
    pub value: fn(&PushStatsSnapshot) -> u64,
}

/// The push loop's own counters, in the order they are pushed.
pub const PUSH_COUNTERS: [PushCounter; 4] = [
    PushCounter {
        name: "nixl_telemetry_push_attempts_total",
        help: "Pushes this sender attempted before this one.",
        value: |s| s.attempts,
    },
    PushCounter {
        name: "nixl_telemetry_push_successes_total",
        help: "Pushes the receiver accepted.",
        value: |s| s.successes,
    },
    PushCounter {
        name: "nixl_telemetry_push_failures_total",
        help: "Pushes that failed, or whose encoder panicked (their state was carried by a later push).",
        value: |s| s.failures,
    },
    PushCounter {
        name: "nixl_telemetry_push_bytes_total",
        help: "Bytes of the bodies the receiver accepted.",
        value: |s| s.bytes,
    },
];

impl PushStats {
    /// The counters now.
    pub fn snapshot(&self) -> PushStatsSnapshot {
        PushStatsSnapshot {
            attempts: self.attempts.load(Ordering::Relaxed),
            successes: self.successes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The push loop of one exporter; dropping it makes the last push.
pub struct Pusher {
    worker: Worker,
    stats: Arc<PushStats>,
    final_timeout: Duration,
    name: String,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher")
            .field("name", &self.name)
            .field("stats", &self.stats.snapshot())
            .finish_non_exhaustive()
    }
}

impl Pusher {
    /// Starts the loop pushing `payload` through `client`.
    pub fn start(
        client: Client,
        payload: Box<dyn Payload>,
        config: PushConfig,
    ) -> std::io::Result<Pusher> {
        let stats = Arc::new(PushStats::default());
        let final_timeout = config.final_timeout;
        let name = config.name.clone();
        let worker = Worker::spawn_task(
            &format!("nixl-push-{name}"),
            format!("{name}: the push loop"),
            config.interval,
            Loop {
                stats: stats.clone(),
                client,
                payload,
                config,
                logged: HashSet::new(),
                failures: 0,
                rng: seed(),
                attempted: false,
                settled: false,
            },
        )?;
        Ok(Pusher {
            worker,
            stats,
            final_timeout,
            name,
        })
    }

    /// The counters of this loop's pushes.
    pub fn stats(&self) -> PushStatsSnapshot {
        self.stats.snapshot()
    }

    /// The counters themselves, to read while the loop runs (a health check), without keeping
    /// the loop alive.
    pub fn counters(&self) -> Arc<PushStats> {
        self.stats.clone()
    }

    /// The loop's name (`remote_write`, `otlp`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        let done = self.worker.stop_within(self.final_timeout);
        let s = self.stats.snapshot();
        if done {
            log::info!(
                "{}: stopped after {} pushes ({} accepted, {} failed, {} bytes accepted)",
                self.name,
                s.attempts,
                s.successes,
                s.failures,
                s.bytes
            );
        } else {
            log::warn!(
                "{}: the last push did not end within {} ms; leaving it ({} pushes, {} \
                 accepted, {} failed)",
                self.name,
                self.final_timeout.as_millis(),
                s.attempts,
                s.successes,
                s.failures
            );
        }
    }
}

/// When to push next.
enum Next {
    /// An interval from now.
    Interval,
    /// After this backoff.
    Retry(Duration),
}

struct Loop {
    stats: Arc<PushStats>,
    client: Client,
    payload: Box<dyn Payload>,
    config: PushConfig,
    /// Failures logged since the last success.
    logged: HashSet<String>,
    /// Failures in a row.
    failures: u32,
    rng: u64,
    /// The current push was counted as attempted.
    attempted: bool,
    /// The current push was counted as accepted or failed.
    settled: bool,
}

impl Task for Loop {
    fn step(&mut self) -> Duration {
        match self.push(self.config.timeout) {
            Next::Interval => self.config.interval,
            Next::Retry(backoff) => backoff,
        }
    }

    /// The encoder (or the answer's reader) panicked; the worker has reported it. The push
    /// counts as attempted and failed (unless it was counted already), and the next one is an
    /// interval later: a new body may not panic, but a retry storm would not help.
    fn panicked(&mut self, _wait: Duration) -> Duration {
        if !self.attempted {
            self.stats.attempts.fetch_add(1, Ordering::Relaxed);
        }
        if !self.settled {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
            self.failures = self.failures.saturating_add(1);
        }
        self.attempted = true;
        self.settled = true;
        self.config.interval
    }

    fn finish(&mut self, deadline: Option<Instant>) {
        let deadline = deadline.unwrap_or_else(|| Instant::now() + self.config.final_timeout);
        self.last_push(deadline);
    }
}

impl Loop {
    /// The last push, within `deadline`: retried within it if the receiver asks for it, but
    /// only one attempt when the push before failed (the receiver is down or failing).
    fn last_push(&mut self, deadline: Instant) {
        let failing = self.failures > 0;
        loop {
            let now = Instant::now();
            if now >= deadline {
                log::warn!(
                    "{}: no time left for the last push (the final state is not sent)",
                    self.config.name
                );
                return;
            }
            match self.push(self.config.timeout.min(deadline - now)) {
                Next::Interval => return,
                Next::Retry(_) if failing => {
                    log::warn!(
                        "{}: the last push failed as the ones before it did; not retried (the \
                         final state is not sent)",
                        self.config.name
                    );
                    return;
                }
                Next::Retry(backoff) => {
                    if Instant::now() + backoff >= deadline {
                        log::warn!(
                            "{}: the last push failed and there is no time left to retry",
                            self.config.name
                        );
                        return;
                    }
                    std::thread::sleep(backoff);
                }
            }
        }
    }

    /// One push: build, post, count and log.
    fn push(&mut self, timeout: Duration) -> Next {
        let stats = self.stats.clone();
        self.attempted = false;
        self.settled = false;
        let body = self.payload.build(&stats.snapshot());
        stats.attempts.fetch_add(1, Ordering::Relaxed);
        self.attempted = true;
        let outcome = self.client.post(&body, timeout);
        self.settled = true;
        match outcome {
            Outcome::Sent { answer } => {
                stats.successes.fetch_add(1, Ordering::Relaxed);
                stats
                    .bytes
                    .fetch_add(body.bytes.len() as u64, Ordering::Relaxed);
                self.payload.sent(&answer);
                if self.failures > 0 {
                    log::info!(
                        "{}: pushing to {} again after {} failed pushes",
                        self.config.name,
                        self.client.target().url,
                        self.failures
                    );
                }
                self.failures = 0;
                self.logged.clear();
                Next::Interval
            }
            Outcome::Retry { reason, key, after } => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                self.failures = self.failures.saturating_add(1);
                self.warn_once(key, || format!("{reason} (will retry)"));
                Next::Retry(match after {
                    Some(after) => after.min(MAX_RETRY_AFTER),
                    None => self.backoff(),
                })
            }
            Outcome::Rejected { status, message } => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                self.failures = self.failures.saturating_add(1);
                self.warn_once(format!("HTTP {status}"), || {
                    format!(
                        "HTTP {status}: {message} (not retried: the next push is an interval \
                         later)"
                    )
                });
                Next::Interval
            }
        }
    }

    fn warn_once(&mut self, key: String, message: impl FnOnce() -> String) {
        if self.logged.insert(key) {
            log::warn!(
                "{}: push to {} failed: {}",
                self.config.name,
                self.client.target().url,
                message()
            );
        }
    }

    /// The backoff after `self.failures` failures in a row, with jitter.
    fn backoff(&mut self) -> Duration {
        let cap = self.config.interval.min(MAX_BACKOFF).max(BASE_BACKOFF);
        let exp = self.failures.saturating_sub(1).min(20);
        let raw = BASE_BACKOFF.saturating_mul(1 << exp).min(cap);
        // xorshift64: jitter only, no need for a better generator.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let factor = 0.5 + (self.rng >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
        raw.mul_f64(factor)
    }
}

/// A seed for the jitter, different per process and loop.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    (nanos ^ (std::process::id() as u64) << 32 ^ (&local as *const u8 as u64)) | 1
}
