//! Writing an exporter plug-in in Rust: implement [`TelemetryPlugin`] for your exporter type
//! and invoke [`export_telemetry_plugin!`](crate::export_telemetry_plugin) once in a `cdylib`
//! crate named `telemetry_exporter_<name>`. The macro defines `nixl_telemetry_plugin_init`
//! returning a static version-3 descriptor whose trampolines catch every panic at the C
//! boundary and route the plug-in's `log` messages into the host's logging, and its settings
//! lookups and fork handlers to the host's ([`super::services::install`]).

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use super::abi::*;
use crate::c_string::copy_c_string;
use crate::constants::*;
use crate::error::panic_message;
use crate::event::Event;
use crate::logging::level_code;

/// What `create` receives.
#[derive(Clone, Copy, Debug)]
pub struct InitParams<'a> {
    /// The agent's name.
    pub agent_name: &'a str,
    /// The staging capacity: a batch has at most this many events plus one drop report.
    pub max_events_buffered: usize,
}

/// Why `create` failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateError {
    /// A configuration value is invalid (the message names it).
    InvalidParam(String),
    /// The scrape port is held by another process: benign, the agent runs without a sink.
    BindFailed(String),
    /// Any other failure.
    Other(String),
}

/// An exporter plug-in written in Rust.
pub trait TelemetryPlugin: Sized + Send + 'static {
    /// The exporter's name (as in `libtelemetry_exporter_<NAME>.so`).
    const NAME: &'static CStr;
    /// The plug-in's version.
    const VERSION: &'static CStr;

    /// Creates one agent's exporter.
    fn create(params: &InitParams) -> Result<Self, CreateError>;

    /// Exports a batch in order; returns how many events were kept.
    fn export(&mut self, events: &[Event]) -> usize;

    /// Called, on the flush thread, for a flush that had nothing to export (a batch of 0
    /// events), every run interval while the agent is idle; `export` never sees an empty
    /// batch. The default does nothing.
    fn tick(&mut self) {}
}

/// The descriptor for `T` (used by [`export_telemetry_plugin!`](crate::export_telemetry_plugin)).
pub const fn descriptor<T: TelemetryPlugin>() -> nixl_telemetry_plugin_desc_t {
    nixl_telemetry_plugin_desc_t {
        api_version: NIXL_TELEMETRY_PLUGIN_API_VERSION,
        struct_size: std::mem::size_of::<nixl_telemetry_plugin_desc_t>() as u32,
        name: T::NAME.as_ptr(),
        version: T::VERSION.as_ptr(),
        create: Some(create::<T>),
        export_batch: Some(export::<T>),
        destroy: Some(destroy::<T>),
    }
}

unsafe extern "C" fn create<T: TelemetryPlugin>(
    params: *const nixl_telemetry_plugin_params_t,
    state: *mut *mut c_void,
    error_buf: *mut c_char,
    error_len: usize,
) -> nixl_telemetry_status_t {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the host passes NULL or a params struct valid for the call.
        let Some(p) = (unsafe { params.as_ref() }) else {
            return Err(CreateError::InvalidParam("NULL argument to create".into()));
        };
        if state.is_null() || p.agent_name.is_null() {
            return Err(CreateError::InvalidParam("NULL argument to create".into()));
        }
        // Fields beyond `struct_size` do not exist in an older host's struct.
        let has = |end: usize| p.struct_size >= end;
        let log_end = std::mem::offset_of!(nixl_telemetry_plugin_params_t, host_log)
            + std::mem::size_of::<nixl_telemetry_plugin_log_fn_t>();
        if has(log_end) {
            install_host_log(p.host_log);
        }
        let host_end = std::mem::offset_of!(nixl_telemetry_plugin_params_t, host)
            + std::mem::size_of::<*const nixl_telemetry_plugin_host_t>();
        if has(host_end) {
            // SAFETY: the host passes NULL or its static services table (the plug-in ABI's
            // contract: valid for the life of the process).
            if let Some(services) = unsafe { p.host.as_ref() } {
                super::services::install(services);
            }
        }
        // SAFETY: not NULL (checked above) and NUL-terminated by the plug-in ABI's contract.
        let agent = unsafe { CStr::from_ptr(p.agent_name) }
            .to_str()
            .map_err(|_| CreateError::InvalidParam("agent name is not UTF-8".into()))?;
        let exporter = T::create(&InitParams {
            agent_name: agent,
            max_events_buffered: p.max_events_buffered,
        })?;
        // SAFETY: `state` is not NULL (checked above) and writable by the ABI's contract.
        unsafe { *state = Box::into_raw(Box::new(exporter)) as *mut c_void };
        Ok(())
    }));
    let (status, message) = match result {
        Ok(Ok(())) => return NIXL_TELEMETRY_SUCCESS,
        Ok(Err(CreateError::InvalidParam(m))) => (NIXL_TELEMETRY_ERR_INVALID_PARAM, m),
        Ok(Err(CreateError::BindFailed(m))) => (NIXL_TELEMETRY_ERR_BIND_FAILED, m),
        Ok(Err(CreateError::Other(m))) => (NIXL_TELEMETRY_ERR_UNKNOWN, m),
        Err(p) => (
            NIXL_TELEMETRY_ERR_PANIC,
            format!("panic: {}", panic_message(&*p)),
        ),
    };
    // SAFETY: the host gave `error_len` writable bytes at `error_buf` (or NULL).
    unsafe { copy_c_string(&message, error_buf, error_len) };
    status
}

