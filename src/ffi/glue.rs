//! Machinery shared by the crate's C ABIs (`ffi`, `trace::ffi`, plug-in trampolines): per-thread
//! last-error slots, the panic boundary every `extern "C"` function runs its body in, and C
//! string argument checks.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::LocalKey;

/// A per-thread slot holding the message of the most recent failure of one C ABI.
pub(crate) struct ErrorSlot(&'static LocalKey<RefCell<String>>);

impl ErrorSlot {
    /// A slot backed by the thread-local `key`.
    pub(crate) const fn new(key: &'static LocalKey<RefCell<String>>) -> ErrorSlot {
        ErrorSlot(key)
    }

    /// Records `message` as this thread's last error. Never panics: during thread or process
    /// teardown (a call from a thread-local destructor or an atexit handler, after the slot is
    /// gone) the message is not kept.
    pub(crate) fn set(&self, message: &str) {
        let _ = self.0.try_with(|e| {
            if let Ok(mut e) = e.try_borrow_mut() {
                e.clear();
                e.push_str(message);
            }
        });
    }

    /// Copies the message into `buf` (truncated to `len - 1` bytes, NUL-terminated; nothing
    /// written when `buf` is NULL or `len` is 0) and returns its full length in bytes.
    ///
    /// # Safety
    /// `buf` is NULL or writable for `len` bytes.
    /// During thread or process teardown the slot reads as empty.
    pub(crate) unsafe fn copy_out(&self, buf: *mut c_char, len: usize) -> usize {
        let copy = |text: &str| {
            if !buf.is_null() && len > 0 {
                let n = text.len().min(len - 1);
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
            text.len()
        };
        self.0
            .try_with(|e| match e.try_borrow() {
                Ok(e) => copy(&e),
                Err(_) => copy(""),
            })
            .unwrap_or_else(|_| copy(""))
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs an ABI function's body; a panic becomes `on_panic`, with the message
/// `<function>: internal error: <panic>` recorded in `slot` (recording cannot panic).
#[inline(always)]
pub(crate) fn catch<T>(
    slot: &ErrorSlot,
    function: &str,
    on_panic: T,
    body: impl FnOnce() -> T,
) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            record_panic(slot, function, &*payload);
            on_panic
        }
    }
}

/// The cold half of [`catch`]: records a caught panic's message.
#[cold]
#[inline(never)]
fn record_panic(slot: &ErrorSlot, function: &str, payload: &(dyn Any + Send)) {
    slot.set(&format!(
        "{function}: internal error: {}",
        panic_message(payload)
    ));
}

/// Borrows a C string argument as UTF-8, or explains why it cannot be.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn str_arg<'a>(
    function: &str,
    arg: &str,
    ptr: *const c_char,
) -> Result<&'a str, String> {
    if ptr.is_null() {
        return Err(null_arg_message(function, arg));
    }
    CStr::from_ptr(ptr)
        .to_str()
        .map_err(|_| format!("{function}: argument '{arg}' is not valid UTF-8"))
}

/// The message for a NULL pointer argument.
pub(crate) fn null_arg_message(function: &str, arg: &str) -> String {
    format!("{function}: argument '{arg}' is NULL")
}
