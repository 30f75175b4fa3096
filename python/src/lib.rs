//! `nixl_telemetry._native`: the Rust half of the `nixl_telemetry` Python package.
//!
//! Thin handles over the `nixl-telemetry` crate: a ring reader ([`ring`]), a collector
//! ([`agent`]) and an FPM trace ([`fpm`], payloads encoded by [`payload`]), the last two held in
//! a [`slot::Slot`], and the effective configuration (`effective_config`). The public classes,
//! their documentation and their lifecycle (context managers, interpreter exit, fork) are the
//! Python modules of the package; failures are raised as the exceptions of
//! `nixl_telemetry.errors` ([`errors`]).

mod agent;
mod errors;
mod fpm;
mod payload;
mod ring;
mod slot;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A dict of counters, `names[i]` to `values[i]`; None without values (a disabled or closed
/// handle).
fn counters<'py, const N: usize>(
    py: Python<'py>,
    names: &[&str; N],
    values: Option<[u64; N]>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(values) = values else {
        return Ok(None);
    };
    let dict = PyDict::new(py);
    for (name, value) in names.iter().zip(values) {
        dict.set_item(name, value)?;
    }
    Ok(Some(dict))
}

/// Rust handles behind the public `nixl_telemetry` classes; not a public API.
#[pymodule]
mod _native {
    use nixl_telemetry_core::EventType;
    use pyo3::prelude::*;
    use pyo3::types::{PyDict, PyTuple};

    #[pymodule_export]
    use super::agent::{open_collector, Agent};
    #[pymodule_export]
    use super::fpm::{open_fpm, Fpm};
    #[pymodule_export]
    use super::ring::Ring;

    /// Every telemetry setting's effective value, origin (`environment`, `file:<path>`,
    /// `default`) and kind, as a collector created now would see them: a dict from the setting's
    /// name to `{"value", "origin", "kind"}`, in the library's order.
    #[pyfunction]
    fn effective_config(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let settings = nixl_telemetry_core::config::Options::default()
            .effective()
            .map_err(super::errors::from_core)?;
        let all = PyDict::new(py);
        for e in settings {
            let entry = PyDict::new(py);
            entry.set_item("value", e.value)?;
            entry.set_item("origin", e.origin.to_string())?;
            entry.set_item("kind", e.setting.kind.name())?;
            all.set_item(e.setting.name, entry)?;
        }
        Ok(all)
    }

    /// The name of event type `event_type`: NIXL's base name, or `unknown_event_<n>`.
    #[pyfunction]
    fn event_name(event_type: u32) -> String {
        nixl_telemetry_core::Event {
            event_type,
            value: 0,
        }
        .name()
    }

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add(
            "EVENT_NAMES",
            PyTuple::new(py, EventType::ALL.iter().map(|t| t.name()))?,
        )?;
        m.add(
            "COLLECTOR_STATS_FIELDS",
            PyTuple::new(py, super::agent::STATS_FIELDS)?,
        )?;
        m.add(
            "FPM_STATS_FIELDS",
            PyTuple::new(py, super::fpm::STATS_FIELDS)?,
        )?;
        Ok(())
    }
}
