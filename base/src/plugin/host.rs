//! The services a host hands a plug-in in its parameters, both sides of them.
//!
//! The host side: `host_log` and `host_event_name` (this library's logging and event names),
//! and the process services of [`HOST_SERVICES`] (the one settings lookup and the one set of
//! fork handlers). The core passes them to every plug-in it creates; the NIXL adapter, which
//! hosts our plug-ins for NIXL's plug-in manager, passes the same.
//!
//! The plug-in side, which uses these services, is [`super::services`].

use std::ffi::{c_char, CStr};

use super::abi::{
    nixl_telemetry_plugin_fork_handler_t, nixl_telemetry_plugin_host_t, nixl_telemetry_status_t,
};
use crate::c_string::copy_c_string;
use crate::constants::*;
use crate::event::EventType;
use crate::logging;

/// Forwards a plug-in's log message (`level`: a `NIXL_TELEMETRY_LOG_*` value) into this
/// library's logging, under the target `plugin`.
///
/// # Safety
/// `message` is NULL or a NUL-terminated string valid for the call (the plug-in ABI's contract).
pub unsafe extern "C" fn host_log(level: i32, message: *const c_char) {
    if message.is_null() {
        return;
    }
    logging::init();
    // SAFETY: not NULL, and NUL-terminated by the plug-in ABI's contract.
    let text = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    log::log!(target: "plugin", logging::level_from_code(level), "{text}");
}

/// The static C name of an event type (`agent_tx_bytes`, ...), NULL for an unknown one.
pub extern "C" fn host_event_name(event_type: u32) -> *const c_char {
    EventType::c_name_of(event_type).map_or(std::ptr::null(), CStr::as_ptr)
}

/// The process services this library offers the plug-ins it hosts.
pub static HOST_SERVICES: nixl_telemetry_plugin_host_t = nixl_telemetry_plugin_host_t {
    struct_size: std::mem::size_of::<nixl_telemetry_plugin_host_t>(),
    setting: Some(serve_setting),
    at_fork: Some(serve_at_fork),
};

/// The host's `setting`: [`crate::settings::process_settings`], this process's one lookup.
unsafe extern "C" fn serve_setting(
    name: *const c_char,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> nixl_telemetry_status_t {
    if name.is_null() || needed.is_null() {
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    let run = || {
        // SAFETY: not NULL, and NUL-terminated by the plug-in ABI's contract.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        crate::settings::process_settings(&name)
    };
    let (status, text) = match std::panic::catch_unwind(run) {
        Ok(Ok(Some(value))) => (NIXL_TELEMETRY_SUCCESS, value),
        Ok(Ok(None)) => (NIXL_TELEMETRY_ERR_NOT_FOUND, String::new()),
        Ok(Err(e)) => (NIXL_TELEMETRY_ERR_INVALID_PARAM, e.message),
        Err(p) => (NIXL_TELEMETRY_ERR_PANIC, crate::error::panic_message(&*p)),
    };
    // SAFETY: `needed` is not NULL (checked above) and writable by the ABI's contract.
    unsafe { *needed = text.len() + 1 };
    // SAFETY: the plug-in gave `len` writable bytes at `buf` (or NULL).
    unsafe { copy_c_string(&text, buf, len) };
    status
}

/// The host's `at_fork`: [`crate::fork::add_plugin_handlers`].
unsafe extern "C" fn serve_at_fork(
    prepare: nixl_telemetry_plugin_fork_handler_t,
    parent: nixl_telemetry_plugin_fork_handler_t,
    child: nixl_telemetry_plugin_fork_handler_t,
) -> nixl_telemetry_status_t {
    if crate::fork::add_plugin_handlers(prepare, parent, child) {
        NIXL_TELEMETRY_SUCCESS
    } else {
        NIXL_TELEMETRY_ERR_UNKNOWN
    }
}
