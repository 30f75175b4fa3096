//! nixl-telemetry: the NIXL telemetry system re-implemented in Rust and shipped as a C-ABI
//! library (`libnixl_telemetry.so` / `.a`, headers in `include/`).
//!
//! A [`Collector`] per agent records per-operation events into a bounded staging queue
//! ([`staging`]); a background thread flushes them into one exporter ([`exporter`]): the
//! shared-memory ring (`BUFFER`, byte-compatible with NIXL's version-4 file, read back with
//! [`RingReader`]), the collect-only `NOP`, gzip JSONL segments (`TRACE`), or a plug-in loaded
//! by name ([`plugin`]; Prometheus and DOCA ship as plug-ins, built on [`series`]).
//! Configuration comes from the `NIXL_TELEMETRY_*` environment ([`Config`], [`env`]).
//!
//! The same library writes Dynamo's forward-pass-metrics traces ([`fpm`]) into the segment
//! store ([`segments`]). Every C entry point and every constant the headers carry live in
//! [`ffi`].

mod c_string;
pub mod collector;
pub mod config;
pub mod constants;
pub mod env;
pub mod error;
pub mod event;
pub mod exporter;
mod fault_guard;
pub mod ffi;
pub mod file_lock;
pub mod filter;
pub mod fpm;
pub mod logging;
pub mod plugin;
pub mod ring;
pub mod segments;
pub mod series;
pub mod settings;
pub mod staging;
mod worker;

pub use collector::{Collector, CollectorStats, Recorded};
pub use config::Config;
pub use error::{Error, Result, Status};
pub use event::{Event, EventType, MetricDescriptor, METRIC_DESCRIPTORS};
pub use exporter::ExporterChoice;
pub use filter::MetricMask;
pub use ring::{RingReader, RingWriter};
