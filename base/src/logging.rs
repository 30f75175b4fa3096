//! Where the library's messages go: through the `log` facade to stderr (one line each, with the
//! level), filtered by `NIXL_LOG_LEVEL`, or to a sink installed by the host (the C ABI's log
//! callback, wrapped in `ffi`). Tests can capture the messages logged on their own
//! thread (feature `test-util`).

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Once, OnceLock, RwLock};

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::constants::*;
use crate::fork::{HeldAcrossFork, LockOrder};
use crate::sync::RwLockUnpoisoned;

/// A host's destination for the messages that pass the threshold, called with each message's
/// level and text from any thread.
pub type LogSink = Arc<dyn Fn(Level, &str) + Send + Sync>;

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
    Host(LogSink),
}

static SINK: RwLock<Sink> = RwLock::new(Sink::Stderr);
static THRESHOLD: OnceLock<LevelFilter> = OnceLock::new();
static INSTALL: Once = Once::new();

thread_local! {
    static CAPTURE: RefCell<Option<Vec<(Level, String)>>> = const { RefCell::new(None) };
}

struct Logger;

static LOGGER: Logger = Logger;

/// This copy of the standard library's stderr lock, as a lock held across a fork.
struct StderrLock;

static STDERR: StderrLock = StderrLock;

impl HeldAcrossFork for StderrLock {
    fn hold(&'static self) -> Box<dyn std::any::Any> {
        Box::new(std::io::stderr().lock())
    }
}

/// Parses `NIXL_LOG_LEVEL` (TRACE, DEBUG, INFO, WARN, ERROR, FATAL; case-insensitive; default
/// WARN). An invalid value keeps the default and is reported once.
fn threshold() -> LevelFilter {
    *THRESHOLD.get_or_init(|| {
        // The environment, else NIXL's configuration file; a file that cannot be read is
        // reported here once (and again by whatever reads a setting from it).
        let setting = crate::settings::LOG_LEVEL;
        let raw = crate::settings::process_settings(setting.name).unwrap_or_else(|e| {
            eprintln!("[WARN nixl_telemetry] {}; using WARN", e.message);
            None
        });
        let level = raw.as_deref().unwrap_or(setting.default_str());
        match level.to_ascii_uppercase().as_str() {
            "TRACE" => LevelFilter::Trace,
            "DEBUG" => LevelFilter::Debug,
            "INFO" => LevelFilter::Info,
            "WARN" | "WARNING" => LevelFilter::Warn,
            "ERROR" => LevelFilter::Error,
            "FATAL" => LevelFilter::Off,
            _ => {
                eprintln!(
                    "[WARN nixl_telemetry] NIXL_LOG_LEVEL={:?} is not one of TRACE, DEBUG, INFO, \
                     WARN, ERROR, FATAL; using WARN",
                    level
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
        let sink = SINK.read_unpoisoned().clone();
        match &sink {
            Sink::Stderr => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[{} nixl_telemetry] {message}",
                    record.level()
                );
            }
            Sink::Host(sink) => sink(record.level(), &message),
        }
    }

    fn flush(&self) {}
}

/// Installs our logger as the `log` facade's logger (once; if the host program already set a
/// different logger, messages go to that one instead), and the fork handlers
/// ([`crate::fork::install`]): every constructor of the library calls this first, so this
/// copy's handlers are installed before any plug-in (whose copy installs its own) is loaded.
pub fn init() {
    crate::fork::install();
    INSTALL.call_once(|| {
        // Every message goes through the sink, then stderr: both are held across a fork.
        crate::fork::hold_across_fork(LockOrder::Logging, &SINK);
        crate::fork::hold_across_fork(LockOrder::Logging, &STDERR);
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(LevelFilter::Trace);
        }
    });
}

/// Sends messages to `sink` (or back to stderr when it is `None`).
pub fn set_sink(sink: Option<LogSink>) {
    init();
    let sink = match sink {
        Some(f) => Sink::Host(f),
        None => Sink::Stderr,
    };
    *SINK.write_unpoisoned() = sink;
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
