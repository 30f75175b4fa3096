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
//!   (its setting, [`PushConfig::final_setting`]); a push still in flight is waited for within
//!   the same bound. The last push is one attempt, bounded by the push timeout or what is left
//!   of `final_timeout`, whichever is shorter. It is retried (within that time) only when the
//!   receiver answered asking for it (a 5xx or 429) and the push before had not failed: a
//!   receiver that is unreachable (connections refused, no route) or did not answer, or that
//!   failed the push before, gets no second attempt and no backoff, so destroy returns at once
//!   when connections are refused, whatever the process's age. When `final_timeout` cuts the
//!   last push (the receiver did not answer within it, or there was no time left for it or its
//!   retry), the drop says so in one warning naming the setting and counting what is not
//!   delivered ([`PushStats::undelivered`]). A thread that could not finish in time is left to
//!   end on its own (plug-ins are never unloaded);
//! - a push whose encoder panics is reported once (by the worker: later panics are not logged
//!   again) and counted as an attempted and failed push; the next push is an interval later,
//!   and dropping the pusher does not wait for a thread that is gone;
//! - a refusal saying samples are duplicate or out of order ([`crate::rows::shared_identity`])
//!   adds, once per process, a warning that another process may push under this sender's
//!   identity, and how to set one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nixl_telemetry_base::worker::{Task, Worker};

use crate::rows::{shared_identity, ENV_INSTANCE};
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
    /// The setting of `final_timeout` (`NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS`), named in the
    /// warning when it cuts the last push.
    pub final_setting: &'static str,
}

/// Counters of the pushes made.
#[derive(Debug, Default)]
pub struct PushStats {
    attempts: AtomicU64,
    successes: AtomicU64,
    failures: AtomicU64,
    bytes: AtomicU64,
    /// When the receiver last accepted a push: milliseconds since the Unix epoch, 0 for never.
    last_success_ms: AtomicU64,
    /// Pushes failed since the last accepted one (or since the start).
    failed_since_success: AtomicU64,
    /// Set once the last push (at exit) is under way.
    exiting: AtomicBool,
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
    /// 1 once the sender is exiting (its last push, as its agent is destroyed or `serve`
    /// stops), else 0: the receiver can tell a sender that ended on purpose from one that
    /// went silent.
    pub exits: u64,
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
pub const PUSH_COUNTERS: [PushCounter; 5] = [
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
    PushCounter {
        name: "nixl_telemetry_push_exits_total",
        help: "1 in the sender's last push, made as it exits on purpose (its agent destroyed, serve stopping); 0 in every push before.",
        value: |s| s.exits,
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
            exits: u64::from(self.exiting.load(Ordering::Relaxed)),
        }
    }

    /// When the receiver last accepted a push (`None`: never).
    pub fn last_success(&self) -> Option<SystemTime> {
        match self.last_success_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }

    /// Pushes failed since the receiver last accepted one (or since the start): 0 while
    /// pushes succeed (a health check).
    pub fn failures_in_a_row(&self) -> u64 {
        self.failed_since_success.load(Ordering::Relaxed)
    }

    /// What a push that is not delivered leaves out, for the log: the state recorded since the
    /// last accepted push (how long ago, and how many pushes failed since), or since the start.
    pub fn undelivered(&self) -> String {
        let failed = self.failed_since_success.load(Ordering::Relaxed);
        match self.last_success() {
            Some(at) => format!(
                "what was recorded since the last accepted push, {:.1} s before ({failed} \
                 failed pushes since)",
                SystemTime::now()
                    .duration_since(at)
                    .unwrap_or_default()
                    .as_secs_f64()
            ),
            None => {
                format!("what was recorded since the start (no push was accepted; {failed} failed)")
            }
        }
    }

    /// Counts a push the receiver accepted, of `bytes`.
    fn accepted(&self, bytes: usize) {
        self.successes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_millis().max(1) as u64);
        self.last_success_ms.store(now, Ordering::Relaxed);
        self.failed_since_success.store(0, Ordering::Relaxed);
    }

    /// Counts a failed push.
    fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.failed_since_success.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether this process (this copy of the crate) has said that another sender may share its
/// identity: said once.
static SHARED_IDENTITY_SAID: AtomicBool = AtomicBool::new(false);

