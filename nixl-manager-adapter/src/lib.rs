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

use nixl_telemetry_base::plugin;
use nixl_telemetry_base::{logging, Status};

/// What the C++ half needs of this library, handed to it by pointer (not by exported symbol,
/// so the adapter's dynamic symbol table holds only NIXL's two entry points); the layout of
/// `nixl_telemetry_nixl_adapter_services_t` in `src/adapter.cpp`.
#[repr(C)]
struct AdapterServices {
    event_name: extern "C" fn(u32) -> *const c_char,
    log: unsafe extern "C" fn(i32, *const c_char),
    host: *const plugin::abi::nixl_telemetry_plugin_host_t,
    check: unsafe extern "C" fn(*const c_char) -> i32,
}

// SAFETY: immutable static data: function pointers and a pointer to the static host table.
unsafe impl Sync for AdapterServices {}

/// The services of this library the C++ half calls.
static SERVICES: AdapterServices = AdapterServices {
    event_name: plugin::host::host_event_name,
    log: plugin::host::host_log,
    host: &plugin::host::HOST_SERVICES,
    check: check_plugin,
};

extern "C" {
    fn nixl_telemetry_nixl_adapter_init_impl(services: *const AdapterServices) -> *mut c_void;
}

/// NIXL's entry point: this adapter's `nixlTelemetryPlugin` object, or NULL (after an error on
/// the log) when the plug-in it presents cannot be opened.
#[unsafe(no_mangle)]
pub extern "C" fn nixl_telemetry_plugin_init() -> *mut c_void {
    // SAFETY: the services are static; the C++ function catches every exception.
    unsafe { nixl_telemetry_nixl_adapter_init_impl(&SERVICES) }
}

/// NIXL's unload hook: nothing to release (the plug-in behind the adapter stays loaded).
#[unsafe(no_mangle)]
pub extern "C" fn nixl_telemetry_plugin_fini() {}

/// Checks the plug-in at `path` as this library's loader does before it opens one
/// ([`plugin::trust::check_trusted`]: owner and mode of the file and its directory, no symbolic
/// link, and the entry point in its dynamic symbol table): 0, or the error's status with its
/// message logged.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string valid for the call.
unsafe extern "C" fn check_plugin(path: *const c_char) -> i32 {
    if path.is_null() {
        return Status::InvalidParam as i32;
    }
    // SAFETY: not NULL, and NUL-terminated by this function's contract.
    let path = Path::new(OsStr::from_bytes(
        unsafe { CStr::from_ptr(path) }.to_bytes(),
    ));
    match plugin::trust::check_trusted(
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
