//! NIXL's own C++ exporter plug-ins (plug-in API version 2), driven through
//! `libnixl_telemetry_cpp_plugin_host.so` (the `cpp-plugin-host` crate).
//!
//! Such a plug-in's `nixl_telemetry_plugin_init` returns a C++ `nixlTelemetryPlugin` whose
//! creator takes a `std::string` and returns a `std::unique_ptr`, and whose exporters throw
//! C++ exceptions: only C++ can drive it. The bridge is a small C++ library with plain C
//! functions (`cpp-plugin-host/include/nixl_telemetry_cpp_bridge.h`) that calls the creator with
//! NIXL's init parameters, runs `exportEvent` per event inside NIXL's batch hooks, maps
//! `nixlTelemetryBindFailed` to `NIXL_TELEMETRY_ERR_BIND_FAILED` and every other exception to
//! an error with its message. It is opened once per process, on the first version-2 plug-in,
//! with the same trust checks as a plug-in, and looked up where it is installed with this
//! library (`<libdir>/plugins`) and then in the plug-in directories. A version-2 plug-in's `nixl_telemetry_plugin_fini` is never called:
//! plug-ins stay loaded for the whole process.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nixl_telemetry_base::dl::Library;

use super::library::{first_that_opens, open_trusted, own_library_dir, search_dirs};
use crate::c_string::text_in_c_buffer;
use crate::constants::NIXL_TELEMETRY_SUCCESS;
use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::sync::LockUnpoisoned;

/// The bridge's file name.
pub const BRIDGE_FILE: &str = "libnixl_telemetry_cpp_plugin_host.so";

/// The bridge ABI this library speaks (`NIXL_TELEMETRY_CPP_BRIDGE_ABI`).
const BRIDGE_ABI: u32 = 1;

/// The host logging callback handed to the bridge.
pub(crate) type LogFn = Option<unsafe extern "C" fn(level: i32, message: *const c_char)>;

/// `nixl_telemetry_cpp_bridge_inspect`.
type InspectFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_char,
    usize,
    *mut c_char,
    usize,
    *mut c_char,
    usize,
) -> i32;
/// `nixl_telemetry_cpp_bridge_create`.
type CreateFn = unsafe extern "C" fn(
    *const c_void,
    *const c_char,
    usize,
    LogFn,
    *mut *mut c_void,
    *mut c_char,
    usize,
) -> i32;
/// `nixl_telemetry_cpp_bridge_export` (an event record is the 16-byte [`Event`]).
type ExportFn = unsafe extern "C" fn(*mut c_void, *const Event, usize) -> usize;
/// `nixl_telemetry_cpp_bridge_destroy`.
type DestroyFn = unsafe extern "C" fn(*mut c_void);

/// The bridge's functions.
pub(crate) struct CppBridge {
    inspect: InspectFn,
    create: CreateFn,
    /// Exports a batch to one exporter.
    pub(crate) export: ExportFn,
    /// Destroys one exporter.
    pub(crate) destroy: DestroyFn,
}

/// A version-2 plug-in object and the bridge that drives it.
#[derive(Clone, Copy)]
pub(crate) struct NixlPlugin {
    /// The `nixlTelemetryPlugin` its `nixl_telemetry_plugin_init` returned (static, never freed).
    pub(crate) object: *const c_void,
    /// The bridge.
    pub(crate) bridge: &'static CppBridge,
}

// SAFETY: the plug-in object is static and only read (by the bridge's inspect and create, which
// NIXL's own core also calls from any thread); the bridge is a table of functions.
unsafe impl Send for NixlPlugin {}
// SAFETY: as above.
unsafe impl Sync for NixlPlugin {}

/// The bridge, once opened.
static BRIDGE: Mutex<Option<&'static CppBridge>> = Mutex::new(None);

/// Where the bridge is looked up: first where it is installed with this library
/// (`<its directory>/plugins`, then its directory, as in a cargo target directory), then the
/// plug-in directories; duplicates once.
fn bridge_dirs() -> Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    if let Some(own) = own_library_dir() {
        dirs.push(own.join("plugins"));
        dirs.push(own);
    }
    for dir in search_dirs()? {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    Ok(dirs)
}

fn symbol(library: &Library, name: &CStr, path: &Path) -> Result<*mut c_void> {
    match library.symbol(name) {
        Ok(f) => Ok(f.as_ptr()),
        Err(_) => Err(Error::new(
            Status::Mismatch,
            format!(
                "{} lacks {}: not this library's C++ bridge",
                path.display(),
                name.to_string_lossy()
            ),
        )),
    }
}

