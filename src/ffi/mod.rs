//! The crate's C ABIs, in one tree: every `extern "C"` function the library exports and the C
//! types that exist only for them. This is the top layer: nothing else in the crate imports
//! from it.
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
//! - the counters ([`crate::CollectorStats`], [`crate::fpm::FpmStats`]) and the FPM payload's
//!   request blocks ([`crate::fpm::ScheduledRequests`], [`crate::fpm::QueuedRequests`]), under
//!   their C names by cbindgen's renames;
//! - every number (status codes, event types, log levels), defined once in the leaf module
//!   [`crate::constants`], which the Rust types take their values from (re-exported here);
//! - the event record [`crate::Event`] (`nixl_telemetry_event_t`), which is also the 16-byte
//!   record of the ring file;
//! - the exporter plug-in ABI [`crate::plugin::abi`] (`include/nixl_telemetry_plugin.h`), the
//!   interface through which the loader calls plug-ins (the library is its caller, not its
//!   implementer), and the FPM payload depth limit `NIXL_TELEMETRY_FPM_MAX_PAYLOAD_DEPTH`
//!   ([`crate::fpm::payload::MAX_PAYLOAD_DEPTH`]), a rule of the payload validator.

pub(crate) mod boundary;
pub mod cxx;
pub mod fpm;
pub mod fpm_types;
pub mod telemetry;
pub mod types;

pub use crate::constants::*;
pub use telemetry::*;
pub use types::*;
