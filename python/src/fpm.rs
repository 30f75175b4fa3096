//! `Fpm`: one producer's [`FpmTrace`], configured by `DYN_FPM_*` (read once per process by the
//! library). A trace that could not be opened (tracing off or misconfigured, an unwritable
//! output location, a prefix already being written) or that is closed checks its arguments and
//! records nothing: tracing never disturbs the caller.

use nixl_telemetry_core::fpm::{FpmStats, FpmTrace, OpenErrorKind};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::payload;
use crate::slot::Slot;

/// The counters of [`FpmStats`], in the order of `stats()`.
pub const STATS_FIELDS: [&str; 9] = [
    "recorded",
    "written",
    "dropped",
    "rejected",
    "write_errors",
    "segments_rolled",
    "segments_pruned",
    "coalesced",
    "rows_lost",
];

fn stats_values(s: &FpmStats) -> [u64; 9] {
    [
        s.recorded,
        s.written,
        s.dropped,
        s.rejected,
        s.write_errors,
        s.segments_rolled,
        s.segments_pruned,
        s.coalesced,
        s.rows_lost,
    ]
}

/// An FPM trace handle (see `nixl_telemetry.FpmTrace`).
#[pyclass(frozen, module = "nixl_telemetry._native")]
pub struct Fpm {
    trace: Slot<FpmTrace>,
    /// The producer prefix of the segment files, when open.
    prefix: Option<String>,
}

/// Opens the trace of `(namespace, component, producer_id)`. Returns the handle, why it is
/// disabled (`"disabled"`, `"unwritable"`, `"already_open"`, `"internal"`; None when enabled) and
/// the library's message.
#[pyfunction]
pub fn open_fpm(
    namespace: &str,
    component: &str,
    producer_id: &str,
) -> (Fpm, Option<&'static str>, String) {
    let (trace, kind, message) = match FpmTrace::open_from_env(namespace, component, producer_id) {
        Ok(trace) => (Some(trace), None, String::new()),
        Err(e) => {
            let kind = match e.kind {
                OpenErrorKind::Disabled => "disabled",
                OpenErrorKind::Unwritable => "unwritable",
                OpenErrorKind::AlreadyOpen => "already_open",
                OpenErrorKind::Internal => "internal",
            };
            (None, Some(kind), e.message)
        }
    };
    let fpm = Fpm {
        prefix: trace
            .as_ref()
            .map(|t| t.prefix().to_string_lossy().into_owned()),
        trace: Slot::new(trace),
    };
    (fpm, kind, message)
}

#[pymethods]
impl Fpm {
    /// The producer prefix of the segment files, None when disabled.
    fn prefix(&self) -> Option<String> {
        self.prefix.clone()
    }

    /// Records one payload (msgpack bytes or a record). Never blocks, and never raises for the
    /// payload's content: the library validates it, and counts it when it is rejected or dropped.
    fn record(&self, payload: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.trace.with(|_| ()).is_none() {
            return payload::check(payload);
        }
        // The payload is encoded before the trace is locked: reading a record may run Python
        // code, which must never wait for a close.
        payload::with_msgpack(payload, |bytes| {
            self.trace.with(|t| t.record_msgpack(bytes));
        })
    }

    /// Writes the buffered rows now (without holding the interpreter).
    fn flush(&self, py: Python<'_>) {
        py.detach(|| self.trace.with(FpmTrace::flush));
    }

    /// The producer writer's counters, as a dict; None when disabled or closed.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let values = self.trace.with(|h| stats_values(&h.stats()));
        crate::counters(py, &STATS_FIELDS, values)
    }

    /// Graceful close: everything recorded and not dropped is written when it returns. Returns
    /// the counters, None when it was disabled or already closed.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let values = py.detach(|| self.trace.take().map(|h| stats_values(&h.close())));
        crate::counters(py, &STATS_FIELDS, values)
    }

    /// Marks the trace as the parent's, in a child created by `fork`: it has no worker thread
    /// there, so it is never used, flushed or closed again, and it is leaked.
    fn abandon(&self) {
        self.trace.abandon();
    }
}
