//! `Agent`: one agent's [`Collector`], configured by `NIXL_TELEMETRY_*` like the C ABI's
//! `nixl_telemetry_create`. A disabled agent (telemetry not requested, or a scrape port held by
//! another process) or a closed one checks its arguments and records nothing.

use nixl_telemetry_core::{Collector, CollectorStats, EventType, Recorded, Status};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors;
use crate::slot::Slot;

/// What a record call did, as the Python `Recorded` enum's index.
const ACCEPTED: u8 = 0;
const DEACTIVATED: u8 = 1;
const DROPPED: u8 = 2;
const DISABLED: u8 = 3;

/// The counters of [`CollectorStats`], in the order of `stats()`.
pub const STATS_FIELDS: [&str; 6] = [
    "events_accepted",
    "events_dropped",
    "events_exported",
    "events_lost",
    "flushes",
    "drop_reports",
];

fn stats_values(s: &CollectorStats) -> [u64; 6] {
    [
        s.events_accepted,
        s.events_dropped,
        s.events_exported,
        s.events_lost,
        s.flushes,
        s.drop_reports,
    ]
}

/// A collector handle (see `nixl_telemetry.Telemetry`).
#[pyclass(frozen, module = "nixl_telemetry._native")]
pub struct Agent {
    collector: Slot<Collector>,
}

/// Creates the collector of `agent_name` as `nixl_telemetry_create` does. Returns the agent,
/// the status (0, or `NO_TELEMETRY`/`BIND_FAILED` for a disabled agent) and the reason it is
/// disabled; raises for any other failure (invalid configuration or name, unwritable ring, ...).
#[pyfunction]
pub fn open_collector(agent_name: &str, capture: bool) -> PyResult<(Agent, i32, String)> {
    let (collector, status, reason) = match Collector::from_env(agent_name, capture) {
        Ok(collector) => (Some(collector), Status::Success, String::new()),
        Err(e) if matches!(e.status, Status::NoTelemetry | Status::BindFailed) => {
            (None, e.status, e.message)
        }
        Err(e) => return Err(errors::from_core(e)),
    };
    let agent = Agent {
        collector: Slot::new(collector),
    };
    Ok((agent, status.code(), reason))
}

fn code(recorded: Recorded) -> u8 {
    match recorded {
        Recorded::Accepted => ACCEPTED,
        Recorded::Deactivated => DEACTIVATED,
        Recorded::Dropped => DROPPED,
    }
}

/// An event given by name (`"agent_tx_bytes"`) or by numeric type (0..21).
fn event_type(event: &Bound<'_, PyAny>) -> PyResult<EventType> {
    if let Ok(name) = event.cast::<PyString>() {
        let name = name.to_str()?;
        return EventType::from_name(name)
            .ok_or_else(|| errors::invalid(format!("unknown telemetry event name {name:?}")));
    }
    match event.extract::<u32>() {
        Ok(value) => EventType::from_u32(value).ok_or_else(|| {
            errors::invalid(format!(
                "unknown telemetry event type {value} (expected 0..{})",
                EventType::ALL.len() - 1
            ))
        }),
        Err(_) => Err(errors::invalid(format!(
            "event must be an event name or a numeric event type, got {}",
            event.repr()?
        ))),
    }
}

/// An unsigned 64-bit reading.
fn reading(what: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    value.extract::<u64>().map_err(|_| {
        let shown = value
            .repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string());
        errors::invalid(format!(
            "{what} must be an integer in 0..2**64-1, got {shown}"
        ))
    })
}

#[pymethods]
impl Agent {
    /// The exporter's name (`BUFFER`, `NOP`, ...), None when disabled or closed.
    fn exporter(&self) -> Option<String> {
        self.collector.with(|c| c.exporter_name().to_owned())
    }

    /// Records one event; returns the `Recorded` index.
    fn update(&self, event: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<u8> {
        let event = event_type(event)?;
        let value = reading("value", value)?;
        Ok(self
            .collector
            .with(|c| code(c.update_data(event, value)))
            .unwrap_or(DISABLED))
    }

    /// Records a completed transfer as one all-or-none batch; returns the `Recorded` index.
    fn add_xfer_stats(
        &self,
        xfer_time_us: &Bound<'_, PyAny>,
        is_write: bool,
        bytes: &Bound<'_, PyAny>,
        post_time_us: &Bound<'_, PyAny>,
    ) -> PyResult<u8> {
        let xfer_time_us = reading("xfer_time_us", xfer_time_us)?;
        let bytes = reading("bytes", bytes)?;
        let post_time_us = reading("post_time_us", post_time_us)?;
        Ok(self
            .collector
            .with(|c| code(c.add_xfer_stats(xfer_time_us, is_write, bytes, post_time_us)))
            .unwrap_or(DISABLED))
    }

    /// Records one error of a negative `nixl_status_t` (-1..-13); returns the `Recorded` index.
    fn update_error(&self, status: &Bound<'_, PyAny>) -> PyResult<u8> {
        let nixl_status = status
            .extract::<i32>()
            .ok()
            .filter(|s| EventType::from_nixl_status(*s).is_some())
            .ok_or_else(|| {
                errors::invalid(format!(
                    "status must be a NIXL error status in -13..-1, got {}",
                    status
                        .repr()
                        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
                ))
            })?;
        self.collector
            .with(|c| c.update_error(nixl_status))
            .map_or(Ok(DISABLED), |r| r.map(code).map_err(errors::from_core))
    }

    /// Drains the staging queue into the exporter now (without holding the interpreter).
    fn flush(&self, py: Python<'_>) {
        py.detach(|| self.collector.with(Collector::flush));
    }

    /// The counters since creation, as a dict; None when disabled or closed.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let values = self.collector.with(|h| stats_values(&h.stats()));
        crate::counters(py, &STATS_FIELDS, values)
    }

    /// Stops the flush thread and performs the final flush; returns the final counters, None
    /// when it was disabled or already closed. Later calls record nothing.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let values = py.detach(|| self.collector.take().map(|h| stats_values(&h.close())));
        crate::counters(py, &STATS_FIELDS, values)
    }

    /// Marks the collector as the parent's, in a child created by `fork`: it has no flush
    /// thread there, so it is never used, stopped or flushed again, and it is leaked.
    fn abandon(&self) {
        self.collector.abandon();
    }
}
