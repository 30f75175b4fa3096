//! Shared output helpers: the NIXL reader's event block, JSON lines, Ctrl+C handling and the
//! error type of the commands.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use nixl_telemetry_core::Event;

/// Output format of `read` and `stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The block format of NIXL's telemetry readers.
    Text,
    /// JSON: for `read` one object per line, {"agent": ring, "event": name, "type": number,
    /// "value": number}; for `stats` one document.
    Json,
}

/// A command failure: a library error (bad file, ...) or an output error.
#[derive(Debug)]
pub enum CliError {
    /// From the telemetry library; its message names the file and the problem.
    Telemetry(nixl_telemetry_core::Error),
    /// Writing the output failed.
    Io(std::io::Error),
    /// Bad command-line usage not caught by the parser (exit status 2).
    Usage(String),
    /// The command could not do its work (exit status 1).
    Failed(String),
    /// Everything readable was read, but some file ended in a truncated or damaged part,
    /// already reported on stderr (exit status 3).
    Incomplete,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Telemetry(e) => write!(f, "{e}"),
            CliError::Io(e) => write!(f, "cannot write output: {e}"),
            CliError::Usage(m) | CliError::Failed(m) => f.write_str(m),
            CliError::Incomplete => f.write_str("some files ended in a damaged part"),
        }
    }
}

impl From<nixl_telemetry_core::Error> for CliError {
    fn from(e: nixl_telemetry_core::Error) -> Self {
        CliError::Telemetry(e)
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Io(e)
    }
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;

/// Whether the error is a closed stdout (e.g. `| head`): not worth reporting.
pub fn is_broken_pipe(e: &CliError) -> bool {
    matches!(e, CliError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Writes one event as NIXL's readers print it; with `agent`, an `Agent:` line names the ring
/// it came from (when several rings are read).
pub fn write_event_block(
    out: &mut impl Write,
    event: &Event,
    agent: Option<&str>,
) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "=== NIXL Telemetry Event ===")?;
    if let Some(agent) = agent {
        writeln!(out, "Agent: {agent}")?;
    }
    writeln!(out, "Event: {}", event.name())?;
    writeln!(out, "Value: {}", event.value)?;
    writeln!(out, "{}", "=".repeat(27))
}

/// Writes one event of ring `agent` as a JSON line.
pub fn write_event_json(out: &mut impl Write, event: &Event, agent: &str) -> std::io::Result<()> {
    let line = serde_json::json!({
        "agent": agent,
        "event": event.name(),
        "type": event.event_type,
        "value": event.value,
    });
    writeln!(out, "{line}")
}

/// The exit status of a failed command (2 for bad usage, 3 for an incomplete read, 1
/// otherwise) and whether its message is worth printing (not for a closed stdout, e.g.
/// `| head`, which exits 0, nor for an incomplete read, whose warnings were printed).
pub fn exit_status(e: &CliError) -> (u8, bool) {
    match e {
        _ if is_broken_pipe(e) => (0, false),
        CliError::Usage(_) => (2, true),
        CliError::Incomplete => (3, false),
        _ => (1, true),
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes Ctrl+C set a flag (see [`interrupted`]) instead of killing the process.
pub fn catch_ctrl_c() {
    // SAFETY: `on_sigint` is an `extern "C" fn(c_int)`, the signature signal(2) calls a handler
    // with, passed as the integer `sighandler_t` that signal(2) takes. Its body only stores to a
    // lock-free atomic, which is async-signal-safe: whatever the interrupted thread was doing
    // (allocating, holding a lock), the handler touches none of that state.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }
}

/// Whether Ctrl+C was pressed since [`catch_ctrl_c`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleeps for `duration`, waking early (within 20 ms) when Ctrl+C is pressed.
pub fn sleep_unless_interrupted(duration: std::time::Duration) {
    let deadline = std::time::Instant::now() + duration;
    while !interrupted() {
        let now = std::time::Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(std::time::Duration::from_millis(20)));
    }
}
