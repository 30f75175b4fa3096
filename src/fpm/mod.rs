//! Dynamo's forward-pass-metrics (FPM) trace: every finalized FPM payload a producer publishes,
//! persisted as gzip JSONL segments ([`crate::segments`]) for offline analysis.
//!
//! A producer (one inference worker process, identified by its `producer_id`) opens an
//! [`FpmTrace`] and records every payload, either as the msgpack map Dynamo puts on the wire
//! ([`FpmTrace::record_msgpack`]) or as a typed [`FpmPayload`]. Recording never blocks: payloads
//! go into a bounded queue ([`queue`], 8192 entries) that drops the oldest entry when full and
//! counts every drop. The producer's writer ([`producer`]) validates the payloads ([`payload`]),
//! applies the capture mode ([`CaptureMode::Sampled`] through the [`sampler`], or
//! [`CaptureMode::Full`]), wraps each kept payload in the `dynamo.fpm.trace.v1` record
//! ([`record`]) and hands it to the segment writer.
//!
//! Configuration comes from the `DYN_FPM_*` environment ([`FpmConfig`], [`FpmPolicy`],
//! [`config`]). Tracing is strictly additive: a disabled or failing trace never disturbs the
//! caller.
//!
//! Time is read through a [`crate::segments::Clock`], so tests drive the monotonic and wall
//! clocks by hand and never sleep ([`crate::segments::ManualClock`], [`FpmTrace::open_manual`]).

pub mod config;
pub mod payload;
pub(crate) mod producer;
pub mod queue;
pub mod record;
pub(crate) mod sampler;
pub mod trace;

pub use config::{CaptureMode, FpmConfig, FpmPolicy};
pub use payload::{FpmPayload, QueuedRequests, ScheduledRequests, ValidPayload};
pub use producer::FpmStats;
pub use record::{FpmRecord, Source};
pub use trace::{FpmTrace, OpenError, OpenErrorKind};
