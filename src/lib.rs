//! nixl-telemetry: the NIXL telemetry system re-implemented in Rust and shipped as a C-ABI
//! library (`libnixl_telemetry.so` / `.a`, header `include/nixl_telemetry.h`).
//!
//! A [`Collector`] per agent records per-operation events into a bounded staging queue; a
//! background thread flushes them into one exporter: the shared-memory ring (`BUFFER`,
//! byte-compatible with NIXL's version-4 file, read back with [`RingReader`]) or the
//! collect-only `NOP`. Configuration comes from the `NIXL_TELEMETRY_*` environment
//! ([`Config`]).

mod boundary;
pub mod collector;
pub mod config;
pub mod error;
pub mod event;
pub mod exporter;
pub mod ffi;
pub mod filter;
pub mod logging;
pub mod plugin;
pub mod ring;
pub mod series;
pub mod staging;
pub mod trace;

pub use collector::{Collector, CollectorStats, Recorded};
pub use config::{Config, ExporterChoice};
pub use error::{Error, Result, Status};
pub use event::{Event, EventType, MetricDescriptor, METRIC_DESCRIPTORS};
pub use filter::MetricMask;
pub use ring::{RingReader, RingWriter};
