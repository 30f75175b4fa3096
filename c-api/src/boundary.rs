//! The boundary every `extern "C"` function of the crate runs on: one per-thread last-error
//! slot, the panic boundary, the argument checks (handles, out-parameters, strings, paths,
//! versioned structs) and the making and releasing of handles, so an entry point is a short
//! body of `?`s and the NULL checks are written once.
//!
//! Each entry point names itself once, in a `const FUNCTION: &str`, which prefixes its error
//! messages (`<function>: argument 'out' is NULL`).

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, OsStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use nixl_telemetry_base::c_string::copy_c_string;
use nixl_telemetry_base::constants::{nixl_telemetry_status_t, NIXL_TELEMETRY_ERR_PANIC};
use nixl_telemetry_base::error::{panic_message, Error, Result};

thread_local! {
    /// The message of this thread's most recent failed call, for `nixl_telemetry_last_error`.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `message` as this thread's last error. Never panics: during thread or process
/// teardown (a call from a thread-local destructor or an atexit handler, after the slot is gone)
/// the message is not kept.
pub(crate) fn set_last_error(message: &str) {
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e.clear();
            e.push_str(message);
        }
    });
}

/// Copies this thread's last error into `buf` as [`copy_c_string`] does; during thread or
/// process teardown the slot reads as empty.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
pub(crate) unsafe fn copy_last_error(buf: *mut c_char, len: usize) -> usize {
    let copy = |text: &str| {
        // SAFETY: the caller's contract on `buf` and `len` is passed on unchanged.
        unsafe { copy_c_string(text, buf, len) }
    };
    LAST_ERROR
        .try_with(|e| match e.try_borrow() {
            Ok(e) => copy(&e),
            Err(_) => copy(""),
        })
        .unwrap_or_else(|_| copy(""))
}

/// This thread's last error (for unit tests).
#[cfg(test)]
pub(crate) fn last_error_text() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

/// Records the failure's message and returns its status code.
pub(crate) fn fail(error: &Error) -> nixl_telemetry_status_t {
    set_last_error(&error.message);
    error.status.code()
}

/// Runs an ABI function's body; a panic becomes `on_panic`, with the message
/// `<function>: internal error: <panic>` as the last error (recording cannot panic).
#[inline(always)]
pub(crate) fn catch<T>(function: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            record_panic(function, &*payload);
            on_panic
        }
    }
}

/// Runs the body of an ABI function that returns a status: `Err` is recorded as the last error
/// and its status returned; a panic gives `NIXL_TELEMETRY_ERR_PANIC`.
#[inline(always)]
pub(crate) fn entry(
    function: &str,
    body: impl FnOnce() -> Result<nixl_telemetry_status_t>,
) -> nixl_telemetry_status_t {
    catch(function, NIXL_TELEMETRY_ERR_PANIC, || match body() {
        Ok(status) => status,
        Err(e) => fail(&e),
    })
}

/// The cold half of [`catch`]: records a caught panic's message.
#[cold]
#[inline(never)]
fn record_panic(function: &str, payload: &(dyn Any + Send)) {
    set_last_error(&format!(
        "{function}: internal error: {}",
        panic_message(payload)
    ));
}

/// The error for a NULL pointer argument.
#[cold]
pub(crate) fn null_arg(function: &str, arg: &str) -> Error {
    Error::invalid(format!("{function}: argument '{arg}' is NULL"))
}

/// Borrows the object behind a handle argument, or explains that it is NULL.
///
/// # Safety
/// `ptr` is NULL or points to a live object that is not mutated during the call.
pub(crate) unsafe fn handle<'a, T>(function: &str, arg: &str, ptr: *const T) -> Result<&'a T> {
    // SAFETY: the caller's contract: NULL or a live object.
    unsafe { ptr.as_ref() }.ok_or_else(|| null_arg(function, arg))
}

/// Borrows the object behind a handle argument mutably, or explains that it is NULL.
///
/// # Safety
/// `ptr` is NULL or points to a live object used by no one else during the call.
pub(crate) unsafe fn handle_mut<'a, T>(
    function: &str,
    arg: &str,
    ptr: *mut T,
) -> Result<&'a mut T> {
    // SAFETY: the caller's contract: NULL or a live object, exclusively ours for the call.
    unsafe { ptr.as_mut() }.ok_or_else(|| null_arg(function, arg))
}

/// Checks an out-parameter: an error when it is NULL.
pub(crate) fn out_arg<T>(function: &str, arg: &str, ptr: *mut T) -> Result<*mut T> {
    if ptr.is_null() {
        Err(null_arg(function, arg))
    } else {
        Ok(ptr)
    }
}

