//! Where the library's messages go: through the `log` facade to stderr (one line each, with the
//! level), filtered by `NIXL_LOG_LEVEL`, or to a C callback installed by the host. Tests can
//! capture the messages logged on their own thread (feature `test-util`).

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};
use std::io::Write;
use std::sync::{Once, OnceLock, RwLock};

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::constants::*;

/// A C log callback: `level` is one of the `NIXL_TELEMETRY_LOG_*` values, `message` a
/// NUL-terminated string valid only during the call. It must not unwind (C++: `noexcept`).
pub type LogCallback =
    Option<unsafe extern "C" fn(level: i32, message: *const c_char, user_data: *mut c_void)>;

/// The `NIXL_TELEMETRY_LOG_*` value of `level`, as passed to log callbacks and `host_log`.
pub fn level_code(level: Level) -> i32 {
    match level {
        Level::Error => NIXL_TELEMETRY_LOG_ERROR,
        Level::Warn => NIXL_TELEMETRY_LOG_WARN,
        Level::Info => NIXL_TELEMETRY_LOG_INFO,
        Level::Debug => NIXL_TELEMETRY_LOG_DEBUG,
        Level::Trace => NIXL_TELEMETRY_LOG_TRACE,
    }
}

/// The level of a `NIXL_TELEMETRY_LOG_*` value (anything past debug is trace).
pub fn level_from_code(code: i32) -> Level {
    match code {
        NIXL_TELEMETRY_LOG_ERROR => Level::Error,
        NIXL_TELEMETRY_LOG_WARN => Level::Warn,
        NIXL_TELEMETRY_LOG_INFO => Level::Info,
        NIXL_TELEMETRY_LOG_DEBUG => Level::Debug,
        _ => Level::Trace,
    }
}

#[derive(Clone)]
enum Sink {
    Stderr,
    C(unsafe extern "C" fn(i32, *const c_char, *mut c_void), usize),
}

static SINK: RwLock<Sink> = RwLock::new(Sink::Stderr);
static THRESHOLD: OnceLock<LevelFilter> = OnceLock::new();
static INSTALL: Once = Once::new();

thread_local! {
    static CAPTURE: RefCell<Option<Vec<(Level, String)>>> = const { RefCell::new(None) };
}

struct Logger;

static LOGGER: Logger = Logger;

/// Parses `NIXL_LOG_LEVEL` (TRACE, DEBUG, INFO, WARN, ERROR, FATAL; case-insensitive; default
/// WARN). An invalid value keeps the default and is reported once.
fn threshold() -> LevelFilter {
    *THRESHOLD.get_or_init(|| {
        // The environment, else NIXL's configuration file; a file that cannot be read is
        // reported here once (and again by whatever reads a setting from it).
        let raw = crate::env::process_env("NIXL_LOG_LEVEL").unwrap_or_else(|e| {
            eprintln!("[WARN nixl_telemetry] {}; using WARN", e.message);
            None
        });
        match raw.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None => LevelFilter::Warn,
            Some("TRACE") => LevelFilter::Trace,
            Some("DEBUG") => LevelFilter::Debug,
            Some("INFO") => LevelFilter::Info,
            Some("WARN") | Some("WARNING") => LevelFilter::Warn,
            Some("ERROR") => LevelFilter::Error,
            Some("FATAL") => LevelFilter::Off,
            Some(_) => {
                eprintln!(
                    "[WARN nixl_telemetry] NIXL_LOG_LEVEL={:?} is not one of TRACE, DEBUG, INFO, \
                     WARN, ERROR, FATAL; using WARN",
                    raw.unwrap_or_default()
                );
                LevelFilter::Warn
            }
        }
    })
}

/// Whether this thread is capturing messages (false once its thread-locals are gone).
fn capturing() -> bool {
    CAPTURE
        .try_with(|c| c.try_borrow().map(|c| c.is_some()).unwrap_or(false))
        .unwrap_or(false)
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= threshold() || capturing()
    }

    fn log(&self, record: &Record) {
        let message = record.args().to_string();
        // `try_with`: messages can come from thread-local destructors or atexit handlers,
        // after this thread's capture slot is gone.
        let captured = CAPTURE
            .try_with(|c| match c.try_borrow_mut() {
                Ok(mut c) => match c.as_mut() {
                    Some(v) => {
                        v.push((record.level(), message.clone()));
                        true
                    }
                    None => false,
                },
                Err(_) => false,
            })
            .unwrap_or(false);
        if captured || record.level() > threshold() {
            return;
        }
        // A copy, so a callback may itself replace the sink without deadlocking.
        let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
        match &sink {
            Sink::Stderr => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[{} nixl_telemetry] {message}",
                    record.level()
                );
            }
            Sink::C(cb, user) => {
                let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
                // SAFETY: the host promised a valid, non-unwinding callback; the string lives
                // until after the call.
                unsafe {
                    cb(
                        level_code(record.level()),
                        text.as_ptr(),
                        *user as *mut c_void,
                    )
                };
            }
        }
    }

    fn flush(&self) {}
}

/// Installs our logger as the `log` facade's logger (once; if the host program already set a
/// different logger, messages go to that one instead).
pub fn init() {
    INSTALL.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(LevelFilter::Trace);
        }
    });
}

/// Sends messages to a C callback (or back to stderr when `cb` is `None`).
pub fn set_c_callback(cb: LogCallback, user_data: *mut c_void) {
    init();
    let sink = match cb {
        Some(f) => Sink::C(f, user_data as usize),
        None => Sink::Stderr,
    };
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = sink;
}

/// Runs `f` and returns, with its result, every message logged on this thread meanwhile
/// (at any level; they are not forwarded to the sink). A test hook (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<(Level, String)>) {
    init();
    let previous = CAPTURE.with(|c| c.borrow_mut().replace(Vec::new()));
    let result = f();
    let logged = CAPTURE.with(|c| std::mem::replace(&mut *c.borrow_mut(), previous));
    (result, logged.unwrap_or_default())
}

/// Only the warnings and errors among captured messages. A test hook (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub fn warnings(logged: &[(Level, String)]) -> Vec<&str> {
    logged
        .iter()
        .filter(|(l, _)| *l <= Level::Warn)
        .map(|(_, m)| m.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_sees_this_threads_messages_only() {
        let ((), logged) = capture(|| {
            log::warn!("one");
            std::thread::spawn(|| log::warn!("elsewhere"))
                .join()
                .unwrap();
            log::info!("two");
        });
        let texts: Vec<_> = logged.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(texts, ["one", "two"]);
        assert_eq!(warnings(&logged), ["one"]);
    }
}
