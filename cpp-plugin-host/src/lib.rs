//! `libnixl_telemetry_cpp_plugin_host.so`: the library through which `libnixl_telemetry` hosts
//! (drives) an exporter of one of NIXL's own C++ telemetry plug-ins (plug-in API version 2), whose
//! entry point hands back C++ objects (`std::string`, `std::unique_ptr`, vtables) that only
//! C++ can use safely.
//!
//! The work is done in C++ (`src/bridge.cpp`, against `include/nixl_cpp_plugin_v2.hpp`); this
//! crate exports its functions under the names of `include/nixl_telemetry_cpp_bridge.h`,
//! because a Rust `cdylib` exports only the symbols Rust defines. The C++ functions catch every
//! exception, so nothing unwinds through these frames. The core library finds this file like a
//! plug-in (`src/plugin/cpp_bridge.rs`): it is installed in `<libdir>/plugins/`.

use std::ffi::{c_char, c_void};

/// The host's logging callback (`level`: a `NIXL_TELEMETRY_LOG_*` value).
pub type LogFn = Option<unsafe extern "C" fn(level: i32, message: *const c_char)>;

extern "C" {
    fn nixl_telemetry_cpp_bridge_abi_impl() -> u32;
    fn nixl_telemetry_cpp_bridge_inspect_impl(
        plugin: *const c_void,
        name: *mut c_char,
        name_len: usize,
        version: *mut c_char,
        version_len: usize,
        error: *mut c_char,
        error_len: usize,
    ) -> i32;
    fn nixl_telemetry_cpp_bridge_create_impl(
        plugin: *const c_void,
        agent_name: *const c_char,
        max_events_buffered: usize,
        log: LogFn,
        state: *mut *mut c_void,
        error: *mut c_char,
        error_len: usize,
    ) -> i32;
    fn nixl_telemetry_cpp_bridge_export_impl(
        state: *mut c_void,
        events: *const c_void,
        count: usize,
    ) -> usize;
    fn nixl_telemetry_cpp_bridge_destroy_impl(state: *mut c_void);
}

/// The bridge ABI version (`NIXL_TELEMETRY_CPP_BRIDGE_ABI`).
#[unsafe(no_mangle)]
pub extern "C" fn nixl_telemetry_cpp_bridge_abi() -> u32 {
    // SAFETY: takes no arguments and cannot fail.
    unsafe { nixl_telemetry_cpp_bridge_abi_impl() }
}

/// Checks NIXL's plug-in object and copies its name and version.
///
/// # Safety
/// As `nixl_telemetry_cpp_bridge_inspect` in `include/nixl_telemetry_cpp_bridge.h`: `plugin`
/// is what a version-2 plug-in's `nixl_telemetry_plugin_init` returned, and each buffer is
/// NULL or writable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nixl_telemetry_cpp_bridge_inspect(
    plugin: *const c_void,
    name: *mut c_char,
    name_len: usize,
    version: *mut c_char,
    version_len: usize,
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    // SAFETY: the caller's guarantees are the C++ function's contract.
    unsafe {
        nixl_telemetry_cpp_bridge_inspect_impl(
            plugin,
            name,
            name_len,
            version,
            version_len,
            error,
            error_len,
        )
    }
}

/// Creates one agent's exporter through the plug-in's creator.
///
/// # Safety
/// As `nixl_telemetry_cpp_bridge_create`: `plugin` passed `inspect`, `agent_name` is a
/// NUL-terminated string, `state` is writable and `error` NULL or writable for `error_len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nixl_telemetry_cpp_bridge_create(
    plugin: *const c_void,
    agent_name: *const c_char,
    max_events_buffered: usize,
    log: LogFn,
    state: *mut *mut c_void,
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    // SAFETY: the caller's guarantees are the C++ function's contract.
    unsafe {
        nixl_telemetry_cpp_bridge_create_impl(
            plugin,
            agent_name,
            max_events_buffered,
            log,
            state,
            error,
            error_len,
        )
    }
}

/// Exports a batch of 16-byte event records; returns how many the exporter kept.
///
/// # Safety
/// As `nixl_telemetry_cpp_bridge_export`: `state` came from `create` and is used by one thread
/// at a time; `events` points to `count` records (or is NULL with `count` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nixl_telemetry_cpp_bridge_export(
    state: *mut c_void,
    events: *const c_void,
    count: usize,
) -> usize {
    // SAFETY: the caller's guarantees are the C++ function's contract.
    unsafe { nixl_telemetry_cpp_bridge_export_impl(state, events, count) }
}

/// Destroys an exporter created by `create`.
///
/// # Safety
/// `state` came from `create` and is not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nixl_telemetry_cpp_bridge_destroy(state: *mut c_void) {
    // SAFETY: the caller's guarantees are the C++ function's contract.
    unsafe { nixl_telemetry_cpp_bridge_destroy_impl(state) }
}