/// The push loop of one exporter; dropping it makes the last push.
pub struct Pusher {
    worker: Worker,
    stats: Arc<PushStats>,
    final_timeout: Duration,
    final_setting: &'static str,
    /// Set by the loop when `final_timeout` cut its last push.
    cut: Arc<AtomicBool>,
    name: String,
    interval: Duration,
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
        let cut = Arc::new(AtomicBool::new(false));
        let final_timeout = config.final_timeout;
        let final_setting = config.final_setting;
        let name = config.name.clone();
        let interval = config.interval;
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
                rng: seed(),
                attempted: false,
                settled: false,
                cut: cut.clone(),
            },
        )?;
        Ok(Pusher {
            worker,
            stats,
            final_timeout,
            final_setting,
            cut,
            name,
            interval,
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

    /// The time between pushes.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        let done = self.worker.stop_within(self.final_timeout);
        let s = self.stats.snapshot();
        if done && !self.cut.load(Ordering::Relaxed) {
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
                "{}: {}={} cut the last push short (the receiver did not answer within it{}): \
                 not delivered: {} ({} pushes, {} accepted, {} failed)",
                self.name,
                self.final_setting,
                self.final_timeout.as_millis(),
                if done {
                    ""
                } else {
                    "; its thread is left to end"
                },
                self.stats.undelivered(),
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
    /// After this backoff; `answered`: the receiver answered (a 5xx or 429), else it could not
    /// be reached or did not answer in time.
    Retry { after: Duration, answered: bool },
}

struct Loop {
    stats: Arc<PushStats>,
    client: Client,
    payload: Box<dyn Payload>,
    config: PushConfig,
    /// Failures logged since the last success.
    logged: HashSet<String>,
    rng: u64,
    /// The current push was counted as attempted.
    attempted: bool,
    /// The current push was counted as accepted or failed.
    settled: bool,
    /// Set when `final_timeout` cuts the last push (the pusher's drop says so).
    cut: Arc<AtomicBool>,
}

impl Task for Loop {
    fn step(&mut self) -> Duration {
        match self.push(self.config.timeout, false) {
            Next::Interval => self.config.interval,
            Next::Retry { after, .. } => after,
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
            self.stats.failed();
        }
        self.attempted = true;
        self.settled = true;
        self.config.interval
    }

    fn finish(&mut self, deadline: Option<Instant>) {
        let deadline = deadline.unwrap_or_else(|| Instant::now() + self.config.final_timeout);
        self.stats.exiting.store(true, Ordering::Relaxed);
        self.last_push(deadline);
    }
}

impl Loop {
    /// The last push, within `deadline` (see the module documentation): one attempt, retried
    /// within the deadline only when the receiver answered asking for it and the push before
    /// had not failed. Sets `cut` when the deadline cuts it.
    fn last_push(&mut self, deadline: Instant) {
        let failing = self.failures() > 0;
        loop {
            let now = Instant::now();
            if now >= deadline {
                self.cut.store(true, Ordering::Relaxed);
                return;
            }
            let timeout = self.config.timeout.min(deadline - now);
            let started = Instant::now();
            match self.push(timeout, true) {
                Next::Interval => return,
                Next::Retry {
                    answered: false, ..
                } => {
                    if timeout < self.config.timeout && started.elapsed() >= timeout {
                        // It waited for an answer until the deadline.
                        self.cut.store(true, Ordering::Relaxed);
                    } else {
                        log::warn!(
                            "{}: the last push got no answer; not retried at exit (the final \
                             state is not sent)",
                            self.config.name
                        );
                    }
                    return;
                }
                Next::Retry { .. } if failing => {
                    log::warn!(
                        "{}: the last push failed as the ones before it did; not retried (the \
                         final state is not sent)",
                        self.config.name
                    );
                    return;
                }
                Next::Retry { after, .. } => {
                    if Instant::now() + after >= deadline {
                        self.cut.store(true, Ordering::Relaxed);
                        return;
                    }
                    log::debug!(
                        "{}: retrying the last push in {} ms",
                        self.config.name,
                        after.as_millis()
                    );
                    std::thread::sleep(after);
                }
            }
        }
    }

    /// One push: build, post, count and log (`last`: the last push, which the warning of a
    /// failure does not promise to retry).
    fn push(&mut self, timeout: Duration, last: bool) -> Next {
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
                let failures = self.failures();
                stats.accepted(body.bytes.len());
                self.payload.sent(&answer);
                if failures > 0 {
                    log::info!(
                        "{}: pushing to {} again after {failures} failed pushes",
                        self.config.name,
                        self.client.target().url,
                    );
                }
                self.logged.clear();
                Next::Interval
            }
            Outcome::Retry {
                reason,
                key,
                after,
                status,
            } => {
                stats.failed();
                let then = if last { "the last push" } else { "will retry" };
                self.warn_once(key, || format!("{reason} ({then})"));
                Next::Retry {
                    after: match after {
                        Some(after) => after.min(MAX_RETRY_AFTER),
                        None => self.backoff(),
                    },
                    answered: status.is_some(),
                }
            }
            Outcome::Rejected { status, message } => {
                stats.failed();
                let shared = shared_identity(&message);
                self.warn_once(format!("HTTP {status}"), || {
                    format!(
                        "HTTP {status}: {message} (not retried: the next push is an interval \
                         later)"
                    )
                });
                if shared && !SHARED_IDENTITY_SAID.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "{}: the receiver refuses samples as duplicate or out of order: another \
                         process may be pushing under this sender's identity (the remote-write \
                         instance label, OTLP's service.instance.id); give each process its own \
                         with {ENV_INSTANCE}, or leave it unset for one unique to the process",
                        self.config.name
                    );
                }
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

    /// Pushes failed in a row (since the last accepted one).
    fn failures(&self) -> u64 {
        self.stats.failed_since_success.load(Ordering::Relaxed)
    }

    /// The backoff after [`Loop::failures`] failures in a row, with jitter.
    fn backoff(&mut self) -> Duration {
        let cap = self.config.interval.min(MAX_BACKOFF).max(BASE_BACKOFF);
        let exp = self.failures().saturating_sub(1).min(20) as u32;
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
