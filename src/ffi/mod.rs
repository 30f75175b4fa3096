//! The crate's C ABIs, in one tree: every `extern "C"` function the library exports and every
//! constant its headers carry.
//!
//! - [`glue`]: the last-error slot, the panic boundary and the argument checks every entry point
//!   uses.
//! - [`telemetry`]: collectors, ring readers, logging, plug-in directories
//!   (`include/nixl_telemetry.h`).
//! - [`fpm`]: the forward-pass-metrics trace (`include/nixl_telemetry_fpm.h`).
//! - [`cxx`]: the C++ functions of NIXL's telemetry core that NIXL's sources call
//!   (`nixlTelemetryEventTypeForStatus`), declared by `include/nixl_telemetry.hpp`.
//!
//! Every number the headers carry (status codes, event types, log levels) is defined once, in
//! the leaf module [`crate::constants`], which the Rust types take their values from; it is
//! re-exported here. The exporter plug-in ABI's types live with the loader in
//! [`crate::plugin::abi`] (`include/nixl_telemetry_plugin.h`) and reuse those constants.

pub mod cxx;
pub mod fpm;
pub(crate) mod glue;
pub mod telemetry;

pub use crate::constants::*;
pub use telemetry::*;
