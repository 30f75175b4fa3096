//! Status codes (NIXL's `nixl_status_t` values plus our documented extras) and the error type
//! every fallible operation returns: a status and a message that names what was wrong.

use std::fmt;

use crate::constants as c;

/// Outcome codes shared by the Rust API and every C ABI (`nixl_telemetry_status_t`); the values
/// are the `NIXL_TELEMETRY_*` constants of [`crate::constants`].
///
/// The negative codes -1..-12 are NIXL's `nixl_status_t` values; the others are ours.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The operation succeeded.
    Success = c::NIXL_TELEMETRY_SUCCESS,
    /// A ring pop found no event (not an error).
    Empty = c::NIXL_TELEMETRY_EMPTY,
    /// NIXL_ERR_NOT_POSTED.
    NotPosted = c::NIXL_TELEMETRY_ERR_NOT_POSTED,
    /// NIXL_ERR_INVALID_PARAM: a NULL pointer, an invalid value or a bad environment setting.
    InvalidParam = c::NIXL_TELEMETRY_ERR_INVALID_PARAM,
    /// NIXL_ERR_BACKEND: an operating-system call failed (open, mmap, thread spawn, ...).
    Backend = c::NIXL_TELEMETRY_ERR_BACKEND,
    /// NIXL_ERR_NOT_FOUND: a file or exporter does not exist.
    NotFound = c::NIXL_TELEMETRY_ERR_NOT_FOUND,
    /// NIXL_ERR_MISMATCH: a file has the wrong version or layout.
    Mismatch = c::NIXL_TELEMETRY_ERR_MISMATCH,
    /// NIXL_ERR_NOT_ALLOWED: permission denied, or a resource already owned by someone else.
    NotAllowed = c::NIXL_TELEMETRY_ERR_NOT_ALLOWED,
    /// NIXL_ERR_REPOST_ACTIVE.
    RepostActive = c::NIXL_TELEMETRY_ERR_REPOST_ACTIVE,
    /// NIXL_ERR_UNKNOWN: an internal failure (a caught panic is [`Status::Panic`]).
    Unknown = c::NIXL_TELEMETRY_ERR_UNKNOWN,
    /// NIXL_ERR_NOT_SUPPORTED.
    NotSupported = c::NIXL_TELEMETRY_ERR_NOT_SUPPORTED,
    /// NIXL_ERR_REMOTE_DISCONNECT.
    RemoteDisconnect = c::NIXL_TELEMETRY_ERR_REMOTE_DISCONNECT,
    /// NIXL_ERR_CANCELED.
    Canceled = c::NIXL_TELEMETRY_ERR_CANCELED,
    /// NIXL_ERR_NO_TELEMETRY: telemetry (or FPM tracing) was not requested; no handle was created.
    NoTelemetry = c::NIXL_TELEMETRY_ERR_NO_TELEMETRY,
    /// A scrape-port collision with another process: benign, the caller runs without a sink.
    BindFailed = c::NIXL_TELEMETRY_ERR_BIND_FAILED,
    /// The staging queue was full: the event (or the whole batch) was dropped and counted.
    Dropped = c::NIXL_TELEMETRY_ERR_DROPPED,
    /// An output location cannot be written (the FPM trace's probe, directory or listing).
    Unwritable = c::NIXL_TELEMETRY_ERR_UNWRITABLE,
    /// A handle inherited through a fork, used in the child.
    Forked = c::NIXL_TELEMETRY_ERR_FORKED,
    /// A panic caught at the C boundary: the call did not complete; a defect to report.
    Panic = c::NIXL_TELEMETRY_ERR_PANIC,
}

impl Status {
    /// The numeric code.
    pub const fn code(self) -> i32 {
        self as i32
    }
}

/// A failure: a status code and a human-readable explanation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The status code the C ABI returns for this failure.
    pub status: Status,
    /// What went wrong, naming the offending variable, value, file or argument.
    pub message: String,
}

impl Error {
    /// An error with this status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    /// An INVALID_PARAM error.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidParam, message)
    }

    /// An error for a failed system call on `what`, mapping the errno to a status.
    pub fn io(what: impl fmt::Display, err: &std::io::Error) -> Error {
        let status = match err.kind() {
            std::io::ErrorKind::NotFound => Status::NotFound,
            std::io::ErrorKind::PermissionDenied => Status::NotAllowed,
            _ => Status::Backend,
        };
        Error::new(status, format!("{what}: {err}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;
