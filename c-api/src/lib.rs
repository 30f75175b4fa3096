//! `libnixl_telemetry.so` and `libnixl_telemetry.a`, the C libraries of nixl-telemetry: every
//! `extern "C"` function they export and the C types that exist only for them, over the core
//! crate (`nixl-telemetry`, which defines no C symbol of its own). This crate is the top layer:
//! no crate of the library depends on it (the tests do, as an rlib, to call the C ABI).
//!
//! - [`boundary`]: the last-error slot, the panic boundary, the argument checks and the handle
//!   making every entry point uses.
//! - [`telemetry`]: collectors, ring readers, logging, plug-in directories
//!   (`include/nixl_telemetry.h`); its C-only types (handles, options, log callback) are in
//!   [`types`].
//! - [`fpm`]: the forward-pass-metrics trace (`include/nixl_telemetry_fpm.h`); its C-only types
//!   (handle, payload) are in [`fpm_types`].
//! - [`cxx`]: the C++ functions of NIXL's telemetry core that NIXL's sources call
//!   (`nixlTelemetryEventTypeForStatus`), declared by `include/nixl_telemetry.hpp`.
//!
//! The C-only types are converted at the boundary from and to the core's own values. What the
//! headers carry that is the core's own value lives below this layer, defined once with its C
//! layout, never copied for C:
//!
//! - the counters ([`nixl_telemetry_core::CollectorStats`], [`nixl_telemetry_core::fpm::FpmStats`]) and the FPM payload's
//!   request blocks ([`nixl_telemetry_core::fpm::ScheduledRequests`], [`nixl_telemetry_core::fpm::QueuedRequests`]), under
//!   their C names by cbindgen's renames;
//! - every number (status codes, event types, log levels), defined once in the leaf module
//!   [`nixl_telemetry_base::constants`], which the Rust types take their values from (re-exported here);
//! - the event record [`nixl_telemetry_core::Event`] (`nixl_telemetry_event_t`), which is also the 16-byte
//!   record of the ring file;
//! - the exporter plug-in ABI [`nixl_telemetry_core::plugin::abi`] (`include/nixl_telemetry_plugin.h`), the
//!   interface through which the loader calls plug-ins (the library is its caller, not its
//!   implementer), and the FPM payload depth limit `NIXL_TELEMETRY_FPM_MAX_PAYLOAD_DEPTH`
//!   ([`nixl_telemetry_core::fpm::payload::MAX_PAYLOAD_DEPTH`]), a rule of the payload validator.

pub(crate) mod boundary;
pub mod cxx;
pub mod fpm;
pub mod fpm_types;
pub mod telemetry;
pub mod types;

pub use nixl_telemetry_base::constants::*;
pub use telemetry::*;
pub use types::*;

/// Exported only by a build with the `test-util` feature (the core's test hooks
/// `logging::capture`, `logging::warnings` and `env::fixed_env`). Those hooks are Rust
/// functions, which a C library never exports, so this symbol is how `tests/install.rs` sees in
/// an installed `libnixl_telemetry.so` that it was built without them.
#[cfg(feature = "test-util")]
#[unsafe(no_mangle)]
pub static NIXL_TELEMETRY_TEST_UTIL: u8 = 1;
