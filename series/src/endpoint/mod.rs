//! The scrape endpoint of the series exporters (the Prometheus plug-in, and the DOCA plug-in's
//! `scrape` backend, `prometheus_mp` and `nixl-telemetry serve`): an HTTP/1.1 server answering
//! `GET /metrics` with the Prometheus text format 0.0.4 of every agent of the process, shared
//! by all agents of one plug-in, and `GET /health` with 200 or 503 and a short JSON body
//! ([`server::Pages::health`]).
//!
//! - [`http`]: request parsing and response building (pure functions).
//! - [`server`]: the server: one thread, non-blocking sockets, `poll(2)`.
//! - [`shared`]: the process-wide endpoint of a plug-in ([`SharedEndpoint`]): the first agent
//!   binds it, later agents join it, duplicate names are refused, the last agent to leave
//!   stops it; an address held by another process is reported as a benign collision.
//! - [`address`]: the `..._PORT` / `..._LOCAL` variables.
//!
//! # Why a small `std::net` server and not tiny_http
//!
//! tiny_http (the other candidate: synchronous, four small dependencies) gives each connection
//! to a worker of a pool that grows under load, so a client that connects and sends nothing,
//! or trickles its request byte by byte, occupies a worker until a timeout; its threads are
//! detached and linger after the server is dropped (tolerable: a plug-in is never unloaded),
//! and the listening socket is closed by a thread we cannot join, so the port is not free at
//! a known moment when the last agent leaves. Serving one fixed path needs none of its
//! generality. Ours is one thread multiplexing every connection with `poll(2)`: reading a
//! request never blocks the loop, so slow or silent clients cost a slot and nothing else
//! (each has a deadline, heads are bounded, idle connections wait in the kernel until they
//! send, and when all slots are taken the oldest silent connection is evicted, never one
//! whose request has arrived); a scrape encodes a snapshot on that thread without
//! blocking the agents; stopping wakes the thread through a socket pair and joins it, after
//! which the port is free. Every response closes its connection (`Connection: close`).
//!
//! OpenMetrics is not served, whatever the `Accept` header says (see
//! [`crate::text`] for why); Prometheus falls back to the text format.

pub mod address;
pub mod http;
pub mod server;
pub mod shared;

pub use address::address_from_env;
pub use server::{BindError, Limits, Server};
pub use shared::{JoinError, Membership, SharedEndpoint};
