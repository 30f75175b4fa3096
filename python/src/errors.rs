//! The library's errors as the Python exceptions of `nixl_telemetry.errors`: one class per
//! status that a caller may want to catch, the base class for the others. Every exception is
//! raised as `Class(message, status)`, so `str(e)` is the library's message and `e.status` its
//! `nixl_telemetry_status_t` code.

use nixl_telemetry_core::{Error, Status};
use pyo3::PyErr;

pyo3::import_exception!(nixl_telemetry.errors, NixlTelemetryError);
pyo3::import_exception!(nixl_telemetry.errors, InvalidArgumentError);
pyo3::import_exception!(nixl_telemetry.errors, NotFoundError);
pyo3::import_exception!(nixl_telemetry.errors, NotAllowedError);
pyo3::import_exception!(nixl_telemetry.errors, RingFormatError);
pyo3::import_exception!(nixl_telemetry.errors, RingVersionError);
pyo3::import_exception!(nixl_telemetry.errors, RingTruncatedError);

/// The exception for a library error, chosen by its status.
pub fn from_core(err: Error) -> PyErr {
    let args = (err.message, err.status.code());
    match err.status {
        Status::InvalidParam => InvalidArgumentError::new_err(args),
        Status::NotFound => NotFoundError::new_err(args),
        Status::NotAllowed => NotAllowedError::new_err(args),
        Status::Mismatch => RingFormatError::new_err(args),
        _ => NixlTelemetryError::new_err(args),
    }
}

/// An `InvalidArgumentError` with this message.
pub fn invalid(message: impl Into<String>) -> PyErr {
    InvalidArgumentError::new_err((message.into(), Status::InvalidParam.code()))
}
