//! The FPM trace C ABI when the output location cannot be written: a distinct status, the
//! reason in the last-error message, one warning, and the caller carries on.

mod common;

use std::ffi::CStr;

use common::last_error;
use nixl_telemetry::fpm::*;
use nixl_telemetry_base::constants::*;
use nixl_telemetry_base::logging;

#[test]
fn an_unwritable_location_gives_a_distinct_status_and_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocker"), b"").unwrap();
    std::env::set_var("DYN_FPM_TRACE", "1");
    std::env::set_var("DYN_FPM_OUTPUT_PATH", dir.path().join("blocker/fpm"));
    let (status, logged) = logging::capture(|| {
        let mut t: *mut nixl_telemetry_fpm_trace_t = std::ptr::dangling_mut();
        // SAFETY: static C strings, a live CString and a local out-parameter.
        let s = unsafe {
            nixl_telemetry_fpm_trace_open(c"ns".as_ptr(), c"c".as_ptr(), c"7".as_ptr(), &mut t)
        };
        assert!(t.is_null());
        s
    });
    assert_eq!(status, NIXL_TELEMETRY_ERR_UNWRITABLE);
    assert!(
        last_error().contains("not writable for producer '7'"),
        "{}",
        last_error()
    );
    let warnings = logging::warnings(&logged);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing created"
    );

    // The warning is given once per producer per process, whatever the number of opens.
    let open = |producer: &CStr| {
        logging::capture(|| {
            let mut t: *mut nixl_telemetry_fpm_trace_t = std::ptr::dangling_mut();
            // SAFETY: static C strings, a live CString and a local out-parameter.
            let s = unsafe {
                nixl_telemetry_fpm_trace_open(
                    c"ns".as_ptr(),
                    c"other".as_ptr(),
                    producer.as_ptr(),
                    &mut t,
                )
            };
            assert!(t.is_null());
            s
        })
    };
    for _ in 0..3 {
        let (status, logged) = open(c"7");
        assert_eq!(status, NIXL_TELEMETRY_ERR_UNWRITABLE);
        assert_eq!(logging::warnings(&logged), Vec::<&str>::new());
    }
    let (status, logged) = open(c"8");
    assert_eq!(status, NIXL_TELEMETRY_ERR_UNWRITABLE);
    assert_eq!(logging::warnings(&logged).len(), 1, "{logged:?}");
    assert_eq!(logging::warnings(&open(c"8").1).len(), 0);
}
