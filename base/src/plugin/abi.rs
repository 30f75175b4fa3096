//! The exporter plug-in C ABI, version 3 (`include/nixl_telemetry_plugin.h`).
//!
//! A plug-in is a shared library `libtelemetry_exporter_<NAME>.so` exporting
//! `const nixl_telemetry_plugin_desc_t *nixl_telemetry_plugin_init(void)`. The descriptor it returns
//! is static and C-only:
//! its first field is the API version, so a NIXL C++ plug-in (version 2 at the same offset) is
//! recognised and driven through the C++ plug-in host (`nixl_cpp`). Batches of events, not single
//! events, cross the boundary.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void, CStr};

pub use crate::constants::nixl_telemetry_status_t;
use crate::event::Event;

/// The plug-in API version this library loads.
pub const NIXL_TELEMETRY_PLUGIN_API_VERSION: u32 = 3;

/// The API version NIXL's own C++ plug-ins report at the same offset (loaded through the C++
/// bridge, `libnixl_telemetry_cpp_plugin_host.so`).
pub const NIXL_TELEMETRY_PLUGIN_API_VERSION_NIXL_CPP: u32 = 2;

/// Logs through the host: `level` is a `NIXL_TELEMETRY_LOG_*` value.
pub type nixl_telemetry_plugin_log_fn_t =
    Option<unsafe extern "C" fn(level: i32, message: *const c_char)>;

/// What the host passes to `create`. Valid only during the call (copy what you keep).
#[repr(C)]
pub struct nixl_telemetry_plugin_params_t {
    /// Size of this struct as the host knows it (fields may be added at the end).
    pub struct_size: usize,
    /// The agent's name (NUL-terminated UTF-8).
    pub agent_name: *const c_char,
    /// The staging capacity (`NIXL_TELEMETRY_BUFFER_SIZE`): a flush batch has at most this
    /// many events plus one drop report.
    pub max_events_buffered: usize,
    /// Logs a message through the host's logging (stderr or the host's callback); thread-safe.
    pub host_log: nixl_telemetry_plugin_log_fn_t,
    /// Returns the static name of an event type (`agent_tx_bytes`, ...) or NULL if unknown.
    pub host_event_name: nixl_telemetry_plugin_event_name_fn_t,
    /// The process services of the host (NULL from a host that offers none). Added after
    /// `host_event_name`: check `struct_size` before reading it.
    pub host: *const nixl_telemetry_plugin_host_t,
}

/// Looks up setting `name` (a NUL-terminated `NIXL_TELEMETRY_*` name, or any variable) by the
/// host's rule, the one every part of the process uses: the environment, then NIXL's
/// configuration file (read once per process), for the settings the host knows.
/// `NIXL_TELEMETRY_SUCCESS`: the setting is set; its value, NUL-terminated, is in `buf` when
/// `*needed` (its length plus the NUL) is at most `len` (else call again with a larger buffer).
/// `NIXL_TELEMETRY_ERR_NOT_FOUND`: unset. `NIXL_TELEMETRY_ERR_INVALID_PARAM`: the value cannot
/// be read (the configuration file is unreadable or holds the wrong type); the message,
/// NUL-terminated and possibly truncated, is in `buf`. Thread-safe.
pub type nixl_telemetry_plugin_setting_fn_t = Option<
    unsafe extern "C" fn(
        name: *const c_char,
        buf: *mut c_char,
        len: usize,
        needed: *mut usize,
    ) -> nixl_telemetry_status_t,
>;

/// A fork handler of a plug-in (it must not unwind).
pub type nixl_telemetry_plugin_fork_handler_t = Option<unsafe extern "C" fn()>;

/// Adds a plug-in's fork handlers to the host's: the host's own `pthread_atfork` handlers call
/// `prepare` before they take any lock of the host, and `parent` or `child` after they have
/// released them, so that the process has one set of fork handlers and one lock order.
/// `NIXL_TELEMETRY_SUCCESS`, or an error status when the host cannot take more handlers (the
/// plug-in then installs its own). Thread-safe.
pub type nixl_telemetry_plugin_at_fork_fn_t = Option<
    unsafe extern "C" fn(
        prepare: nixl_telemetry_plugin_fork_handler_t,
        parent: nixl_telemetry_plugin_fork_handler_t,
        child: nixl_telemetry_plugin_fork_handler_t,
    ) -> nixl_telemetry_status_t,
