//! The C types of the core ABI (`include/nixl_telemetry.h`) that exist only for it: the two
//! opaque handles, the options struct and the log-callback type. Each is converted at the
//! boundary from or to the core's own Rust value ([`Collector`], [`RingReader`],
//! [`Options`](nixl_telemetry_core::config::Options), a [`LogSink`]).
//!
//! The C-layout types of this header that are the core's own values are defined once in the
//! core: the event record ([`nixl_telemetry_core::Event`], `nixl_telemetry_event_t`, also the 16-byte record
//! of the ring file) and the counters ([`nixl_telemetry_core::CollectorStats`], `nixl_telemetry_stats_t`).
//! The numbers the header carries live in [`nixl_telemetry_base::constants`].
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use nixl_telemetry_base::logging::{level_code, LogSink};
use nixl_telemetry_core::collector::Collector;
use nixl_telemetry_core::ring::RingReader;

/// One agent's telemetry collector (opaque). Created by `nixl_telemetry_create`, released by
/// `nixl_telemetry_destroy`. All functions taking it are thread-safe.
///
/// Fork: the library may be used in a process that forks, at any time, whatever its threads
/// are doing (no lock of the library is held across `fork`). In the child, a handle created
/// before the fork is the parent's: every call on it returns `NIXL_TELEMETRY_ERR_FORKED` (one
/// error message per process) and records, flushes and writes nothing; destroying it is
/// allowed, touches nothing of the parent's and releases nothing (its memory stays until the
/// child exits). The child does not keep the parent's ring lock, scrape port or store and
/// trace locks. A collector created in the child is the child's own and works fully (give it
/// its own agent name for a `BUFFER` ring). A log callback must not wait for a lock the
/// forking thread holds during `fork`.
pub struct nixl_telemetry_t {
    pub(crate) collector: Collector,
}

/// A ring-file reader (opaque). Created by `nixl_telemetry_ring_open`, released by
/// `nixl_telemetry_ring_close`. Not thread-safe: use one reader from one thread at a time.
pub struct nixl_telemetry_ring_t {
    pub(crate) reader: RingReader,
}

/// Programmatic settings of `nixl_telemetry_create_with_options`. Versioned by `struct_size`:
/// set it to `sizeof(nixl_telemetry_options_t)` and zero every field you do not set
/// (`nixl_telemetry_options_t o = {sizeof o};` in C, `{sizeof(o)}` in C++). A zero, NULL or
/// empty field is unset and read from its environment variable, as `nixl_telemetry_create` does;
/// fields added by later versions go at the end, so older callers (smaller `struct_size`)
/// leave them unset.
#[repr(C)]
pub struct nixl_telemetry_options_t {
    /// `sizeof(nixl_telemetry_options_t)` as the caller was compiled; always the first field.
    pub struct_size: usize,
    /// The exporter (`BUFFER`, `NOP`, `TRACE` or a plug-in name); replaces
    /// `NIXL_TELEMETRY_EXPORTER`. NULL or empty: the environment's rule.
    pub exporter_name: *const c_char,
    /// Staging-queue capacity and ring size in events; replaces `NIXL_TELEMETRY_BUFFER_SIZE`.
    pub buffer_size: u64,
    /// Flush period in milliseconds; replaces `NIXL_TELEMETRY_RUN_INTERVAL`.
    pub run_interval_ms: u64,
    /// The ring directory of `BUFFER`; replaces `NIXL_TELEMETRY_DIR`.
    pub dir: *const c_char,
    /// Comma-separated glob allowlist of event names; replaces `NIXL_TELEMETRY_ENABLED_METRICS`.
    pub enabled_metrics: *const c_char,
}

/// A C log callback: `level` is one of the `NIXL_TELEMETRY_LOG_*` values, `message` a
/// NUL-terminated string valid only during the call. It must not unwind (C++: `noexcept`).
pub type nixl_telemetry_log_fn_t =
    Option<unsafe extern "C" fn(level: i32, message: *const c_char, user_data: *mut c_void)>;

/// The logging sink that calls the C callback `cb` with `user_data` (`None` for NULL: back to
/// stderr). The message is passed as a NUL-terminated copy (NULs inside it become spaces).
///
/// # Safety
/// `cb` is NULL or a thread-safe, non-unwinding function valid for as long as the sink is
/// installed, to which passing `user_data` from any thread is sound.
pub(crate) unsafe fn log_sink(
    cb: nixl_telemetry_log_fn_t,
    user_data: *mut c_void,
) -> Option<LogSink> {
    let cb = cb?;
    let user_data = user_data as usize;
    Some(Arc::new(move |level, message: &str| {
        let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the host promised a valid, non-unwinding callback (this function's
        // contract); the string lives until after the call.
        unsafe { cb(level_code(level), text.as_ptr(), user_data as *mut c_void) };
    }))
}
