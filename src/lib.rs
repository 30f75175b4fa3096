//! nixl-telemetry: the NIXL telemetry system re-implemented in Rust and shipped as a C-ABI
//! library (`libnixl_telemetry.so` / `.a`, headers in `include/`).
//!
//! A [`Collector`] per agent records per-operation events into a bounded staging queue
//! ([`staging`]); a background thread flushes them into one exporter ([`exporter`]): the
//! shared-memory ring (`BUFFER`, byte-compatible with NIXL's version-4 file or the version 5 of
//! NIXL's open pull request #2018, read back with [`RingReader`]), the collect-only `NOP`, gzip
//! JSONL segments (`TRACE`), or a plug-in loaded
//! by name ([`plugin`]; Prometheus and DOCA ship as plug-ins, built on the
//! `nixl-telemetry-series` crate: the series, their text encoding and the scrape server live
//! there, not here).
//! Configuration comes from the `NIXL_TELEMETRY_*` environment ([`Config`], [`mod@env`]).
//!
//! The same library writes Dynamo's forward-pass-metrics traces ([`fpm`]) into the segment
//! store ([`segments`]).
//!
//! The C ABI is not here: the `nixl-telemetry-c-api` crate (`c-api/`) defines every C entry
//! point over this crate's Rust API and builds `libnixl_telemetry.so` and `.a`; this crate
//! defines no C symbol. What the headers carry that is the core's own value is defined once,
//! here or in `nixl-telemetry-base`, with its C layout: the numbers (status codes, event
//! types, log levels) in the leaf [`constants`], which the Rust types take their values from;
//! the 16-byte [`Event`] (`nixl_telemetry_event_t`), which is also the ring file's record; the
//! counters ([`CollectorStats`], [`fpm::FpmStats`]) and the FPM payload's request blocks, which
//! cbindgen names in C; and the exporter plug-in ABI ([`plugin::abi`]), through which the
//! loader calls plug-ins.

pub mod collector;
pub mod config;
pub mod exporter;
pub mod filter;
pub mod fpm;
pub mod plugin;
pub mod ring;
pub mod segments;
pub mod staging;

// What the core shares with the plug-ins lives in `nixl-telemetry-base`, one level down: the
// core's code reaches its modules as `crate::fork`, `crate::event`, ...; every other crate
// reaches them by their one path, `nixl_telemetry_base::...`.
use nixl_telemetry_base::{
    c_string, constants, env, error, event, fork, logging, owner_only, settings, sync, worker,
};

pub use collector::{Collector, CollectorStats, Recorded};
pub use config::Config;
pub use error::{Error, Result, Status};
pub use event::{Event, EventType, MetricDescriptor, METRIC_DESCRIPTORS};
pub use exporter::ExporterChoice;
pub use filter::MetricMask;
pub use ring::{RingReader, RingWriter};
