//! `libtelemetry_exporter_<NAME>.so` for NIXL's own plug-in manager: one shared library, installed
//! under the name of each of this library's exporter plug-ins in `<libdir>/plugins/nixl/`, that
//! presents the plug-in of the same name in `<libdir>/plugins/` as a NIXL C++ plug-in (plug-in
//! API version 2). It lets a NIXL that keeps its own telemetry core (or NIXL's tests, which
//! drive exporters through that manager) use this library's exporters: point NIXL's plug-in
//! directory at `<libdir>/plugins/nixl/`.
//!
//! The C++ half (`src/adapter.cpp`) takes the exporter's name from its own file name, opens the
//! plain C plug-in (API version 3) one directory up, and derives NIXL's exporter class from it:
//! NIXL's `exportEvent` calls between `onBatchBegin` and `onBatchEnd` become one `export_batch`
//! (an empty batch too, the idle tick), a `BIND_FAILED` creation throws `nixlTelemetryBindFailed`.
//! This crate exports NIXL's entry points (a Rust `cdylib` exports only what Rust defines) and
//! gives the C++ half this library's event names and logging.

use std::ffi::{c_char, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nixl_telemetry::{logging, plugin};

extern "C" {
    fn nixl_telemetry_nixl_adapter_init_impl() -> *mut c_void;
}

/// NIXL's entry point: this adapter's `nixlTelemetryPlugin` object, or NULL (after an error on
/// the log) when the plug-in it presents cannot be opened.
#[no_mangle]
pub extern "C" fn nixl_telemetry_plugin_init() -> *mut c_void {
    // SAFETY: takes no arguments; the C++ function catches every exception.
    unsafe { nixl_telemetry_nixl_adapter_init_impl() }
}

/// NIXL's unload hook: nothing to release (the plug-in behind the adapter stays loaded).
#[no_mangle]
pub extern "C" fn nixl_telemetry_plugin_fini() {}

/// The static name of an event type, or NULL: the library's host service.
#[no_mangle]
pub extern "C" fn nixl_telemetry_nixl_adapter_event_name(event_type: u32) -> *const c_char {
    plugin::host::host_event_name(event_type)
}

/// The process services (settings, fork handlers) this library offers the plug-in behind the
/// adapter: the library's host service, so that plug-in shares this library's configuration and
/// fork handling.
#[no_mangle]
pub extern "C" fn nixl_telemetry_nixl_adapter_host(
) -> *const plugin::abi::nixl_telemetry_plugin_host_t {
    &plugin::host::HOST_SERVICES
}

/// Checks the plug-in at `path` as this library's loader does before it opens one (owner and
/// mode of the file and its directory, and the entry point in its dynamic symbol table): 0, or
/// the error's status with its message logged.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn nixl_telemetry_nixl_adapter_check(path: *const c_char) -> i32 {
    if path.is_null() {
        return nixl_telemetry::Status::InvalidParam as i32;
    }
    // SAFETY: not NULL, and NUL-terminated by this function's contract.
    let path = Path::new(OsStr::from_bytes(
        unsafe { CStr::from_ptr(path) }.to_bytes(),
    ));
    match plugin::check_trusted(
        path,
        c"nixl_telemetry_plugin_init",
        "telemetry exporter plug-in",
    ) {
        Ok(()) => 0,
        Err(e) => {
            logging::init();
            log::error!(target: "plugin", "NIXL plug-in adapter: {}", e.message);
            e.status as i32
        }
    }
}

/// Logs a message of the adapter or of the plug-in behind it through this library's logging
/// (stderr, threshold `NIXL_LOG_LEVEL`): the library's host service.
///
/// # Safety
/// `message` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn nixl_telemetry_nixl_adapter_log(level: i32, message: *const c_char) {
    // SAFETY: the same contract.
    unsafe { plugin::host::host_log(level, message) }
}
