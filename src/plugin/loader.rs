//! Loading exporter plug-ins by name: `libtelemetry_exporter_<NAME>.so` is found and opened
//! through [`super::library`], its descriptor validated, and a NIXL C++ plug-in (API version
//! 2) handed to [`super::nixl_cpp`] (the exporter around a loaded plug-in is
//! [`crate::exporter::PluginExporter`]).
//!
//! Search order for `libtelemetry_exporter_<NAME>.so`: directories added at run time (most
//! recent first), then `NIXL_PLUGIN_DIR`, then `<directory of libnixl_telemetry>/plugins`.
//! A plug-in is opened once per process (`RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`) and never
//! unloaded: its threads and thread-locals may outlive any agent.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::sync::Mutex;

use super::abi::*;
use super::library::{first_that_opens, open_trusted, search_dirs};
use super::nixl_cpp;
use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::fork::LockOrder;
use crate::sync::LockUnpoisoned;

/// Plug-ins opened so far, by name.
static LOADED: Mutex<Option<HashMap<String, LoadedPlugin>>> = Mutex::new(None);

/// How an agent's exporter is created in a loaded plug-in.
#[derive(Clone, Copy)]
pub(crate) enum Creator {
    /// Plug-in API version 3: the descriptor's `create`.
    Native(
        unsafe extern "C" fn(
            *const nixl_telemetry_plugin_params_t,
            *mut *mut c_void,
            *mut c_char,
            usize,
        ) -> nixl_telemetry_status_t,
    ),
    /// One of NIXL's C++ plug-ins (API version 2), through the C++ plug-in host.
    NixlCpp(nixl_cpp::NixlPlugin),
}

/// A validated plug-in of a library that stays loaded for the whole process.
#[derive(Clone)]
pub struct LoadedPlugin {
    version: String,
    /// Creates one agent's exporter.
    pub(crate) create: Creator,
    /// Exports a batch (the descriptor's `export_batch`, or the bridge's).
    pub(crate) export: unsafe extern "C" fn(*mut c_void, *const Event, usize) -> usize,
    /// Destroys one agent's exporter (the descriptor's `destroy`, or the bridge's).
    pub(crate) destroy: unsafe extern "C" fn(*mut c_void),
}

impl LoadedPlugin {
    /// A plug-in reporting `version`, with its three functions.
    pub(crate) fn new(
        version: String,
        create: Creator,
        export: unsafe extern "C" fn(*mut c_void, *const Event, usize) -> usize,
        destroy: unsafe extern "C" fn(*mut c_void),
    ) -> LoadedPlugin {
        LoadedPlugin {
            version,
            create,
            export,
            destroy,
        }
    }

    /// The version the plug-in reports.
    pub fn version(&self) -> &str {
        &self.version
    }
}

fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the descriptor's strings are static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn file_name(name: &str) -> String {
    format!("libtelemetry_exporter_{name}.so")
}

