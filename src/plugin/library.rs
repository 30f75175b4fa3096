//! Finding and opening trusted shared libraries: the plug-in search directories (added at run
//! time, `NIXL_PLUGIN_DIR`, which must be absolute, `<directory of libnixl_telemetry>/plugins`),
//! the trust checks that run before anything of a file is executed (the base crate's
//! [`trust`]), and `dlopen`. The bottom layer
//! of plug-in loading: both the exporter plug-in loader ([`super::loader`]) and the host of
//! NIXL's C++ plug-ins ([`super::nixl_cpp`]) build on it, and it imports neither.

use std::ffi::{c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nixl_telemetry_base::dl::{self, Library};
use nixl_telemetry_base::plugin::trust;

use crate::error::{Error, Result, Status};
use crate::sync::LockUnpoisoned;

/// Directories added with [`add_plugin_dir`], most recent first.
static EXTRA_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The added directories, locked (held across a fork: see [`crate::fork`]).
fn extra_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    crate::fork::hold_across_fork(crate::fork::LockOrder::PluginDirs, &EXTRA_DIRS);
    EXTRA_DIRS.lock_unpoisoned()
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
    let mut dirs = extra_dirs();
    if dirs.iter().any(|d| d == dir) {
        log::warn!("plug-in directory {} was already added", dir.display());
        return Ok(());
    }
    dirs.insert(0, dir.to_owned());
    Ok(())
}

/// The directories searched for plug-ins, in order. A relative `NIXL_PLUGIN_DIR` is refused: it
/// would depend on the working directory of whichever process loads the library.
pub fn search_dirs() -> Result<Vec<PathBuf>> {
    let mut dirs = extra_dirs().clone();
    match crate::settings::lookup_os(crate::settings::PLUGIN_DIR.name)? {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            check_plugin_dir_var(&d)?;
            dirs.push(d);
        }
        _ => {}
    }
    if let Some(own) = own_library_dir() {
        dirs.push(own.join("plugins"));
    }
    Ok(dirs)
}

/// Refuses a relative `NIXL_PLUGIN_DIR`.
fn check_plugin_dir_var(dir: &Path) -> Result<()> {
    if dir.is_absolute() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{}={} is a relative path: set it to an absolute directory",
            crate::settings::PLUGIN_DIR.name,
            dir.display()
        )))
    }
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

/// Opens the shared library at `path` once it is trusted ([`trust::check_trusted`]) and its
/// dynamic symbol table defines `entry` (nothing of it runs before both are known); never
/// closed. `dlopen` opens it again by its path: the file checked is still the file opened,
/// since its directory is writable only by this user or root (no one else can replace it).
pub(crate) fn open_trusted(path: &Path, entry: &CStr, what: &str) -> Result<Library> {
    let shown = path.display();
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("{what} path {shown} contains NUL")))?;
    trust::check_trusted(path, entry, what)?;
    // SAFETY: loading runs the library's initialisers: that trust is placed in a file that
    // passed `check_trusted` (its owner and mode, and its symbol table defining `entry`); the
    // handle is never closed.
    unsafe { Library::open(&c_path, dl::NOW_LOCAL_NODELETE) }
        .map_err(|e| Error::new(Status::Backend, format!("cannot load {what} {shown}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_plugin_dir_is_refused() {
        let e = check_plugin_dir_var(Path::new("plugins")).unwrap_err();
        assert_eq!(e.status, Status::InvalidParam);
        assert!(e.message.contains("relative path"), "{}", e.message);
        assert!(check_plugin_dir_var(Path::new("/opt/plugins")).is_ok());
    }
}
