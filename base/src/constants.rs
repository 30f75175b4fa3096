//! Every number the C headers carry, defined once: status codes, event types, ring layout
//! versions and log levels.
//!
//! This module is a leaf (it uses nothing of the crate), so the model types below the C ABI can
//! depend on it: [`crate::Status`], [`crate::EventType`] and the logging levels take their
//! values from these constants, and the core, plug-in and FPM ABIs (the C ABI crate,
//! `nixl-telemetry-c-api`, and [`crate::plugin::abi`]) reuse them, so a C constant can never
//! disagree with the Rust value it names. cbindgen writes them into `include/nixl_telemetry.h`, which the plug-in and FPM
//! headers include.
#![allow(non_camel_case_types)]

/// A status code: `NIXL_TELEMETRY_SUCCESS` (0), `NIXL_TELEMETRY_EMPTY` (1), or a negative
/// `NIXL_TELEMETRY_ERR_*` value. Returned by every ABI of this library (core, plug-in, FPM).
pub type nixl_telemetry_status_t = i32;

/// The operation succeeded.
pub const NIXL_TELEMETRY_SUCCESS: nixl_telemetry_status_t = 0;
/// `nixl_telemetry_ring_pop` found the ring empty (not an error).
pub const NIXL_TELEMETRY_EMPTY: nixl_telemetry_status_t = 1;
/// NIXL_ERR_NOT_POSTED.
pub const NIXL_TELEMETRY_ERR_NOT_POSTED: nixl_telemetry_status_t = -1;
/// NIXL_ERR_INVALID_PARAM: a NULL pointer, an invalid argument or environment value.
pub const NIXL_TELEMETRY_ERR_INVALID_PARAM: nixl_telemetry_status_t = -2;
/// NIXL_ERR_BACKEND: a system call failed.
pub const NIXL_TELEMETRY_ERR_BACKEND: nixl_telemetry_status_t = -3;
/// NIXL_ERR_NOT_FOUND: a file or exporter does not exist.
pub const NIXL_TELEMETRY_ERR_NOT_FOUND: nixl_telemetry_status_t = -4;
/// NIXL_ERR_MISMATCH: wrong ring version or layout.
pub const NIXL_TELEMETRY_ERR_MISMATCH: nixl_telemetry_status_t = -5;
/// NIXL_ERR_NOT_ALLOWED: permission denied or a resource owned by another writer.
pub const NIXL_TELEMETRY_ERR_NOT_ALLOWED: nixl_telemetry_status_t = -6;
/// NIXL_ERR_REPOST_ACTIVE.
pub const NIXL_TELEMETRY_ERR_REPOST_ACTIVE: nixl_telemetry_status_t = -7;
/// NIXL_ERR_UNKNOWN: an internal failure (a caught panic is `NIXL_TELEMETRY_ERR_PANIC`).
pub const NIXL_TELEMETRY_ERR_UNKNOWN: nixl_telemetry_status_t = -8;
/// NIXL_ERR_NOT_SUPPORTED.
pub const NIXL_TELEMETRY_ERR_NOT_SUPPORTED: nixl_telemetry_status_t = -9;
/// NIXL_ERR_REMOTE_DISCONNECT.
pub const NIXL_TELEMETRY_ERR_REMOTE_DISCONNECT: nixl_telemetry_status_t = -10;
/// NIXL_ERR_CANCELED.
pub const NIXL_TELEMETRY_ERR_CANCELED: nixl_telemetry_status_t = -11;
/// NIXL_ERR_NO_TELEMETRY: telemetry (or FPM tracing) is not requested or is misconfigured; no
/// handle was created.
pub const NIXL_TELEMETRY_ERR_NO_TELEMETRY: nixl_telemetry_status_t = -12;
/// NIXL_ERR_XFER_STALLED, from NIXL's open pull request #2047 (a transfer past its stall
/// deadline): never returned by this library, recorded by `nixl_telemetry_update_error` as
/// `agent_err_xfer_stalled` or `agent_err_unknown` (`NIXL_TELEMETRY_XFER_STALLED_EVENT`).
pub const NIXL_TELEMETRY_ERR_XFER_STALLED: nixl_telemetry_status_t = -13;
/// A scrape port held by another process: benign; run without a telemetry sink.
pub const NIXL_TELEMETRY_ERR_BIND_FAILED: nixl_telemetry_status_t = -100;
/// The staging queue was full: the event (or the whole transfer batch) was dropped and counted.
/// This hot-path outcome sets no last-error message (it allocates nothing).
pub const NIXL_TELEMETRY_ERR_DROPPED: nixl_telemetry_status_t = -101;
/// An output location cannot be written (FPM trace: probe file, directory creation or listing).
pub const NIXL_TELEMETRY_ERR_UNWRITABLE: nixl_telemetry_status_t = -102;
/// The handle was created before this process was forked: in the child it is refused (nothing
/// is recorded, flushed or written); create a new handle in the child. Destroying the inherited
/// handle is allowed and releases nothing of the parent's.
pub const NIXL_TELEMETRY_ERR_FORKED: nixl_telemetry_status_t = -103;
/// A panic inside the library (or a Rust plug-in) was caught at the C boundary: the call did
/// not complete, the process goes on, and the last-error message (or the plug-in's error
/// buffer) holds the panic's message. A defect of the library: please report it.
pub const NIXL_TELEMETRY_ERR_PANIC: nixl_telemetry_status_t = -104;

