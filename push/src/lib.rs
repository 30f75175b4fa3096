//! What the push exporters share (the `remote_write` and `otlp` plug-ins, and
//! `nixl-telemetry serve --remote-write/--otlp`): one way to reach a receiver and one push
//! loop, so both protocols behave the same when the receiver is slow, down or refusing.
//!
//! - [`target`]: the receiver ([`Target`]: URL, TLS roots, basic auth or bearer token read from
//!   a file, extra headers, timeout), validated when the exporter is created, and the
//!   [`Client`] that posts one body and classifies the answer ([`Outcome`]).
//! - [`tls`]: the server certificate check of https pushes (webpki's, and a self-signed
//!   certificate pinned by the CA file, as curl accepts it).
//! - [`pusher`]: the push loop ([`Pusher`]): a thread of its own (a worker of the base crate,
//!   with its panic policy: a panicking encoder is reported once and counted as a failed push,
//!   and the loop goes on) that builds a body from the current (cumulative) state every
//!   interval and posts it; failures that may pass are retried
//!   with capped exponential backoff and jitter (honouring `Retry-After`), others wait for the
//!   next interval; one body at a time is ever held, because the next snapshot supersedes an
//!   unsent one; attempts, successes, failures and bytes are counted ([`PushStats`]) and pushed
//!   as series of their own ([`PUSH_COUNTERS`]); dropping
//!   the pusher makes one last push, waiting at most a bounded time.
//!
//! - [`http`]: the one HTTP client (the target's posts, and the GET with which the CLI reads
//!   scrape endpoints).
//! - [`remote_write`] and [`otlp`]: the two protocols' encoders, configurations and payloads,
//!   shared by their plug-ins and `nixl-telemetry serve`.
//! - [`rows`]: what is pushed (labelled snapshots) and the `local_rank` label.
//! - [`agent`]: one agent's series and push loop, as both plug-ins build them ([`AgentPush`]).
//! - [`sidecar`]: the push configuration of `nixl-telemetry serve --remote-write/--otlp`, its
//!   options over the protocols' settings, built in one place.
//!
//! Producers and the collector's flush never wait on the network: the exporters only update
//! their lock-free series on the flush thread, and this loop reads them on its own thread.

pub mod agent;
pub mod http;
pub mod otlp;
pub mod pusher;
pub mod remote_write;
pub mod rows;
pub mod sidecar;
pub mod target;
pub mod tls;

pub use agent::AgentPush;
pub use pusher::{
    Payload, PushConfig, PushCounter, PushStats, PushStatsSnapshot, Pusher, PUSH_COUNTERS,
};
pub use rows::{rank_label, Labels, Source, ENV_RANK_ENV};
pub use target::{millis, Auth, Body, Client, Outcome, Target, TargetVars};

/// The `User-Agent` of every push: `nixl-telemetry/<version>`.
pub const USER_AGENT: &str = concat!("nixl-telemetry/", env!("CARGO_PKG_VERSION"));
