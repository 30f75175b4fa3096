//! `serve`'s health beyond its stores: whether its pushes deliver (readiness) and whether its
//! loop turns (liveness), added to the store scan's own health ([`details`]); and the
//! endpoint of health checks only that `serve --push-only` binds ([`HealthOnly`]).
//!
//! - **Readiness** (`/readyz`, `/health`): the scan's (a rank's store served), and each push
//!   loop ready while the receiver accepted a push within `N` of its intervals
//!   (`--health-push-intervals`, [`DEFAULT_PUSH_INTERVALS`]), counted from the start until a
//!   first push is accepted. Each loop is one object of `"push"`: its counters, the pushes
//!   failed in a row, the age of the last accepted push in seconds (`null`: none yet) and its
//!   interval.
//! - **Liveness** (`/livez`): `serve`'s loop (the election and the signal wait, turning every
//!   [`RETRY`]) has turned within [`LIVE_BOUND`]; the answer says how long ago.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nixl_telemetry_mp_store::election::RETRY;
use nixl_telemetry_mp_store::store_scan::{HealthDetails, StoreScan};
use nixl_telemetry_push::{PushStats, Pusher};
use nixl_telemetry_series::endpoint::http::{json_string, Format, Health, Probe};
use nixl_telemetry_series::endpoint::server::Pages;

/// Push intervals without an accepted push after which `serve` is not ready, by default.
pub const DEFAULT_PUSH_INTERVALS: u32 = 3;

/// How long `serve`'s loop may go without turning before `/livez` fails (it turns every
/// [`RETRY`]).
pub const LIVE_BOUND: Duration = Duration::from_secs(10);

/// One push loop, as its health reads it.
struct Watched {
    name: String,
    stats: Arc<PushStats>,
    interval: Duration,
}

/// Whether the push loops deliver: each ready while a push was accepted within `intervals` of
/// its intervals.
pub struct Delivery {
    loops: Vec<Watched>,
    intervals: u32,
    started: SystemTime,
}

impl Delivery {
    /// The delivery of `pushers`, started now, ready while a push was accepted within
    /// `intervals` push intervals.
    pub fn new(pushers: &[Pusher], intervals: u32) -> Delivery {
        Delivery {
            loops: pushers
                .iter()
                .map(|p| Watched {
                    name: p.name().to_owned(),
                    stats: p.counters(),
                    interval: p.interval(),
                })
                .collect(),
            intervals,
            started: SystemTime::now(),
        }
    }

    /// The readiness at `now`: unavailable when a loop has had no push accepted within its
    /// bound; `"push":[...]` in the details (nothing without push loops).
    pub fn at(&self, now: SystemTime) -> Health {
        if self.loops.is_empty() {
            return Health::ready(String::new());
        }
        let mut reasons = Vec::new();
        let each: Vec<String> = self
            .loops
            .iter()
            .map(|w| {
                let counts = w.stats.snapshot();
                let state = LoopState {
                    name: &w.name,
                    attempts: counts.attempts,
                    successes: counts.successes,
                    failures: counts.failures,
                    failures_in_a_row: w.stats.failures_in_a_row(),
                    last_success: w.stats.last_success(),
                    interval: w.interval,
                };
                let (json, late) = state.judge(self.started, self.intervals, now);
                reasons.extend(late);
                json
            })
            .collect();
        let details = format!(r#""push":[{}]"#, each.join(","));
        if reasons.is_empty() {
            Health::ready(details)
        } else {
            Health::unavailable(reasons.join("; "), details)
        }
    }
}

/// What a push loop's health is judged on.
struct LoopState<'a> {
    name: &'a str,
    attempts: u64,
    successes: u64,
    failures: u64,
    failures_in_a_row: u64,
    last_success: Option<SystemTime>,
    interval: Duration,
}

impl LoopState<'_> {
    /// Its JSON object at `now`, and why it is not ready (`None`: ready): no push accepted
    /// within `intervals` intervals of the last accepted one, or of `started` before the first.
    fn judge(
        &self,
        started: SystemTime,
        intervals: u32,
        now: SystemTime,
    ) -> (String, Option<String>) {
        let age = |t: SystemTime| now.duration_since(t).unwrap_or_default();
        let bound = self.interval.saturating_mul(intervals);
        let since = age(self.last_success.unwrap_or(started));
        let last_age = self.last_success.map_or_else(
            || "null".to_owned(),
            |t| format!("{:.3}", age(t).as_secs_f64()),
        );
        let json = format!(
            r#"{{"name":{},"attempts":{},"successes":{},"failures":{},"failures_in_a_row":{},"last_success_age_s":{last_age},"interval_s":{:.3}}}"#,
            json_string(self.name),
            self.attempts,
            self.successes,
            self.failures,
            self.failures_in_a_row,
            self.interval.as_secs_f64()
        );
        let late = (since > bound).then(|| {
            let when = match self.last_success {
                Some(_) => format!("the last one {:.3} s ago", since.as_secs_f64()),
                None => format!("none since the start {:.3} s ago", since.as_secs_f64()),
            };
            format!(
                "{}: no push accepted within {intervals} push intervals ({:.3} s): {when}, {} \
                 failed in a row",
                self.name,
                bound.as_secs_f64(),
                self.failures_in_a_row
            )
        });
        (json, late)
    }
}

