//! Status codes (NIXL's `nixl_status_t` values plus our documented extras) and the error type
//! every fallible operation returns: a status and a message that names what was wrong.

use std::fmt;

/// Outcome codes shared by the Rust API and the C ABI (`nixl_telemetry_status_t`).
///
/// The negative codes -1..-12 are NIXL's `nixl_status_t` values; the others are ours.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The operation succeeded.
    Success = 0,
    /// A ring pop found no event (not an error).
    Empty = 1,
    /// NIXL_ERR_NOT_POSTED.
    NotPosted = -1,
    /// NIXL_ERR_INVALID_PARAM: a NULL pointer, an invalid value or a bad environment setting.
    InvalidParam = -2,
    /// NIXL_ERR_BACKEND: an operating-system call failed (open, mmap, thread spawn, ...).
    Backend = -3,
    /// NIXL_ERR_NOT_FOUND: a file or exporter does not exist.
    NotFound = -4,
    /// NIXL_ERR_MISMATCH: a file has the wrong version or layout.
    Mismatch = -5,
    /// NIXL_ERR_NOT_ALLOWED: permission denied, or a resource already owned by someone else.
    NotAllowed = -6,
    /// NIXL_ERR_REPOST_ACTIVE.
    RepostActive = -7,
    /// NIXL_ERR_UNKNOWN: an internal failure (including a caught panic).
    Unknown = -8,
    /// NIXL_ERR_NOT_SUPPORTED.
    NotSupported = -9,
    /// NIXL_ERR_REMOTE_DISCONNECT.
    RemoteDisconnect = -10,
    /// NIXL_ERR_CANCELED.
    Canceled = -11,
    /// NIXL_ERR_NO_TELEMETRY: telemetry was not requested; no handle was created.
    NoTelemetry = -12,
    /// A scrape-port collision with another process: benign, the caller runs without a sink.
    BindFailed = -100,
    /// The staging queue was full: the event (or the whole batch) was dropped and counted.
    Dropped = -101,
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

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;
