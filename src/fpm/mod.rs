//! Forward-pass-metrics (FPM) trace persistence, and the rolling gzip JSONL segment writer it
//! shares with the NIXL `TRACE` exporter.
//!
//! A producer (one inference worker process, identified by its `producer_id`) opens an
//! [`FpmTrace`] and records every finalized FPM payload it publishes, either as the msgpack map
//! Dynamo puts on the wire ([`FpmTrace::record_msgpack`]) or as a typed [`FpmPayload`]. Recording
//! never blocks: payloads go into a bounded queue (8192 entries) that drops the oldest entry when
//! full and counts every drop. A worker thread validates the payloads ([`payload`]), applies the
//! capture mode ([`CaptureMode::Sampled`] or [`CaptureMode::Full`], see [`capture`]), wraps each
//! kept payload in the `dynamo.fpm.trace.v1` envelope ([`envelope`]) and hands the rows to the
//! [`SegmentWriter`] ([`segment`]): files `<prefix>.<producer>.<index>.jsonl.gz`, one complete
//! gzip member per flush, rolled on uncompressed bytes, with count-based retention per producer.
//!
//! Configuration comes from the `DYN_FPM_*` environment ([`TraceConfig`], [`config`]). Tracing is
//! strictly additive: a disabled or failing trace never disturbs the caller.
//!
//! Time is read through a [`Clock`], so tests drive the monotonic and wall clocks by hand and
//! never sleep ([`ManualClock`], [`FpmTrace::open_manual`]).
//!
//! Durability: segments are handed to the operating system without `fsync`. A crash can leave a
//! truncated final gzip member (readers such as `nixl-telemetry fpm cat` return every complete
//! row and then warn) and, rarely, a 0-byte segment; a restart always continues with a new
//! segment index, so a damaged tail is never appended to.

pub mod capture;
pub mod clock;
pub mod config;
pub mod envelope;
pub mod exporter;
pub mod ffi;
pub mod guard;
pub mod payload;
pub mod queue;
pub mod reader;
pub mod segment;

pub use capture::{FpmTrace, TraceStats};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{CaptureMode, TraceConfig, TracePolicy};
pub use envelope::{FpmRecord, Source};
pub use exporter::{TraceExporter, TraceExporterConfig};
pub use payload::{FpmPayload, QueuedRequests, ScheduledRequests, ValidPayload};
pub use reader::{SegmentReader, TruncatedMember};
pub use segment::{SegmentNaming, SegmentWriter, WriterOptions, WriterStats};
