//! The services a host hands a plug-in in its parameters, both sides of them.
//!
//! The host side: `host_log` and `host_event_name` (this library's logging and event names),
//! and the process services of [`HOST_SERVICES`] (the one settings lookup and the one set of
//! fork handlers). The core passes them to every plug-in it creates; the NIXL adapter, which
//! hosts our plug-ins for NIXL's plug-in manager, passes the same.
//!
//! The plug-in side: [`install`], which `author`'s `create` calls with the host's table, routes
//! this crate's process services in the plug-in's copy to the host's ([`installed`]): settings
//! lookups ([`crate::settings::process_settings`]) and fork handlers ([`crate::fork::install`]).
//! A plug-in loaded by a host that offers no table keeps its own (as before the table existed).

use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicPtr, Ordering};

use super::abi::{
    nixl_telemetry_plugin_fork_handler_t, nixl_telemetry_plugin_host_t, nixl_telemetry_status_t,
};
use crate::c_string::copy_c_string;
use crate::constants::*;
use crate::error::{Error, Result};
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
        Err(p) => (NIXL_TELEMETRY_ERR_UNKNOWN, crate::error::panic_message(&*p)),
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

/// The host's services, once a plug-in's `create` has installed them (`None` in the core's own
/// library, and in a plug-in whose host offers none).
static INSTALLED: AtomicPtr<nixl_telemetry_plugin_host_t> = AtomicPtr::new(std::ptr::null_mut());

/// Routes this copy's process services to the host's `services` (a plug-in calls it before it
/// uses any of them; the first table installed stays).
pub fn install(services: &'static nixl_telemetry_plugin_host_t) {
    let _ = INSTALLED.compare_exchange(
        std::ptr::null_mut(),
        services as *const _ as *mut _,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}

/// The host's services, when this copy of the crate is a plug-in's and its host offers them.
pub fn installed() -> Option<&'static nixl_telemetry_plugin_host_t> {
    // SAFETY: only ever set from a `&'static` table (see `install`).
    unsafe { INSTALLED.load(Ordering::Acquire).as_ref() }
}

/// Whether the host's table has field `end` (its offset plus size) in the struct it knows.
fn has_field(services: &nixl_telemetry_plugin_host_t, end: usize) -> bool {
    services.struct_size >= end
}

/// Looks setting `name` up through the host's `setting`: `None` when the host offers no such
/// service (the caller looks it up itself).
pub fn lookup_setting(name: &str) -> Option<Result<Option<String>>> {
    let services = installed()?;
    let end = std::mem::offset_of!(nixl_telemetry_plugin_host_t, setting)
        + std::mem::size_of::<super::abi::nixl_telemetry_plugin_setting_fn_t>();
    let setting = services.setting.filter(|_| has_field(services, end))?;
    let Ok(c_name) = CString::new(name) else {
        return Some(Ok(None));
    };
    let mut buf = vec![0 as c_char; 256];
    loop {
        let mut needed = 0usize;
        // SAFETY: the host's function, with a NUL-terminated name and `buf.len()` writable
        // bytes, as the plug-in ABI asks.
        let status = unsafe { setting(c_name.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut needed) };
        if status == NIXL_TELEMETRY_SUCCESS && needed > buf.len() {
            buf = vec![0 as c_char; needed];
            continue;
        }
        let text = crate::c_string::text_in_c_buffer(&buf);
        return Some(match status {
            NIXL_TELEMETRY_SUCCESS => Ok(Some(text)),
            NIXL_TELEMETRY_ERR_NOT_FOUND => Ok(None),
            _ => Err(Error::invalid(text)),
        });
    }
}

/// Adds this copy's fork handlers to the host's: `true` when the host took them.
pub fn join_fork_handlers(
    prepare: unsafe extern "C" fn(),
    parent: unsafe extern "C" fn(),
    child: unsafe extern "C" fn(),
) -> bool {
    let Some(services) = installed() else {
        return false;
    };
    let end = std::mem::offset_of!(nixl_telemetry_plugin_host_t, at_fork)
        + std::mem::size_of::<super::abi::nixl_telemetry_plugin_at_fork_fn_t>();
    let Some(at_fork) = services.at_fork.filter(|_| has_field(services, end)) else {
        return false;
    };
    // SAFETY: the host's function, given three handlers of this library (never unloaded: plug-ins
    // are opened with RTLD_NODELETE), as the plug-in ABI asks.
    unsafe { at_fork(Some(prepare), Some(parent), Some(child)) == NIXL_TELEMETRY_SUCCESS }
}