fn open_bridge(path: &Path) -> Result<&'static CppBridge> {
    let library = open_trusted(
        path,
        c"nixl_telemetry_cpp_bridge_abi",
        "nixl-telemetry C++ bridge",
    )?;
    let abi = symbol(&library, c"nixl_telemetry_cpp_bridge_abi", path)?;
    // SAFETY: the symbol is `uint32_t nixl_telemetry_cpp_bridge_abi(void)`.
    let abi: unsafe extern "C" fn() -> u32 = unsafe { std::mem::transmute(abi) };
    // SAFETY: calling the bridge's version function (no arguments, cannot fail).
    let version = unsafe { abi() };
    if version != BRIDGE_ABI {
        return Err(Error::new(
            Status::Mismatch,
            format!(
                "{} speaks bridge ABI {version}, this library {BRIDGE_ABI}: install the bridge \
                 that came with this library",
                path.display()
            ),
        ));
    }
    let inspect = symbol(&library, c"nixl_telemetry_cpp_bridge_inspect", path)?;
    let create = symbol(&library, c"nixl_telemetry_cpp_bridge_create", path)?;
    let export = symbol(&library, c"nixl_telemetry_cpp_bridge_export", path)?;
    let destroy = symbol(&library, c"nixl_telemetry_cpp_bridge_destroy", path)?;
    // SAFETY: a bridge of ABI 1 defines each symbol with the signature declared in
    // nixl_telemetry_cpp_bridge.h, which the fields' types repeat (an event record is the
    // 16-byte `Event`).
    let bridge = unsafe {
        CppBridge {
            inspect: std::mem::transmute::<*mut c_void, InspectFn>(inspect),
            create: std::mem::transmute::<*mut c_void, CreateFn>(create),
            export: std::mem::transmute::<*mut c_void, ExportFn>(export),
            destroy: std::mem::transmute::<*mut c_void, DestroyFn>(destroy),
        }
    };
    Ok(Box::leak(Box::new(bridge)))
}

/// The bridge, opened on first use (a failure is not remembered: a later call searches again).
fn bridge(plugin: &Path) -> Result<&'static CppBridge> {
    crate::fork::hold_across_fork(crate::fork::LockOrder::CppBridge, &BRIDGE);
    let mut slot = BRIDGE.lock_unpoisoned();
    if let Some(b) = *slot {
        return Ok(b);
    }
    let dirs = bridge_dirs()?;
    match first_that_opens(&dirs, BRIDGE_FILE, "the C++ plug-in bridge", open_bridge) {
        Ok((b, path)) => {
            log::debug!("opened the C++ plug-in bridge {}", path.display());
            *slot = Some(b);
            return Ok(b);
        }
        Err(problems) if !problems.is_empty() => {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{} is a NIXL C++ telemetry plug-in (plug-in API version 2), and no usable \
                     {BRIDGE_FILE} was found: {}",
                    plugin.display(),
                    problems
                        .iter()
                        .map(|e| e.message.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ));
        }
        Err(_) => {}
    }
    Err(Error::new(
        Status::NotFound,
        format!(
            "{} is a NIXL C++ telemetry plug-in (plug-in API version 2), which this library \
             loads through {BRIDGE_FILE}; it is not in any of {} (it is installed in \
             <libdir>/plugins/ with the library)",
            plugin.display(),
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// The version-2 plug-in object `object`, found at `path`, ready to be driven through the
/// bridge, with the version it reports.
pub(crate) fn adopt(path: &Path, object: *const c_void) -> Result<(NixlPlugin, String)> {
    let bridge = bridge(path)?;
    let mut name = [0 as c_char; 256];
    let mut version = [0 as c_char; 256];
    let mut error = [0 as c_char; 512];
    // SAFETY: `object` is what a version-2 plug-in's init returned; the buffers are writable
    // for the lengths passed.
    let status = unsafe {
        (bridge.inspect)(
            object,
            name.as_mut_ptr(),
            name.len(),
            version.as_mut_ptr(),
            version.len(),
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if status != NIXL_TELEMETRY_SUCCESS {
        return Err(Error::new(
            Status::Mismatch,
            format!(
                "{} is a NIXL C++ telemetry plug-in (plug-in API version 2) that cannot be \
                 used: {}",
                path.display(),
                text_in_c_buffer(&error)
            ),
        ));
    }
    log::debug!(
        "{} is NIXL's C++ plug-in '{}': driven through the C++ bridge",
        path.display(),
        text_in_c_buffer(&name)
    );
    Ok((NixlPlugin { object, bridge }, text_in_c_buffer(&version)))
}

/// Creates `agent`'s exporter in a version-2 plug-in: the status and, on failure, the message.
pub(crate) fn create(
    plugin: NixlPlugin,
    agent: &CString,
    max_events_buffered: usize,
    log: LogFn,
    state: &mut *mut c_void,
    error: &mut [c_char],
) -> i32 {
    // SAFETY: the plug-in object passed inspect; every pointer is valid for the call and the
    // error buffer writable for its length.
    unsafe {
        (plugin.bridge.create)(
            plugin.object,
            agent.as_ptr(),
            max_events_buffered,
            log,
            state,
            error.as_mut_ptr(),
            error.len(),
        )
    }
}
