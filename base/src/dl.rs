//! The dynamic loader (`dlopen(3)`, `dlsym(3)`, `dlerror(3)`) behind one small wrapper, for the
//! core's plug-in loader and the DOCA plug-in (which loads DOCA's libraries): a [`Library`]
//! handle that is never closed, and errors that carry the loader's own message.
//!
//! A library opened here stays loaded for the rest of the process (there is no `dlclose`): its
//! users hand out function pointers into it with no lifetime to track.

use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::ptr::NonNull;

/// `RTLD_NOW | RTLD_LOCAL`: every symbol resolved at load time, none made available to
/// libraries loaded later.
pub const NOW_LOCAL: c_int = libc::RTLD_NOW | libc::RTLD_LOCAL;

/// [`NOW_LOCAL`] with `RTLD_NODELETE`: the library is not unloaded even by a `dlclose` of
/// another handle to it.
pub const NOW_LOCAL_NODELETE: c_int = NOW_LOCAL | libc::RTLD_NODELETE;

/// A failed `dlopen` or `dlsym`: the loader's message (`dlerror`), or, for a missing symbol,
/// which one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlError {
    message: String,
}

impl DlError {
    /// The message, as `dlerror` gave it (for `dlopen`) or `symbol NAME is missing (...)`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DlError {}

/// This thread's pending `dlerror` message, consumed (the next call returns none until another
/// `dl*` call fails).
fn take_error() -> Option<String> {
    // SAFETY: dlerror(3) has no preconditions; it returns NULL or this thread's pending
    // NUL-terminated message, valid until this thread's next dl* call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        None
    } else {
        // SAFETY: `e` is non-null, so it is that message, and it is copied into an owned
        // `String` before this thread makes another dl* call that could overwrite it.
        Some(unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned())
    }
}

/// A shared library opened with `dlopen`; never closed, so the handle, and every symbol found
/// in it, stay valid for the rest of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Library {
    handle: NonNull<c_void>,
}

// SAFETY: the handle is an opaque token of the dynamic loader, which is thread-safe (dlsym may
// be called with it from any thread), and it is never closed.
unsafe impl Send for Library {}
// SAFETY: as above: `&Library` only allows `dlsym` lookups, which the loader serialises.
unsafe impl Sync for Library {}

impl Library {
    /// `dlopen(name, flags)`: `name` is a path (with a `/`) or a name for the loader's search
    /// path; `flags` is [`NOW_LOCAL`], [`NOW_LOCAL_NODELETE`] or another `RTLD_*` mode. The error
    /// is `dlerror`'s message.
    ///
    /// # Safety
    /// Opening a library runs its initialisers (and those of the libraries it needs) in this
    /// process: the caller trusts the file `name` resolves to to be sound code.
    pub unsafe fn open(name: &CStr, flags: c_int) -> Result<Library, DlError> {
        // SAFETY: `name` is a NUL-terminated string that outlives the call, the only pointer
        // dlopen(3) reads; running the library's initialisers is this function's contract.
        let handle = unsafe { libc::dlopen(name.as_ptr(), flags) };
        match NonNull::new(handle) {
            Some(handle) => Ok(Library { handle }),
            None => Err(DlError {
                message: take_error().unwrap_or_else(|| "unknown dynamic loader error".into()),
            }),
        }
    }

    /// The address of the symbol `name` (`dlsym`); a missing symbol is an error naming it, with
    /// `dlerror`'s message. Using the address (as a function of some signature, or as data) is
    /// the caller's unsafe business.
    pub fn symbol(&self, name: &CStr) -> Result<NonNull<c_void>, DlError> {
        // Clears this thread's pending error, so that a message read after a NULL `dlsym`
        // describes this lookup.
        let _ = take_error();
        // SAFETY: `self.handle` is a live `dlopen` handle (never closed) and `name` is a
        // NUL-terminated string that outlives the call, which only reads it.
        let p = unsafe { libc::dlsym(self.handle.as_ptr(), name.as_ptr()) };
        NonNull::new(p).ok_or_else(|| DlError {
            message: format!(
                "symbol {} is missing ({})",
                name.to_string_lossy(),
                take_error().unwrap_or_else(|| "its address is NULL".into())
            ),
        })
    }

    /// The raw `dlopen` handle.
    pub fn as_ptr(&self) -> *mut c_void {
        self.handle.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libc is loaded in every process; a `NOLOAD` open returns the handle without loading.
    fn libc_so() -> Library {
        // SAFETY: libc.so.6 is already loaded in this process (the test binary links it), so
        // nothing new is initialised.
        unsafe { Library::open(c"libc.so.6", NOW_LOCAL | libc::RTLD_NOLOAD) }.unwrap()
    }

    #[test]
    fn a_symbol_is_found_and_is_the_function() {
        let strlen = libc_so().symbol(c"strlen").unwrap();
        // SAFETY: `strlen` in libc has this C signature.
        let f: unsafe extern "C" fn(*const std::ffi::c_char) -> usize =
            unsafe { std::mem::transmute(strlen.as_ptr()) };
        // SAFETY: a NUL-terminated string.
        assert_eq!(unsafe { f(c"four".as_ptr()) }, 4);
    }

    #[test]
    fn a_missing_symbol_names_itself_and_the_loaders_message() {
        let e = libc_so().symbol(c"nixl_no_such_symbol").unwrap_err();
        assert!(
            e.message()
                .starts_with("symbol nixl_no_such_symbol is missing ("),
            "{e}"
        );
        assert!(e.message().contains("undefined symbol"), "{e}");
    }

    #[test]
    fn a_missing_library_is_the_loaders_message() {
        // SAFETY: the file does not exist: nothing is loaded.
        let e =
            unsafe { Library::open(c"/nonexistent/libnixl_nothing.so", NOW_LOCAL) }.unwrap_err();
        assert!(
            e.message().contains("/nonexistent/libnixl_nothing.so"),
            "{e}"
        );
        assert!(e.message().contains("No such file or directory"), "{e}");
    }
}