unsafe extern "C" fn export<T: TelemetryPlugin>(
    state: *mut c_void,
    events: *const Event,
    count: usize,
) -> usize {
    if state.is_null() || (events.is_null() && count > 0) {
        return 0;
    }
    // SAFETY: `state` came from `create::<T>` (a boxed `T`), and the host calls export for one
    // state from one thread at a time (the plug-in ABI's contract), so the borrow is exclusive.
    let exporter = unsafe { &mut *(state as *mut T) };
    let run = || {
        if count == 0 {
            exporter.tick();
            return 0;
        }
        // SAFETY: not NULL, and `count` readable events by the plug-in ABI's contract.
        let events = unsafe { std::slice::from_raw_parts(events, count) };
        exporter.export(events)
    };
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|p| {
        log::error!("exporter {:?} panicked: {}", T::NAME, panic_message(&*p));
        0
    })
}

unsafe extern "C" fn destroy<T: TelemetryPlugin>(state: *mut c_void) {
    if !state.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `state` came from `create::<T>` (Box::into_raw of a `T`) and the host
            // destroys each state exactly once.
            drop(unsafe { Box::from_raw(state as *mut T) })
        }));
    }
}

/// The host's log function, as a usize (0 = none).
static HOST_LOG: AtomicUsize = AtomicUsize::new(0);
static LOGGER_INSTALLED: Once = Once::new();

struct HostLogger;

impl log::Log for HostLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        HOST_LOG.load(Ordering::Relaxed) != 0
            && crate::logging::admits(metadata.target(), metadata.level())
    }

    fn log(&self, record: &log::Record) {
        let f = HOST_LOG.load(Ordering::Relaxed);
        if f == 0 {
            return;
        }
        // SAFETY: stored from a valid `host_log` function pointer.
        let f: unsafe extern "C" fn(i32, *const c_char) = unsafe { std::mem::transmute(f) };
        if !crate::logging::admits(record.target(), record.level()) {
            return;
        }
        let text = record.args().to_string();
        let text = crate::logging::mask_secrets(&text).replace('\0', " ");
        let text = CString::new(text).unwrap_or_default();
        // SAFETY: the host's function is thread-safe by contract; the string outlives the call.
        unsafe { f(level_code(record.level()), text.as_ptr()) };
    }

    fn flush(&self) {}
}

static HOST_LOGGER: HostLogger = HostLogger;

/// Routes this plug-in's `log` messages to the host (when the plug-in's own copy of the `log`
/// facade has no logger yet). In a plug-in, `log` is the plug-in's own static copy.
fn install_host_log(f: nixl_telemetry_plugin_log_fn_t) {
    if let Some(f) = f {
        HOST_LOG.store(f as usize, Ordering::Relaxed);
        LOGGER_INSTALLED.call_once(|| {
            if log::set_logger(&HOST_LOGGER).is_ok() {
                log::set_max_level(log::LevelFilter::Trace);
            }
        });
    }
}

/// Defines `nixl_telemetry_plugin_init` for the plug-in type `$ty` (which implements
/// [`TelemetryPlugin`]).
#[macro_export]
macro_rules! export_telemetry_plugin {
    ($ty:ty) => {
        /// The plug-in entry point: returns the static version-3 descriptor.
        #[unsafe(no_mangle)]
        pub extern "C" fn nixl_telemetry_plugin_init(
        ) -> *const $crate::plugin::abi::nixl_telemetry_plugin_desc_t {
            static DESCRIPTOR: $crate::plugin::abi::nixl_telemetry_plugin_desc_t =
                $crate::plugin::author::descriptor::<$ty>();
            &DESCRIPTOR
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plug-in whose `create` panics.
    struct Panicking;

    impl TelemetryPlugin for Panicking {
        const NAME: &'static CStr = c"panicking";
        const VERSION: &'static CStr = c"0";
        fn create(_: &InitParams) -> Result<Self, CreateError> {
            panic!("create went wrong")
        }
        fn export(&mut self, events: &[Event]) -> usize {
            events.len()
        }
    }

    #[test]
    fn a_panic_in_create_is_the_panic_status_with_its_message() {
        let params = nixl_telemetry_plugin_params_t {
            struct_size: std::mem::offset_of!(nixl_telemetry_plugin_params_t, host_log),
            agent_name: c"agent".as_ptr(),
            max_events_buffered: 16,
            host_log: None,
            host_event_name: None,
            host: std::ptr::null(),
        };
        let mut state = std::ptr::null_mut();
        let mut message = [0 as c_char; 128];
        let create = descriptor::<Panicking>().create.unwrap();
        // SAFETY: valid params, a writable state pointer and a buffer of the length given.
        let status = unsafe { create(&params, &mut state, message.as_mut_ptr(), message.len()) };
        assert_eq!(status, NIXL_TELEMETRY_ERR_PANIC);
        assert!(state.is_null());
        let text = crate::c_string::text_in_c_buffer(&message);
        assert_eq!(text, "panic: create went wrong");
    }
}