>;

/// The process services a host offers its plug-ins, so that a plug-in shares the host's one
/// configuration, fork handling and logging (`host_log`) instead of keeping its own. Static:
/// valid for the life of the process.
#[repr(C)]
pub struct nixl_telemetry_plugin_host_t {
    /// Size of this struct as the host knows it (fields may be added at the end).
    pub struct_size: usize,
    /// Looks a setting up.
    pub setting: nixl_telemetry_plugin_setting_fn_t,
    /// Adds fork handlers.
    pub at_fork: nixl_telemetry_plugin_at_fork_fn_t,
}

// SAFETY: the table is immutable static data (function pointers), so sharing it between
// threads cannot race.
unsafe impl Sync for nixl_telemetry_plugin_host_t {}

/// The host's event-name lookup (a plug-in need not link the core library to print names).
pub type nixl_telemetry_plugin_event_name_fn_t =
    Option<unsafe extern "C" fn(event_type: u32) -> *const c_char>;

/// Creates the exporter state for one agent. On success stores it in `*state` and returns
/// `NIXL_TELEMETRY_SUCCESS`; on failure writes a NUL-terminated message into
/// `error_buf` (at most `error_len` bytes) and returns an error status.
pub type nixl_telemetry_plugin_create_fn_t = Option<
    unsafe extern "C" fn(
        params: *const nixl_telemetry_plugin_params_t,
        state: *mut *mut c_void,
        error_buf: *mut c_char,
        error_len: usize,
    ) -> nixl_telemetry_status_t,
>;

/// Exports `count` events in order and returns how many were kept (the rest count as lost).
/// Called from one thread at a time per state. Must not throw or unwind. `count` is 0 (and
/// `events` may be NULL) for a flush that had nothing to export: it is called so every run
/// interval while the agent is idle, which lets a plug-in do periodic work on the flush thread.
pub type nixl_telemetry_plugin_export_fn_t =
    Option<unsafe extern "C" fn(state: *mut c_void, events: *const Event, count: usize) -> usize>;

/// Releases the state created by `create`.
pub type nixl_telemetry_plugin_destroy_fn_t = Option<unsafe extern "C" fn(state: *mut c_void)>;

/// The static descriptor returned by `nixl_telemetry_plugin_init`.
#[repr(C)]
pub struct nixl_telemetry_plugin_desc_t {
    /// Must be `NIXL_TELEMETRY_PLUGIN_API_VERSION` (3); always the first field.
    pub api_version: u32,
    /// `sizeof(nixl_telemetry_plugin_desc_t)` as the plug-in was compiled.
    pub struct_size: u32,
    /// The exporter's name (NUL-terminated, static).
    pub name: *const c_char,
    /// The plug-in's own version string (NUL-terminated, static).
    pub version: *const c_char,
    /// Creates one agent's exporter.
    pub create: nixl_telemetry_plugin_create_fn_t,
    /// Exports a batch.
    pub export_batch: nixl_telemetry_plugin_export_fn_t,
    /// Destroys one agent's exporter.
    pub destroy: nixl_telemetry_plugin_destroy_fn_t,
}

// SAFETY: the descriptor is immutable static data (pointers to static strings and functions),
// so sharing it between threads cannot race.
unsafe impl Sync for nixl_telemetry_plugin_desc_t {}
// SAFETY: as above: nothing in it is tied to the thread that created it.
unsafe impl Send for nixl_telemetry_plugin_desc_t {}

/// Signature of the entry point `nixl_telemetry_plugin_init`.
pub type nixl_telemetry_plugin_init_fn_t =
    unsafe extern "C" fn() -> *const nixl_telemetry_plugin_desc_t;

/// Name of the entry point every plug-in exports.
pub const INIT_SYMBOL: &CStr = c"nixl_telemetry_plugin_init";

// Declares the entry points for the header; plug-ins define them, the core does not.
#[allow(dead_code)]
extern "C" {
    /// Returns the plug-in's static descriptor (or NULL when it cannot initialise).
    pub fn nixl_telemetry_plugin_init() -> *const nixl_telemetry_plugin_desc_t;
}
