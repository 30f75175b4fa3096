//! The FPM trace C ABI when the environment disables tracing: a distinct status, the reason in
//! the last-error message, and one warning per process however many producers try.

use std::ffi::{c_char, CStr};

use nixl_telemetry::logging;
use nixl_telemetry::trace::ffi::*;

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    unsafe { nixl_fpm_trace_last_error(buf.as_mut_ptr(), buf.len()) };
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn an_invalid_master_switch_disables_tracing_with_one_warning() {
    std::env::set_var("DYN_FPM_TRACE", "maybe");
    let (statuses, logged) = logging::capture(|| {
        ["1", "2", "3"]
            .iter()
            .map(|producer| {
                let producer = std::ffi::CString::new(*producer).unwrap();
                let mut t: *mut nixl_fpm_trace_t = 1 as *mut _;
                let s = unsafe {
                    nixl_fpm_trace_open(c"ns".as_ptr(), c"c".as_ptr(), producer.as_ptr(), &mut t)
                };
                assert!(t.is_null());
                s
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(statuses, [NIXL_TELEMETRY_FPM_ERR_DISABLED; 3]);
    assert!(
        last_error().contains("DYN_FPM_TRACE='maybe'"),
        "{}",
        last_error()
    );
    let warnings = logging::warnings(&logged);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("DYN_FPM_TRACE='maybe'"));
}
