//! Helpers shared by the tests that call the C ABI through this crate's rlib.

/// This thread's last C ABI error message (`nixl_telemetry_last_error`), checking that the
/// length it returns is the message's.
pub fn last_error() -> String {
    let mut buf = [0 as std::ffi::c_char; 1024];
    // SAFETY: `buf` is writable for its whole length.
    let n = unsafe { nixl_telemetry::nixl_telemetry_last_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: the function NUL-terminates what it writes into a non-empty buffer.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(n, text.len(), "the returned length is the message's");
    text
}
