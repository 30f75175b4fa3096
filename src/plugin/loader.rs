//! Finding, opening and validating plug-ins (the exporter around a loaded plug-in is
//! [`crate::exporter::PluginExporter`]).
//!
//! Search order for `libtelemetry_exporter_<NAME>.so`: directories added at run time (most
//! recent first), then `NIXL_PLUGIN_DIR`, then `<directory of libnixl_telemetry>/plugins`.
//! A plug-in is opened once per process (`RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`) and never
//! unloaded: its threads and thread-locals may outlive any agent.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::abi::*;
use super::{cpp_bridge, trust};
use crate::error::{Error, Result, Status};
use crate::event::Event;

/// Directories added with [`add_plugin_dir`], most recent first.
static EXTRA_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
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
    /// One of NIXL's C++ plug-ins (API version 2), through the C++ bridge.
    NixlCpp(cpp_bridge::NixlPlugin),
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

/// Adds a directory to search first (it must exist). Adding one twice warns and changes
/// nothing.
pub fn add_plugin_dir(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        return Err(Error::new(
            Status::NotFound,
            format!("plug-in directory {} does not exist", dir.display()),
        ));
    }
    let mut dirs = EXTRA_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if dirs.iter().any(|d| d == dir) {
        log::warn!("plug-in directory {} was already added", dir.display());
        return Ok(());
    }
    dirs.insert(0, dir.to_owned());
    Ok(())
}

/// The directories searched for plug-ins, in order. A relative `NIXL_PLUGIN_DIR` is refused
/// (see [`crate::plugin::trust`]).
pub fn search_dirs() -> Result<Vec<PathBuf>> {
    let mut dirs = EXTRA_DIRS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match crate::settings::lookup_os("NIXL_PLUGIN_DIR")? {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            trust::check_plugin_dir_var(&d)?;
            dirs.push(d);
        }
        _ => {}
    }
    if let Some(own) = own_library_dir() {
        dirs.push(own.join("plugins"));
    }
    Ok(dirs)
}

/// The directory of the object file containing this code (`libnixl_telemetry.so`, or the
/// executable when linked statically).
pub(crate) fn own_library_dir() -> Option<PathBuf> {
    // SAFETY: Dl_info is a plain C struct of pointers, for which all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address; `info` is a valid out-parameter.
    let found = unsafe { libc::dladdr(own_library_dir as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = Path::new(OsStr::from_bytes(file.to_bytes()));
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    path.parent().map(Path::to_owned)
}

fn file_name(name: &str) -> String {
    format!("libtelemetry_exporter_{name}.so")
}

/// The first of `dirs` holding a `file` that `open` accepts, with its path. A candidate that
/// exists but is refused is skipped and, when a later one is used, named with its reason in one
/// warning (a different file than the one placed first then runs). `Err` holds the refusals,
/// empty when no directory has `file`. `what` names the library in the warning.
pub(crate) fn first_that_opens<T>(
    dirs: &[PathBuf],
    file: &str,
    what: &str,
    mut open: impl FnMut(&Path) -> Result<T>,
) -> std::result::Result<(T, PathBuf), Vec<Error>> {
    let mut problems: Vec<Error> = Vec::new();
    for dir in dirs {
        let path = dir.join(file);
        if !path.exists() {
            continue;
        }
        match open(&path) {
            Ok(found) => {
                if !problems.is_empty() {
                    log::warn!(
                        "{what} is loaded from {}, not from the {} earlier candidate(s) in the \
                         search order: {}",
                        path.display(),
                        problems.len(),
                        problems
                            .iter()
                            .map(|e| e.message.as_str())
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                }
                return Ok((found, path));
            }
            Err(e) => problems.push(e),
        }
    }
    Err(problems)
}

/// Finds, opens and validates plug-in `name` (once per process).
pub fn load(name: &str) -> Result<LoadedPlugin> {
    if name.is_empty() || name.contains('/') || name.contains('\0') {
        return Err(Error::invalid(format!(
            "invalid telemetry exporter name {name:?}"
        )));
    }
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
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

pub(crate) fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a thread-local NUL-terminated message.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic loader error".into()
    } else {
        // SAFETY: not NULL: a NUL-terminated message owned by the loader, valid until the next
        // dlerror call on this thread.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// What must hold before the shared library at `path` may be opened: it and its directory are
/// trusted ([`trust`]: owned by this user or root, not writable by others) and its dynamic
/// symbol table defines `entry` (`what` names the kind of library in messages). Used by the
/// loader and by the NIXL adapter, which opens our plug-ins for NIXL's plug-in manager.
pub fn check_trusted(path: &Path, entry: &CStr, what: &str) -> Result<()> {
    let shown = path.display();
    if let Some(dir) = path.parent() {
        trust::check_owner_and_mode(dir, "directory")?;
    }
    trust::check_owner_and_mode(path, "file")?;
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("cannot read {what} {shown}"), &e))?;
    match trust::defines_symbol(&bytes, entry) {
        Err(why) => {
            return Err(Error::new(
                Status::Backend,
                format!("cannot load {what} {shown}: {why}"),
            ))
        }
        Ok(false) => {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown} is not a {what}: it has no {}",
                    entry.to_string_lossy()
                ),
            ))
        }
        Ok(true) => {}
    }
    Ok(())
}

/// Opens the shared library at `path` once it is trusted ([`trust`]) and its dynamic symbol
/// table defines `entry` (nothing of it runs before both are known); never closed.
pub(crate) fn open_trusted(path: &Path, entry: &CStr, what: &str) -> Result<*mut c_void> {
    let shown = path.display();
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("{what} path {shown} contains NUL")))?;
    check_trusted(path, entry, what)?;
    // SAFETY: dlopen of a path; the handle is deliberately never closed.
    let handle = unsafe {
        libc::dlopen(
            c_path.as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE,
        )
    };
    if handle.is_null() {
        return Err(Error::new(
            Status::Backend,
            format!("cannot load {what} {shown}: {}", dl_error()),
        ));
    }
    Ok(handle)
}

fn open(path: &Path) -> Result<LoadedPlugin> {
    let shown = path.display();
    let handle = open_trusted(path, INIT_SYMBOL, "telemetry exporter plug-in")?;
    // SAFETY: looking up a symbol in a handle we own.
    let init = unsafe { libc::dlsym(handle, INIT_SYMBOL.as_ptr()) };
    if init.is_null() {
        return Err(not_a_plugin(path));
    }
    // SAFETY: the symbol has the documented signature. Called as "C-unwind": a C plug-in never
    // unwinds, but a C++ one (API version 2, same symbol) might throw from its init, and a
    // foreign exception must not cross a frame the compiler assumed cannot unwind (with
    // "C-unwind" it aborts the process at the next Rust boundary, a defined outcome; NIXL's own
    // loader lets it end the process too).
    let init: unsafe extern "C-unwind" fn() -> *const nixl_telemetry_plugin_desc_t =
        unsafe { std::mem::transmute::<*mut c_void, _>(init) };
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
        return cpp_bridge::adopt(path, descriptor.cast());
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
