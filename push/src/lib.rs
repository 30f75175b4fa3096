//! What the push exporters share (the `remote_write` and `otlp` plug-ins, and
//! `nixl-telemetry serve --remote-write/--otlp`): one way to reach a receiver and one push
//! loop, so both protocols behave the same when the receiver is slow, down or refusing.
//!
//! - [`target`]: the receiver ([`Target`]: URL, TLS roots, basic auth or bearer token read from
//!   a file, extra headers, timeout), validated when the exporter is created, and the
//!   [`Client`] that posts one body and classifies the answer ([`Outcome`]).
//! - [`pusher`]: the push loop ([`Pusher`]): a thread of its own that builds a body from the
//!   current (cumulative) state every interval and posts it; failures that may pass are retried
//!   with capped exponential backoff and jitter (honouring `Retry-After`), others wait for the
//!   next interval; one body at a time is ever held, because the next snapshot supersedes an
//!   unsent one; attempts, successes, failures and bytes are counted ([`PushStats`]); dropping
//!   the pusher makes one last push, waiting at most a bounded time.
//!
//! Producers and the collector's flush never wait on the network: the exporters only update
//! their lock-free series on the flush thread, and this loop reads them on its own thread.

pub mod pusher;
pub mod target;

pub use pusher::{Payload, PushConfig, PushStats, PushStatsSnapshot, Pusher};
pub use target::{Auth, Body, Client, Outcome, Target, TargetVars};

/// The `User-Agent` of every push: `nixl-telemetry/<version>`.
pub const USER_AGENT: &str = concat!("nixl-telemetry/", env!("CARGO_PKG_VERSION"));

use nixl_telemetry::env::{parse_u64, Lookup};
use nixl_telemetry_series::AgentSnapshot;

/// Label (or attribute) names and values of one set of series.
pub type Labels = Vec<(String, String)>;

/// What a push exporter pushes, taken on the push thread: snapshots with their labels (one per
/// agent in a plug-in; one per rank store for `nixl-telemetry serve`).
pub type Source = Box<dyn FnMut() -> Vec<(AgentSnapshot, Labels)> + Send>;

/// `NIXL_TELEMETRY_RANK_ENV`: the name of the variable whose value is the `local_rank` label
/// (default `LOCAL_RANK`), as for the multi-process Prometheus exporter. (Hook: when the
/// series crate gains shared workload labels, the push exporters take theirs from there.)
pub const ENV_RANK_ENV: &str = "NIXL_TELEMETRY_RANK_ENV";

/// The `local_rank` label of this process, if its rank variable is set: `(name, value)`.
pub fn rank_label(settings: Lookup) -> Result<Option<(String, String)>, String> {
    let var = settings(ENV_RANK_ENV)
        .map_err(|e| e.message)?
        .unwrap_or_else(|| "LOCAL_RANK".to_owned());
    let value = nixl_telemetry::env::environment(&var).map_err(|e| e.message)?;
    Ok(value
        .filter(|v| !v.is_empty())
        .map(|v| ("local_rank".to_owned(), v)))
}

/// Reads a duration in milliseconds from setting `var` (default `default_ms`); 0 is refused
/// when `positive`.
pub fn millis(
    settings: Lookup,
    var: &str,
    default_ms: u64,
    positive: bool,
) -> Result<std::time::Duration, String> {
    let ms = match settings(var).map_err(|e| e.message)? {
        Some(v) => parse_u64(var, &v).map_err(|e| e.message)?,
        None => default_ms,
    };
    if positive && ms == 0 {
        return Err(format!("{var}=0: give a positive number of milliseconds"));
    }
    Ok(std::time::Duration::from_millis(ms))
}