/// `agent_tx_bytes`: bytes of one TX (write) request.
pub const NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES: u32 = 0;
/// `agent_rx_bytes`: bytes of one RX (read) request.
pub const NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES: u32 = 1;
/// `agent_tx_requests_num`: TX request count.
pub const NIXL_TELEMETRY_EVENT_AGENT_TX_REQUESTS_NUM: u32 = 2;
/// `agent_rx_requests_num`: RX request count.
pub const NIXL_TELEMETRY_EVENT_AGENT_RX_REQUESTS_NUM: u32 = 3;
/// `agent_memory_registered`: bytes registered by one call.
pub const NIXL_TELEMETRY_EVENT_AGENT_MEMORY_REGISTERED: u32 = 4;
/// `agent_memory_deregistered`: bytes deregistered by one call.
pub const NIXL_TELEMETRY_EVENT_AGENT_MEMORY_DEREGISTERED: u32 = 5;
/// `agent_xfer_time`: microseconds from start to completion.
pub const NIXL_TELEMETRY_EVENT_AGENT_XFER_TIME: u32 = 6;
/// `agent_xfer_post_time`: microseconds from start to posting.
pub const NIXL_TELEMETRY_EVENT_AGENT_XFER_POST_TIME: u32 = 7;
/// `agent_err_not_posted`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED: u32 = 8;
/// `agent_err_invalid_param`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_INVALID_PARAM: u32 = 9;
/// `agent_err_backend`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_BACKEND: u32 = 10;
/// `agent_err_not_found`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_FOUND: u32 = 11;
/// `agent_err_mismatch`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_MISMATCH: u32 = 12;
/// `agent_err_not_allowed`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_ALLOWED: u32 = 13;
/// `agent_err_repost_active`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_REPOST_ACTIVE: u32 = 14;
/// `agent_err_unknown`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_UNKNOWN: u32 = 15;
/// `agent_err_not_supported`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_SUPPORTED: u32 = 16;
/// `agent_err_remote_disconnect`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_REMOTE_DISCONNECT: u32 = 17;
/// `agent_err_canceled`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_CANCELED: u32 = 18;
/// `agent_err_no_telemetry`.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_NO_TELEMETRY: u32 = 19;
/// `agent_telemetry_events_dropped`: staging-queue drops since the previous flush.
pub const NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED: u32 = 20;
/// `agent_err_xfer_stalled`: a transfer reported stalled (`NIXL_ERR_XFER_STALLED`, -13), from
/// NIXL's open pull request #2047; recorded only when `NIXL_TELEMETRY_XFER_STALLED_EVENT` is
/// true.
pub const NIXL_TELEMETRY_EVENT_AGENT_ERR_XFER_STALLED: u32 = 21;
/// Number of event types (NIXL's merged ones, 0..20, and `agent_err_xfer_stalled`).
pub const NIXL_TELEMETRY_EVENT_TYPE_COUNT: u32 = 22;

/// The ring layout NIXL writes and reads (`TELEMETRY_VERSION` 4): a 40-byte header.
pub const NIXL_TELEMETRY_RING_VERSION_4: i32 = 4;
/// The ring layout of NIXL's open pull request #2018 (`TELEMETRY_VERSION` 5): a 512-byte header
/// whose reader's position is 256 bytes from the writer's.
pub const NIXL_TELEMETRY_RING_VERSION_5: i32 = 5;

/// Log level passed to a log callback (and by plug-ins to `host_log`): error.
pub const NIXL_TELEMETRY_LOG_ERROR: i32 = 1;
/// Log level: warning.
pub const NIXL_TELEMETRY_LOG_WARN: i32 = 2;
/// Log level: information.
pub const NIXL_TELEMETRY_LOG_INFO: i32 = 3;
/// Log level: debug.
pub const NIXL_TELEMETRY_LOG_DEBUG: i32 = 4;
/// Log level: trace.
pub const NIXL_TELEMETRY_LOG_TRACE: i32 = 5;
