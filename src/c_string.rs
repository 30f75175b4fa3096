//! Handing a message to C: the copy into a caller's buffer that `nixl_telemetry_last_error` and
//! a Rust plug-in's `create` error buffer share.

use std::ffi::c_char;

/// Copies `text` into `buf` (truncated to `len - 1` bytes, NUL-terminated; nothing written when
/// `buf` is NULL or `len` is 0) and returns the full length of `text` in bytes.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
pub(crate) unsafe fn copy_c_string(text: &str, buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `n + 1 <= len` bytes are written into `buf`, which the caller promised is
        // writable for `len` bytes; `text` is a distinct Rust string, so they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}