/// Finds, opens and validates plug-in `name` (once per process).
pub fn load(name: &str) -> Result<LoadedPlugin> {
    if name.is_empty() || name.contains('/') || name.contains('\0') {
        return Err(Error::invalid(format!(
            "invalid telemetry exporter name {name:?}"
        )));
    }
    crate::fork::hold_across_fork(LockOrder::LoadedPlugins, &LOADED);
    let mut loaded = LOADED.lock_unpoisoned();
    let loaded = loaded.get_or_insert_with(HashMap::new);
    if let Some(p) = loaded.get(name) {
        return Ok(p.clone());
    }
    let dirs = search_dirs()?;
    let what = format!("telemetry plugin '{name}'");
    match first_that_opens(&dirs, &file_name(name), &what, open) {
        Ok((plugin, path)) => {
            log::info!(
                "Loaded telemetry plugin '{name}' (version {}) from {}",
                plugin.version(),
                path.display()
            );
            loaded.insert(name.to_owned(), plugin.clone());
            return Ok(plugin);
        }
        Err(problems) => {
            if let Some(first) = problems.into_iter().next() {
                return Err(first);
            }
        }
    }
    Err(Error::new(
        Status::NotFound,
        format!(
            "Failed to load telemetry plugin: {name}: {} not found in {} (searched: {}; \
             exporter names are case-sensitive; BUFFER, NOP and TRACE are built in)",
            file_name(name),
            if dirs.is_empty() {
                "any directory"
            } else {
                "any plug-in directory"
            },
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

fn not_a_plugin(path: &Path) -> Error {
    Error::new(
        Status::Mismatch,
        format!(
            "{} is not a telemetry exporter plug-in: it has no nixl_telemetry_plugin_init",
            path.display()
        ),
    )
}

fn open(path: &Path) -> Result<LoadedPlugin> {
    let shown = path.display();
    let library = open_trusted(path, INIT_SYMBOL, "telemetry exporter plug-in")?;
    let Ok(init) = library.symbol(INIT_SYMBOL) else {
        return Err(not_a_plugin(path));
    };
    // SAFETY: the symbol has the documented signature. Called as "C-unwind": a C plug-in never
    // unwinds, but a C++ one (API version 2, same symbol) might throw from its init, and a
    // foreign exception must not cross a frame the compiler assumed cannot unwind (with
    // "C-unwind" it aborts the process at the next Rust boundary, a defined outcome; NIXL's own
    // loader lets it end the process too).
    let init: unsafe extern "C-unwind" fn() -> *const nixl_telemetry_plugin_desc_t =
        unsafe { std::mem::transmute::<*mut c_void, _>(init.as_ptr()) };
    // SAFETY: calling the plug-in's entry point.
    let descriptor = unsafe { init() };
    if descriptor.is_null() {
        return Err(Error::new(
            Status::Unknown,
            format!("telemetry plug-in {shown} failed to initialise (nixl_telemetry_plugin_init returned NULL)"),
        ));
    }
    // Read only the version first: a NIXL C++ descriptor has a different layout after it.
    // SAFETY: every descriptor version starts with a u32 API version.
    let version = unsafe { (descriptor as *const u32).read() };
    if version == NIXL_TELEMETRY_PLUGIN_API_VERSION_NIXL_CPP {
        let (plugin, version) = nixl_cpp::adopt(path, descriptor.cast())?;
        return Ok(LoadedPlugin::new(
            version,
            Creator::NixlCpp(plugin),
            plugin.bridge.export,
            plugin.bridge.destroy,
        ));
    }
    if version != NIXL_TELEMETRY_PLUGIN_API_VERSION {
        return Err(Error::new(
            Status::Mismatch,
            format!(
                "{shown} has plug-in API version {version}; this library supports version \
                 {NIXL_TELEMETRY_PLUGIN_API_VERSION}"
            ),
        ));
    }
    // SAFETY: version 3 descriptors have the layout of nixl_telemetry_plugin_desc_t.
    let descriptor: &'static nixl_telemetry_plugin_desc_t = unsafe { &*descriptor };
    if (descriptor.struct_size as usize) < std::mem::size_of::<nixl_telemetry_plugin_desc_t>() {
        return Err(Error::new(
            Status::Mismatch,
            format!(
                "{shown}: plug-in descriptor is {} bytes, expected at least {}",
                descriptor.struct_size,
                std::mem::size_of::<nixl_telemetry_plugin_desc_t>()
            ),
        ));
    }
    let (Some(create), Some(export), Some(destroy)) = (
        descriptor.create,
        descriptor.export_batch,
        descriptor.destroy,
    ) else {
        return Err(Error::new(
            Status::Mismatch,
            format!("{shown}: plug-in descriptor lacks create, export_batch or destroy"),
        ));
    };
    Ok(LoadedPlugin::new(
        c_str(descriptor.version),
        Creator::Native(create),
        export,
        destroy,
    ))
}
