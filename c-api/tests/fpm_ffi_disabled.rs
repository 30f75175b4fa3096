//! The FPM trace C ABI when the environment disables tracing: a distinct status, the reason in
//! the last-error message, and one warning per process however many producers try.

mod common;

use common::last_error;
use nixl_telemetry::fpm::*;
use nixl_telemetry_base::constants::*;
use nixl_telemetry_base::logging;

#[test]
fn an_invalid_master_switch_disables_tracing_with_one_warning() {
    std::env::set_var("DYN_FPM_TRACE", "maybe");
    let (statuses, logged) = logging::capture(|| {
        ["1", "2", "3"]
            .iter()
            .map(|producer| {
                let producer = std::ffi::CString::new(*producer).unwrap();
                let mut t: *mut nixl_telemetry_fpm_trace_t = std::ptr::dangling_mut();
                // SAFETY: static C strings, a live CString and a local out-parameter.
                let s = unsafe {
                    nixl_telemetry_fpm_trace_open(
                        c"ns".as_ptr(),
                        c"c".as_ptr(),
                        producer.as_ptr(),
                        &mut t,
                    )
                };
                assert!(t.is_null());
                s
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(statuses, [NIXL_TELEMETRY_ERR_NO_TELEMETRY; 3]);
    assert!(
        last_error().contains("DYN_FPM_TRACE='maybe'"),
        "{}",
        last_error()
    );
    let warnings = logging::warnings(&logged);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("DYN_FPM_TRACE='maybe'"));
}