/// When `serve`'s loop last turned.
pub struct Heartbeat {
    started: Instant,
    /// Milliseconds from `started` to the last turn.
    last_ms: AtomicU64,
}

impl Heartbeat {
    /// A heartbeat that has just beaten.
    pub fn new() -> Heartbeat {
        Heartbeat {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// The loop turned.
    pub fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// The liveness at `now`: alive while the loop turned within [`LIVE_BOUND`], with how long
    /// ago (`"loop_age_s"`).
    pub fn at(&self, now: Instant) -> Health {
        let last = self.started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let age = now.saturating_duration_since(last);
        let details = format!(r#""loop_age_s":{:.3}"#, age.as_secs_f64());
        if age <= LIVE_BOUND {
            Health::ready(details)
        } else {
            Health::unavailable(
                format!(
                    "serve's loop has not turned for {:.3} s (it turns every {} ms)",
                    age.as_secs_f64(),
                    RETRY.as_millis()
                ),
                details,
            )
        }
    }
}

/// `serve`'s part of a store scan's health: `delivery` when a probe asks readiness,
/// `heartbeat` when it asks liveness.
pub fn details(delivery: Delivery, heartbeat: Arc<Heartbeat>) -> HealthDetails {
    Arc::new(move |probe| match probe {
        Probe::Ready => delivery.at(SystemTime::now()),
        Probe::Live => heartbeat.at(Instant::now()),
    })
}

/// The pages of `serve --push-only`'s endpoint: the health checks of its store scan (with
/// [`details`]), and no `/metrics` (nothing scrapes a push-only sidecar).
pub struct HealthOnly(pub Arc<StoreScan>);

impl Pages for HealthOnly {
    fn metrics(&self, _format: Format) -> (&'static str, Vec<u8>) {
        unreachable!("a health endpoint serves no /metrics")
    }

    fn serves_metrics(&self) -> bool {
        false
    }

    fn health(&self) -> Health {
        self.0.health()
    }

    fn liveness(&self) -> Health {
        self.0.liveness()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(last_success: Option<SystemTime>, failures_in_a_row: u64) -> LoopState<'static> {
        LoopState {
            name: "remote_write",
            attempts: 10,
            successes: 10 - failures_in_a_row,
            failures: failures_in_a_row,
            failures_in_a_row,
            last_success,
            interval: Duration::from_secs(1),
        }
    }

    /// Ready while a push was accepted within three intervals of now (of the start before the
    /// first), not after; the JSON says the last one's age either way.
    #[test]
    fn a_loop_is_ready_while_a_push_was_accepted_within_n_intervals() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let judge =
            |last: Option<f64>, row, now: f64| state(last.map(at), row).judge(t0, 3, at(now));
        // Before the first push is accepted: counted from the start.
        let (json, late) = judge(None, 2, 2.5);
        assert_eq!(late, None);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(doc["last_success_age_s"], serde_json::Value::Null);
        assert_eq!(doc["failures_in_a_row"], 2);
        let (_, late) = judge(None, 3, 3.5);
        let late = late.unwrap();
        assert!(late.contains("none since the start 3.500 s ago"), "{late}");
        assert!(late.contains("within 3 push intervals (3.000 s)"), "{late}");
        // After one: counted from it.
        let (json, late) = judge(Some(10.0), 0, 12.0);
        assert_eq!(late, None);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(doc["last_success_age_s"], 2.0);
        assert_eq!(doc["interval_s"], 1.0);
        assert_eq!(judge(Some(10.0), 2, 13.0).1, None);
        let late = judge(Some(10.0), 3, 13.25).1.unwrap();
        assert!(
            late.contains("the last one 3.250 s ago, 3 failed in a row"),
            "{late}"
        );
        // With one interval as the bound.
        assert!(state(Some(at(10.0)), 1).judge(t0, 1, at(11.5)).1.is_some());
    }

    #[test]
    fn the_loop_is_alive_while_it_turned_within_the_bound() {
        let beat = Heartbeat::new();
        let t = beat.started;
        let alive = beat.at(t + Duration::from_secs(1));
        assert!(alive.ready, "{alive:?}");
        assert_eq!(alive.details, r#""loop_age_s":1.000"#);
        let stuck = beat.at(t + LIVE_BOUND + Duration::from_millis(1));
        assert!(!stuck.ready);
        assert!(
            stuck.reason.contains("has not turned for 10.001 s"),
            "{stuck:?}"
        );
        // No push loops: nothing to say, ready.
        let none = Delivery {
            loops: Vec::new(),
            intervals: 3,
            started: SystemTime::now(),
        };
        assert_eq!(none.at(SystemTime::now()), Health::ready(String::new()));
    }
}
