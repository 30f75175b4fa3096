//! Where the library's messages go: through the `log` facade to stderr (one line each, with the
//! level), filtered by `NIXL_LOG_LEVEL`, or to a sink installed by the host (the C ABI's log
//! callback, wrapped in `ffi`). Tests can capture the messages logged on their own
//! thread (feature `test-util`).
//!
//! Every message is made safe for a terminal and for line-based log readers once, here
//! ([`escape_controls`]): text that came from the network or from files (a receiver's error
//! answer, a file's content) cannot write escape sequences into an operator's terminal or
//! split one message over several lines. A line goes to stderr in one `write`
//! ([`write_stderr_line`]), so the lines of processes sharing stderr do not interleave within a
//! line.
//!
//! No secret reaches a log line, whichever crate wrote the record and at every level
//! ([`admits`], [`mask_secrets`]): the HTTP client's own messages (ureq's, which dump requests
//! with their headers) are never logged; other dependencies' records pass only as warnings and
//! errors; and every record, ours included, has each configured secret ([`add_secret`]: header
//! values, passwords, tokens, URL user-info) replaced by `<redacted>`. A plug-in's copy of this
//! crate applies the same rule before it hands a message to the host, which applies its own.

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once, RwLock};

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
/// The configured secrets no message may show ([`add_secret`]).
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());
/// The threshold once known: 0 until then, else [`LevelFilter`] as `usize` plus 1. Not a
/// `OnceLock`: its value comes from NIXL's configuration file, whose first read may be slow, and
/// a child forked meanwhile would wait forever for the parent's thread to finish the
/// `OnceLock`; here the child finds 0 and works it out itself.
static THRESHOLD: AtomicUsize = AtomicUsize::new(0);
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
/// WARN). An invalid value keeps the default and is reported once (by the thread that publishes
/// the threshold, should two work it out at once).
fn threshold() -> LevelFilter {
    const FILTERS: [LevelFilter; 6] = [
        LevelFilter::Off,
        LevelFilter::Error,
        LevelFilter::Warn,
        LevelFilter::Info,
        LevelFilter::Debug,
        LevelFilter::Trace,
    ];
    if let Some(known) = THRESHOLD.load(Ordering::Acquire).checked_sub(1) {
        return FILTERS[known];
    }
    // The environment, else NIXL's configuration file; a file that cannot be read is
    // reported here once (and again by whatever reads a setting from it).
    let setting = crate::settings::LOG_LEVEL;
    let mut problem = None;
    let raw = crate::settings::process_settings(setting.name).unwrap_or_else(|e| {
        problem = Some(format!("{}; using WARN", e.message));
        None
    });
    let level = raw.as_deref().unwrap_or(setting.default_str());
    let filter = match level.to_ascii_uppercase().as_str() {
        "TRACE" => LevelFilter::Trace,
        "DEBUG" => LevelFilter::Debug,
        "INFO" => LevelFilter::Info,
        "WARN" | "WARNING" => LevelFilter::Warn,
        "ERROR" => LevelFilter::Error,
        "FATAL" => LevelFilter::Off,
        _ => {
            problem = Some(format!(
                "{}={:?} is not one of TRACE, DEBUG, INFO, WARN, ERROR, FATAL; using WARN",
                setting.name, level
            ));
            LevelFilter::Warn
        }
    };
    match THRESHOLD.compare_exchange(0, filter as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            if let Some(problem) = problem {
                write_stderr_line(Level::Warn, &problem);
            }
            filter
        }
        Err(known) => FILTERS[known - 1],
    }
}

/// Whether a record of `target` at `level` may be logged at all: never the HTTP client's
/// (ureq's: at debug it dumps every request with its headers, whose values, API keys given in
/// `OTEL_EXPORTER_OTLP_HEADERS` or tenant ids, must not reach a log); a warning or an error
/// from any other dependency (rustls, ...); anything from this project's crates (their module
/// paths start with `nixl_telemetry` or `telemetry_exporter`) and from a hosted plug-in
/// (target `plugin`, already filtered by the plug-in's own copy of this rule).
pub fn admits(target: &str, level: Level) -> bool {
    if target == "ureq" || target.starts_with("ureq::") {
        return false;
    }
    let ours = target.starts_with("nixl_telemetry")
        || target.starts_with("telemetry_exporter")
        || target == "plugin";
    ours || level <= Level::Warn
}

