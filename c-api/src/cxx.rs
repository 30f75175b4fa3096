//! C++ symbols NIXL's own sources link against, defined in this library so that a NIXL build
//! which drops `src/core/telemetry/` (its telemetry core) and links `libnixl_telemetry` still
//! finds them: `nixlTelemetryEventTypeForStatus`, declared by `include/nixl_telemetry.hpp`
//! (and, identically, by NIXL's `telemetry_event.h`), and the two static plug-in creators
//! NIXL's plug-in manager references. The library defines them once, so there is no inline definition that
//! could clash with NIXL's declaration. Not part of the C header: their names are C++ names
//! (Itanium ABI mangling, as GCC and Clang use on Linux).

use crate::boundary;
use nixl_telemetry_base::event::{xfer_stalled_event, EventType};
use nixl_telemetry_base::settings::process_settings;

/// `nixl_telemetry_event_type_t nixlTelemetryEventTypeForStatus(nixl_status_t s)`: the error
/// event of a negative `nixl_status_t` (-1 -> 8 ... -12 -> 19), as the library records it: -13
/// (`NIXL_ERR_XFER_STALLED`, NIXL's open pull request #2047) -> 21 when
/// `NIXL_TELEMETRY_XFER_STALLED_EVENT` is true, else 15. Both enums are passed as their
/// underlying integers (`nixl_status_t` is an `int`-sized unscoped enum, the event type a
/// `uint32_t` scoped enum). NIXL aborts for any other status; this one logs an error and
/// returns `AGENT_ERR_UNKNOWN` (15), so a stray status never takes the process down.
#[unsafe(export_name = "_Z31nixlTelemetryEventTypeForStatus13nixl_status_t")]
pub extern "C" fn nixl_telemetry_cxx_event_type_for_status(status: i32) -> u32 {
    const UNKNOWN: u32 = EventType::AgentErrUnknown as u32;
    boundary::catch("nixlTelemetryEventTypeForStatus", UNKNOWN, || {
        EventType::from_nixl_status(status).map_or_else(
            || {
                log::error!(
                    "nixlTelemetryEventTypeForStatus expects a negative nixl_status_t error \
                     code (-1..-13), got {status}; counting it as agent_err_unknown"
                );
                UNKNOWN
            },
            // An invalid value of the setting fails every collector's creation, with its
            // message; here it counts as the default.
            |t| t.recorded_as(xfer_stalled_event(&process_settings).unwrap_or_default()) as u32,
        )
    })
}

/// `nixlTelemetryPlugin *createStaticBUFFERPlugin()`: NIXL's plug-in manager pre-registers
/// the built-in exporters through this creator (and the NOP one below), which NIXL defines in
/// its telemetry core. This library has `BUFFER` and `NOP` built in and chooses them itself,
/// so it returns NULL, which NIXL's manager takes as "no such static plug-in" (it logs its
/// INFO line and registers nothing).
#[unsafe(export_name = "_Z24createStaticBUFFERPluginv")]
pub extern "C" fn nixl_telemetry_cxx_create_static_buffer_plugin() -> *mut std::ffi::c_void {
    std::ptr::null_mut()
}

/// `nixlTelemetryPlugin *createStaticNOPPlugin()`: as the BUFFER one, NULL.
#[unsafe(export_name = "_Z21createStaticNOPPluginv")]
pub extern "C" fn nixl_telemetry_cxx_create_static_nop_plugin() -> *mut std::ffi::c_void {
    std::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_like_nixl() {
        for s in 1..=12 {
            assert_eq!(nixl_telemetry_cxx_event_type_for_status(-s), (7 + s) as u32);
        }
        assert_eq!(nixl_telemetry_cxx_event_type_for_status(0), 15);
        assert_eq!(nixl_telemetry_cxx_event_type_for_status(1), 15);
        // NIXL_ERR_XFER_STALLED as the library records it while the setting is unset (the
        // setting's other value: c_tests/test_nixl_dropin_cpp.cpp).
        assert_eq!(nixl_telemetry_cxx_event_type_for_status(-13), 15);
        assert_eq!(nixl_telemetry_cxx_event_type_for_status(-14), 15);
    }
}
