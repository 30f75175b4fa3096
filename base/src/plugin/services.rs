//! The plug-in side of the host services (`nixl_telemetry_plugin_host_t`): [`install`], which
//! `author`'s `create` calls with the host's table, routes the process services of a plug-in's
//! copy of this crate to the host's ([`installed`]): settings lookups
//! ([`crate::settings::process_settings`] through [`lookup_setting`]) and fork handlers
//! ([`crate::fork::install`] through [`join_fork_handlers`]). A plug-in whose host offers no
//! table keeps its own, as a separate library would. The host side is [`super::host`].

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicPtr, Ordering};

use super::abi::{
    nixl_telemetry_plugin_at_fork_fn_t, nixl_telemetry_plugin_host_t,
    nixl_telemetry_plugin_setting_fn_t,
};
use crate::constants::*;
use crate::error::{Error, Result};

/// The host's services, once a plug-in's `create` has installed them (`None` in the core's own
/// library, and in a plug-in whose host offers none).
static INSTALLED: AtomicPtr<nixl_telemetry_plugin_host_t> = AtomicPtr::new(std::ptr::null_mut());

/// Routes this copy's process services to the host's `services` (a plug-in calls it before it
/// uses any of them; the first table installed stays).
pub fn install(services: &'static nixl_telemetry_plugin_host_t) {
    let _ = INSTALLED.compare_exchange(
        std::ptr::null_mut(),
        services as *const _ as *mut _,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    crate::settings::route_to_host(|name| {
        lookup_setting(name)
            .unwrap_or_else(|| crate::settings::lookup(name).map(|s| s.map(|s| s.value)))
    });
    crate::fork::join_host(join_fork_handlers);
}

/// The host's services, when this copy of the crate is a plug-in's and its host offers them.
pub fn installed() -> Option<&'static nixl_telemetry_plugin_host_t> {
    // SAFETY: only ever set from a `&'static` table (see `install`).
    unsafe { INSTALLED.load(Ordering::Acquire).as_ref() }
}

/// Whether the host's table has field `end` (its offset plus size) in the struct it knows.
fn has_field(services: &nixl_telemetry_plugin_host_t, end: usize) -> bool {
    services.struct_size >= end
}

/// Looks setting `name` up through the host's `setting`: `None` when the host offers no such
/// service (the caller looks it up itself).
pub fn lookup_setting(name: &str) -> Option<Result<Option<String>>> {
    let services = installed()?;
    let end = std::mem::offset_of!(nixl_telemetry_plugin_host_t, setting)
        + std::mem::size_of::<nixl_telemetry_plugin_setting_fn_t>();
    let setting = services.setting.filter(|_| has_field(services, end))?;
    let Ok(c_name) = CString::new(name) else {
        return Some(Ok(None));
    };
    let mut buf = vec![0 as c_char; 256];
    loop {
        let mut needed = 0usize;
        // SAFETY: the host's function, with a NUL-terminated name and `buf.len()` writable
        // bytes, as the plug-in ABI asks.
        let status = unsafe { setting(c_name.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut needed) };
        if status == NIXL_TELEMETRY_SUCCESS && needed > buf.len() {
            buf = vec![0 as c_char; needed];
            continue;
        }
        let text = crate::c_string::text_in_c_buffer(&buf);
        return Some(match status {
            NIXL_TELEMETRY_SUCCESS => Ok(Some(text)),
            NIXL_TELEMETRY_ERR_NOT_FOUND => Ok(None),
            _ => Err(Error::invalid(text)),
        });
    }
}

/// Adds this copy's fork handlers to the host's: `true` when the host took them.
pub fn join_fork_handlers(
    prepare: unsafe extern "C" fn(),
    parent: unsafe extern "C" fn(),
    child: unsafe extern "C" fn(),
) -> bool {
    let Some(services) = installed() else {
        return false;
    };
    let end = std::mem::offset_of!(nixl_telemetry_plugin_host_t, at_fork)
        + std::mem::size_of::<nixl_telemetry_plugin_at_fork_fn_t>();
    let Some(at_fork) = services.at_fork.filter(|_| has_field(services, end)) else {
        return false;
    };
    // SAFETY: the host's function, given three handlers of this library (never unloaded: plug-ins
    // are opened with RTLD_NODELETE), as the plug-in ABI asks.
    unsafe { at_fork(Some(prepare), Some(parent), Some(child)) == NIXL_TELEMETRY_SUCCESS }
}