/// Adds a configured secret (a header value, a password, a token, a URL's user-info) that no
/// message of this process may show: [`mask_secrets`] replaces it in every record. Values
/// shorter than 4 characters are not secrets a log could leak (and masking them would garble
/// every message), so they are ignored.
pub fn add_secret(value: &str) {
    let value = value.trim();
    if value.chars().count() < 4 {
        return;
    }
    let mut secrets = SECRETS.write_unpoisoned();
    if !secrets.iter().any(|s| s == value) {
        secrets.push(value.to_owned());
        // The longest first, so a secret containing another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `message` with every configured secret ([`add_secret`]) replaced by `<redacted>`; borrowed
/// when it shows none.
pub fn mask_secrets(message: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read_unpoisoned();
    if !secrets.iter().any(|s| message.contains(s.as_str())) {
        return Cow::Borrowed(message);
    }
    let mut out = message.to_owned();
    for s in secrets.iter() {
        out = out.replace(s.as_str(), "<redacted>");
    }
    Cow::Owned(out)
}

/// `message` with every control character but tab escaped as Rust writes it (`\n`, `\r`,
/// `\u{1b}`): one message is one line, and no escape sequence from a remote party or a file
/// reaches a terminal. Borrowed when there is nothing to escape.
pub fn escape_controls(message: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\t';
    if !message.chars().any(unsafe_char) {
        return Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len() + 16);
    for c in message.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The stderr line of a message (already escaped): `[LEVEL nixl_telemetry] message` and the
/// newline.
fn stderr_line(level: Level, message: &str) -> String {
    format!("[{level} nixl_telemetry] {message}\n")
}

/// Writes the line of `message` (escaped here) to stderr in one `write_all` on the unbuffered
/// stderr: one `write` system call (a pipe takes up to 4,096 bytes whole, so the lines of
/// processes sharing it never interleave within a line).
fn write_stderr_line(level: Level, message: &str) {
    let line = stderr_line(level, &escape_controls(&mask_secrets(message)));
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Whether this thread is capturing messages (false once its thread-locals are gone).
fn capturing() -> bool {
    CAPTURE
        .try_with(|c| c.try_borrow().map(|c| c.is_some()).unwrap_or(false))
        .unwrap_or(false)
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        admits(metadata.target(), metadata.level())
            && (metadata.level() <= threshold() || capturing())
    }

    fn log(&self, record: &Record) {
        if !admits(record.target(), record.level()) {
            return;
        }
        let text = record.args().to_string();
        let message = escape_controls(&mask_secrets(&text)).into_owned();
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
                let line = stderr_line(record.level(), &message);
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
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
        // Every message goes through the secrets, the sink, then stderr: all are held across a
        // fork.
        crate::fork::hold_across_fork(LockOrder::Logging, &SECRETS);
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
    fn dependencies_log_only_warnings_and_the_http_client_nothing() {
        for level in [
            Level::Error,
            Level::Warn,
            Level::Info,
            Level::Debug,
            Level::Trace,
        ] {
            assert!(!admits("ureq::unversioned", level), "{level}");
            assert!(!admits("ureq", level), "{level}");
            assert!(admits("nixl_telemetry_push::otlp", level), "{level}");
            assert!(admits("telemetry_exporter_otlp", level), "{level}");
            assert!(admits("plugin", level), "{level}");
            assert_eq!(
                admits("rustls::client", level),
                level <= Level::Warn,
                "{level}"
            );
        }
    }

    #[test]
    fn every_record_has_the_configured_secrets_masked() {
        add_secret("hunter2-canary-value");
        add_secret("canary");
        add_secret("ab");
        let ((), logged) = capture(|| {
            log::warn!("api-key: hunter2-canary-value; tenant=canary; ab stays");
            log::warn!(target: "rustls::client", "a dependency's canary");
        });
        let texts: Vec<&str> = logged.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(
            texts,
            [
                "api-key: <redacted>; tenant=<redacted>; ab stays",
                "a dependency's <redacted>",
            ]
        );
        assert_eq!(
            stderr_line(Level::Warn, &mask_secrets("x hunter2-canary-value")),
            "[WARN nixl_telemetry] x <redacted>\n"
        );
    }

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

    #[test]
    fn control_characters_are_escaped_and_a_message_is_one_line() {
        assert!(matches!(escape_controls("plain\ttext"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("HTTP 500: \x1b[2J\x1b]0;owned\x07 a\r\nb \u{9b}c \x7f"),
            "HTTP 500: \\u{1b}[2J\\u{1b}]0;owned\\u{7} a\\r\\nb \\u{9b}c \\u{7f}"
        );
        assert_eq!(
            stderr_line(Level::Warn, "a message"),
            "[WARN nixl_telemetry] a message\n"
        );
        // Through the logger: what a sink (and a test) gets is escaped already.
        let ((), logged) = capture(|| log::warn!("answer: \x1b[31mred\nsecond line"));
        assert_eq!(logged[0].1, "answer: \\u{1b}[31mred\\nsecond line");
    }

    #[test]
    fn the_http_clients_messages_are_never_logged() {
        let ((), logged) = capture(|| {
            log::debug!(target: "ureq::unit", "writing prelude: api-key: SECRET123");
            log::trace!(target: "ureq", "x-scope-orgid: tenant");
            log::warn!(target: "ureq_like::other", "kept");
        });
        let texts: Vec<_> = logged.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(texts, ["kept"]);
        assert!(!log::logger().enabled(
            &Metadata::builder()
                .level(Level::Error)
                .target("ureq::response")
                .build()
        ));
    }

    /// Set in the processes of [`lines_of_processes_sharing_stderr_never_interleave`].
    const HAMMER_ENV: &str = "LOGGING_TEST_HAMMER_CHILD";
    const HAMMER_LINES: usize = 3000;

    /// The lines a hammering process logs: `hammer <id> <i> <padding>`.
    fn hammer_line(id: &str, i: usize) -> String {
        format!("hammer {id} {i} {}", "x".repeat(60 + i % 40))
    }

    /// Not a test on its own: a process started by
    /// [`lines_of_processes_sharing_stderr_never_interleave`] logs its lines to stderr.
    #[test]
    fn hammer_stderr_child() {
        let Ok(id) = std::env::var(HAMMER_ENV) else {
            return;
        };
        init();
        for i in 0..HAMMER_LINES {
            log::warn!("{}", hammer_line(&id, i));
        }
    }

    #[test]
    fn lines_of_processes_sharing_stderr_never_interleave() {
        let exe = std::env::current_exe().unwrap();
        let child = "logging::tests::hammer_stderr_child";
        // Two processes writing to one pipe at once (the shell gives them the same stderr).
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{HAMMER_ENV}=a \"$0\" --exact {child} --nocapture & \
                 {HAMMER_ENV}=b \"$0\" --exact {child} --nocapture & wait"
            ))
            .arg(&exe)
            .env("NIXL_LOG_LEVEL", "WARN")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stderr).unwrap();
        let mut next = [0usize; 2];
        for line in text.lines() {
            let message = line
                .strip_prefix("[WARN nixl_telemetry] hammer ")
                .unwrap_or_else(|| panic!("a line cut or mixed with another: {line:?}"));
            let id = usize::from(message.starts_with('b'));
            let expected = hammer_line(["a", "b"][id], next[id]);
            assert_eq!(format!("hammer {message}"), expected, "a line cut or mixed");
            next[id] += 1;
        }
        assert_eq!(next, [HAMMER_LINES; 2], "every line of both processes");
    }
}
