//! The C-only types of the FPM trace ABI (`include/nixl_telemetry_fpm.h`): the opaque trace
//! handle and the typed payload (a C string where the core's [`FpmPayload`] has a `String`),
//! converted at the boundary. The payload's two request structs ([`ScheduledRequests`],
//! [`QueuedRequests`]) and the counters ([`FpmStats`]) are the core's own values, defined once
//! with a C layout beside the trace (`src/fpm/`) and named in C by cbindgen.
//!
//! [`FpmPayload`]: nixl_telemetry_core::fpm::FpmPayload
//! [`FpmStats`]: nixl_telemetry_core::fpm::FpmStats
#![allow(non_camel_case_types)]

use std::ffi::c_char;

use nixl_telemetry_core::fpm::{FpmTrace, QueuedRequests, ScheduledRequests};

/// The FPM trace of one producer (opaque). Created by `nixl_telemetry_fpm_trace_open`, released
/// by `nixl_telemetry_fpm_trace_close`.
///
/// Fork: in a child process, a handle opened before the fork is the parent's: every call on it
/// but close returns `NIXL_TELEMETRY_ERR_FORKED`, close releases nothing, and the exit handler
/// leaves it alone, so the child never writes the parent's segment files. A trace opened in
/// the child (under a producer id the parent does not write) works fully.
pub struct nixl_telemetry_fpm_trace_t {
    pub(crate) trace: FpmTrace,
}

/// One forward pass's metrics (`ForwardPassMetrics`, version 1).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nixl_telemetry_fpm_payload_t {
    /// Must be 1.
    pub version: i32,
    /// The engine instance's runtime connection id (NUL-terminated UTF-8; may be empty).
    pub worker_id: *const c_char,
    /// Data-parallel rank (>= 0).
    pub dp_rank: i64,
    /// Per-(worker, rank) sequence number (>= 0).
    pub counter_id: i64,
    /// Iteration duration in seconds (finite, >= 0; 0 for an idle heartbeat).
    pub wall_time: f64,
    /// Requests run in this iteration.
    pub scheduled_requests: ScheduledRequests,
    /// Requests waiting.
    pub queued_requests: QueuedRequests,
}