/// Writes `value` to the out-parameter `out`, or explains that it is NULL.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn write_out<T>(function: &str, arg: &str, out: *mut T, value: T) -> Result<()> {
    let out = out_arg(function, arg, out)?;
    // SAFETY: not NULL, and writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Checks a handle out-parameter and sets `*out` to NULL, so it is NULL on every failure.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn handle_out<T>(function: &str, out: *mut *mut T) -> Result<*mut *mut T> {
    let out = out_arg(function, "out", out)?;
    // SAFETY: `out` is not NULL and, by the caller's contract, writable.
    unsafe { *out = std::ptr::null_mut() };
    Ok(out)
}

/// Borrows a C string argument's bytes, or explains that it is NULL.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
unsafe fn c_str_arg<'a>(function: &str, arg: &str, ptr: *const c_char) -> Result<&'a CStr> {
    if ptr.is_null() {
        return Err(null_arg(function, arg));
    }
    // SAFETY: not NULL, and NUL-terminated and valid for the call by the caller's contract.
    Ok(unsafe { CStr::from_ptr(ptr) })
}

/// Borrows a C string argument as UTF-8, or explains why it cannot be.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn str_arg<'a>(function: &str, arg: &str, ptr: *const c_char) -> Result<&'a str> {
    // SAFETY: the caller's contract is c_str_arg's.
    unsafe { c_str_arg(function, arg, ptr) }?
        .to_str()
        .map_err(|_| Error::invalid(format!("{function}: argument '{arg}' is not valid UTF-8")))
}

/// Borrows an optional C string argument as UTF-8: NULL is `None`.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn opt_str_arg<'a>(
    function: &str,
    arg: &str,
    ptr: *const c_char,
) -> Result<Option<&'a str>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract is str_arg's.
    unsafe { str_arg(function, arg, ptr) }.map(Some)
}

/// Reads a versioned struct whose first field is its `struct_size` (a `size_t`, the size the
/// caller was compiled with): copies that many bytes over a zeroed `T`, so fields beyond the
/// caller's size read as zero (unset). NULL gives `None`; a size smaller than the `size_t`
/// itself or larger than `T` (a caller built against a newer header) is an invalid argument.
///
/// # Safety
/// `ptr` is NULL or readable for the `struct_size` bytes it declares; `T` is a `repr(C)` type
/// for which all-zero bytes are a valid value and whose first field is a `usize`.
pub(crate) unsafe fn versioned_arg<T>(
    function: &str,
    arg: &str,
    ptr: *const T,
) -> Result<Option<T>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: not NULL, and its first field is a readable size_t by the caller's contract.
    let size = unsafe { ptr.cast::<usize>().read_unaligned() };
    let max = std::mem::size_of::<T>();
    if size < std::mem::size_of::<usize>() || size > max {
        return Err(Error::invalid(format!(
            "{function}: '{arg}' declares struct_size {size}; this library accepts {} to {max} \
             (set it to sizeof the struct; a larger size comes from a newer header)",
            std::mem::size_of::<usize>()
        )));
    }
    let mut value = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: `ptr` is readable for `size` bytes (caller's contract), `size <= size_of::<T>()`,
    // the two do not overlap, and all-zero bytes overwritten by a prefix of a valid `T` (as the
    // caller's header lays it out) make a valid `T`.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), value.as_mut_ptr().cast::<u8>(), size);
        Ok(Some(value.assume_init()))
    }
}

/// Borrows a C string argument as a path (any bytes but NUL), or explains that it is NULL.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn path_arg<'a>(
    function: &str,
    arg: &str,
    ptr: *const c_char,
) -> Result<&'a Path> {
    // SAFETY: the caller's contract is c_str_arg's.
    let bytes = unsafe { c_str_arg(function, arg, ptr) }?.to_bytes();
    Ok(Path::new(
        <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes),
    ))
}

/// Makes a new handle: checks the out-parameter `out` and sets it to NULL, runs `make`, and
/// stores its value, moved to the heap, in `*out` (released with [`release`]). Returns SUCCESS,
/// or `make`'s error with `*out` left NULL.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn new_handle<T>(
    function: &str,
    out: *mut *mut T,
    make: impl FnOnce() -> Result<T>,
) -> Result<nixl_telemetry_status_t> {
    // SAFETY: the caller's contract is handle_out's.
    let out = unsafe { handle_out(function, out) }?;
    let value = make()?;
    // SAFETY: checked writable above; ownership passes to the caller.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(nixl_telemetry_base::constants::NIXL_TELEMETRY_SUCCESS)
}

/// Releases a handle made by [`new_handle`]; NULL is a no-op.
///
/// # Safety
/// `ptr` is NULL or a pointer from [`new_handle`] not yet released, with no call on it in progress.
pub(crate) unsafe fn release<T>(ptr: *mut T) -> Option<T> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: made by Box::into_raw in `new_handle` and released once, by the caller's contract.
    Some(*unsafe { Box::from_raw(ptr) })
}
