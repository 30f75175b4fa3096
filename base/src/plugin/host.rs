//! The services a host hands a plug-in in its parameters (`host_log`, `host_event_name`):
//! this library's logging and event names. The core passes them to every plug-in it creates;
//! the NIXL adapter, which hosts our plug-ins for NIXL's plug-in manager, passes the same.

use std::ffi::{c_char, CStr};

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
