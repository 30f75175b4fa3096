//! Messages across the C boundary: the copy into a caller's buffer that
//! `nixl_telemetry_last_error` and a Rust plug-in's `create` error buffer share, and the text a
//! C function (a plug-in, the C++ bridge) wrote into a buffer of ours.

use std::ffi::c_char;

/// Copies `text` into `buf` (truncated to `len - 1` bytes, NUL-terminated; nothing written when
/// `buf` is NULL or `len` is 0) and returns the full length of `text` in bytes.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
pub unsafe fn copy_c_string(text: &str, buf: *mut c_char, len: usize) -> usize {
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

/// The text a C function wrote into `buf`: up to its first NUL (all of `buf` if it has none),
/// invalid UTF-8 replaced.
pub fn text_in_c_buffer(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
