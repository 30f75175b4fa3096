//! The `ipc` backend: every event reported through NVIDIA's DOCA Telemetry Exporter library,
//! which pushes it over IPC to the DOCA Telemetry Service (DTS), where the series of every
//! process of the node meet behind one endpoint.
//!
//! One [`IpcContext`] per process, shared by its agents: schema `nixl_telemetry` (IPC enabled,
//! sockets directory from `NIXL_TELEMETRY_DOCA_IPC_SOCKETS_DIR`), source id and tag `nixl`, a
//! metrics context with the constant label `hostname` (and one constant label per workload
//! label, [`nixl_telemetry_series::labels`]), the label sets `{agent_name}` and
//! `{agent_name, status}`, a 1000 ms metrics flush interval and one base histogram per
//! transfer-time histogram (`agent_xfer_time_us`, `agent_xfer_post_time_us`) over the
//! configured bucket bounds. Each exported batch takes one timestamp
//! (`doca_telemetry_exporter_get_timestamp`), then for every event, named by the shared
//! descriptor: its gauge is set, its histogram observed and its counter incremented (errors:
//! `agent_errors_total{agent_name, status}` incremented); then the metrics are flushed and the
//! IPC status read. The DOCA library is not thread-safe: calls are serialised by the context's
//! lock.
//!
//! # When DOCA is missing or DTS unreachable
//!
//! A library that cannot be loaded, a missing symbol or a failing setup call leaves the context
//! *unavailable*: one warning, and every later batch is dropped at once by this backend. An IPC
//! status other than connected after the source starts gives one warning too; events are then
//! still reported (DOCA reconnects by itself), and the context logs (at info level) when DTS is
//! reached again. Nothing here panics or fails the agent.
//!
//! # What counts as kept
//!
//! A batch's events count as kept by this backend only when each one's calls succeeded, the
//! flush succeeded and the library says IPC is connected after the flush. Whatever DOCA
//! accepted while disconnected may still be delivered after a reconnection, but nothing says
//! so: it is counted as not kept rather than claimed.

use std::cell::Cell;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, MutexGuard};

use nixl_telemetry_base::event::{EventType, EVENT_TYPE_COUNT};
use nixl_telemetry_base::Event;
use nixl_telemetry_series::{Buckets, WorkloadLabels, HISTOGRAM_EVENTS};

use crate::config::IpcSettings;
use crate::doca::{self, BaseHistogramId, DocaApi, DocaError, LabelSetId, Schema, Source};
use nixl_telemetry_base::sync::LockUnpoisoned;

/// The DOCA schema name.
pub const SCHEMA_NAME: &CStr = c"nixl_telemetry";
/// The DOCA source id and tag.
pub const SOURCE_ID: &CStr = c"nixl";
/// The metrics and base-histogram flush interval, in milliseconds.
pub const FLUSH_INTERVAL_MS: u64 = 1000;

/// The C names one event type is reported under.
struct Names {
    counter: CString,
    gauge: Option<CString>,
    /// Index into [`HISTOGRAM_EVENTS`] (and the base histograms).
    histogram: Option<usize>,
    /// The `status` label value of an error event.
    status: Option<CString>,
}

fn names() -> Vec<Names> {
    let c = |s: &str| CString::new(s).expect("metric names have no NUL");
    EventType::ALL
        .into_iter()
        .map(|t| {
            let d = t.metrics();
            Names {
                counter: c(d.counter.name),
                gauge: d.gauge.map(|g| c(g.name)),
                histogram: HISTOGRAM_EVENTS.iter().position(|&h| h == t),
                status: t.status_label().map(c),
            }
        })
        .collect()
}

/// A set-up DOCA schema and source with their metrics context.
struct Session {
    api: &'static DocaApi,
    schema: *mut Schema,
    source: *mut Source,
    source_started: bool,
    context_created: bool,
    /// Everything is set up (the final flush is worth doing).
    ready: bool,
    label_set: LabelSetId,
    error_label_set: LabelSetId,
    base_histograms: [BaseHistogramId; 2],
    names: Vec<Names>,
    /// DTS as the sockets directory is described in messages.
    dts: String,
    connected: bool,
    /// The last IPC status read, in words.
    status_text: String,
    warned_disconnected: bool,
    warned_call_failure: Cell<bool>,
    /// Strings and bucket bounds handed to DOCA during setup, kept for the session's lifetime
    /// in case the library keeps the pointers (NIXL passes static data there).
    retained_strings: Vec<CString>,
    retained_bounds: Vec<f64>,
}

// SAFETY: `Session` is not `Send` automatically only because of its raw `schema` and `source`
// handles. DOCA ties them to no thread; what it requires, not being thread-safe, is that calls on
// them never overlap. A session lives only inside `IpcContext::state`, a `Mutex` (`setup`'s result
// goes straight into `State::Ready`), so every call through its handles is made by the one thread
// holding that lock: moving the session to that thread keeps the calls serialised. `Session` is
// not `Sync` (its `Cell`), so no `&Session` reaches another thread either.
unsafe impl Send for Session {}

/// A failed setup step: the function and what it returned.
struct SetupError(&'static str, DocaError);

impl Session {
    fn setup(
        api: &'static DocaApi,
        settings: &IpcSettings,
        buckets: &Buckets,
        hostname: &str,
        labels: &WorkloadLabels,
    ) -> Result<Session, SetupError> {
        let dts = match &settings.sockets_dir {
            Some(d) => format!("DTS (IPC sockets in {d})"),
            None => "DTS (DOCA's default IPC sockets directory)".to_owned(),
        };
        let mut s = Session {
            api,
            schema: std::ptr::null_mut(),
            source: std::ptr::null_mut(),
            source_started: false,
            context_created: false,
            ready: false,
            label_set: 0,
            error_label_set: 0,
            base_histograms: [0; 2],
            names: names(),
            dts,
            connected: false,
            status_text: String::new(),
            warned_disconnected: false,
            warned_call_failure: Cell::new(false),
            retained_strings: Vec::new(),
            retained_bounds: buckets.bounds().to_vec(),
        };
        // On an error, dropping the partial session destroys what was created.
        s.setup_steps(settings, hostname, labels)?;
        s.ready = true;
        Ok(s)
    }

    /// Keeps `text` alive as long as the session and returns its C pointer (a `CString`'s
    /// buffer does not move when the vector holding it grows).
    fn retained(&mut self, text: CString) -> *const c_char {
        let ptr = text.as_ptr();
        self.retained_strings.push(text);
        ptr
    }

    fn setup_steps(
        &mut self,
        settings: &IpcSettings,
        hostname: &str,
        labels: &WorkloadLabels,
    ) -> Result<(), SetupError> {
        let api = self.api;
        let check = |f: &'static str, rc: DocaError| {
            if rc == doca::DOCA_SUCCESS {
                Ok(())
            } else {
                Err(SetupError(f, rc))
            }
        };
        let sockets_dir = settings
            .sockets_dir
            .as_deref()
            .map(|d| CString::new(d).map_err(|_| SetupError("sockets directory (NUL)", 6)))
            .transpose()?;
        let hostname =
            self.retained(CString::new(hostname).unwrap_or_else(|_| c"unknown".to_owned()));
        // Workload labels are validated (no control character, so no NUL): constant labels.
        let constant: Vec<(*const c_char, *const c_char)> = labels
            .iter()
            .filter_map(|(n, v)| Some((CString::new(n).ok()?, CString::new(v).ok()?)))
            .map(|(n, v)| (self.retained(n), self.retained(v)))
            .collect();
        let sockets_dir = sockets_dir.map(|d| self.retained(d));
        // SAFETY: every function was resolved by `doca::load` from DOCA's libraries, which stay
        // loaded, with the signatures documented in `doca`. The pointers passed: `SCHEMA_NAME`,
        // `SOURCE_ID` and the `c"..."` literals are static; `hostname`, `dir`, the `constant` label
        // names and values and each histogram `name` point into `self.retained_strings`, which lives as long as the session in case
        // DOCA keeps them; `agent_only` and `with_status` are arrays of static C strings alive
        // across their call, their lengths passed with them; the bounds are
        // `self.retained_bounds` (`bounds_len` values), never modified after setup; the
        // out-pointers are `&mut` fields of `self`. `self.schema` and `self.source` are passed
        // on only once the call creating them succeeded and returned non-null. The session is
        // not yet shared, so these calls cannot overlap with others.
        unsafe {
            check(
                "doca_telemetry_exporter_schema_init",
                (api.schema_init)(SCHEMA_NAME.as_ptr(), &mut self.schema),
            )?;
            if self.schema.is_null() {
                return Err(SetupError("doca_telemetry_exporter_schema_init", 1));
            }
            (api.schema_set_ipc_enabled)(self.schema);
            if let Some(dir) = sockets_dir {
                (api.schema_set_ipc_sockets_dir)(self.schema, dir);
            }
            check(
                "doca_telemetry_exporter_schema_start",
                (api.schema_start)(self.schema),
            )?;
            check(
                "doca_telemetry_exporter_source_create",
                (api.source_create)(self.schema, &mut self.source),
            )?;
            if self.source.is_null() {
                return Err(SetupError("doca_telemetry_exporter_source_create", 1));
            }
            (api.source_set_id)(self.source, SOURCE_ID.as_ptr());
            (api.source_set_tag)(self.source, SOURCE_ID.as_ptr());
            check(
                "doca_telemetry_exporter_source_start",
                (api.source_start)(self.source),
            )?;
            self.source_started = true;
            (self.connected, self.status_text) = self.ipc_status();
            check(
                "doca_telemetry_exporter_metrics_create_context",
                (api.metrics_create_context)(self.source),
            )?;
            self.context_created = true;
            check(
                "doca_telemetry_exporter_metrics_add_constant_label",
                (api.metrics_add_constant_label)(self.source, c"hostname".as_ptr(), hostname),
            )?;
            for (name, value) in constant {
                check(
                    "doca_telemetry_exporter_metrics_add_constant_label",
                    (api.metrics_add_constant_label)(self.source, name, value),
                )?;
            }
            let agent_only = [c"agent_name".as_ptr()];
            check(
                "doca_telemetry_exporter_metrics_add_label_names",
                (api.metrics_add_label_names)(
                    self.source,
                    agent_only.as_ptr(),
                    agent_only.len(),
                    &mut self.label_set,
                ),
            )?;
            let with_status = [c"agent_name".as_ptr(), c"status".as_ptr()];
            check(
                "doca_telemetry_exporter_metrics_add_label_names",
                (api.metrics_add_label_names)(
                    self.source,
                    with_status.as_ptr(),
                    with_status.len(),
                    &mut self.error_label_set,
                ),
            )?;
            check(
                "doca_telemetry_exporter_metrics_set_flush_interval_ms",
                (api.metrics_set_flush_interval_ms)(self.source, FLUSH_INTERVAL_MS),
            )?;
            let (bounds_ptr, bounds_len) =
                (self.retained_bounds.as_ptr(), self.retained_bounds.len());
            for (i, t) in HISTOGRAM_EVENTS.iter().enumerate() {
                let name = t.metrics().histogram.expect("histogram event").name;
                let name = CString::new(name).expect("metric names have no NUL");
                let name = self.retained(name);
                check(
                    "doca_telemetry_exporter_metrics_add_base_histogram",
                    (api.metrics_add_base_histogram)(
                        self.source,
                        name,
                        bounds_ptr,
                        bounds_len,
                        self.label_set,
                        FLUSH_INTERVAL_MS,
                        &mut self.base_histograms[i],
                    ),
                )?;
            }
        }
        Ok(())
    }

    /// Reads the IPC status (one call): whether it is connected, and the status in words.
    fn ipc_status(&self) -> (bool, String) {
        let mut status = doca::IPC_STATUS_FAILED;
        // SAFETY: `self.source` is a started source: this runs only in `setup_steps`, right
        // after `source_start` succeeded, and in `report` on a set-up session. `status` is a
        // live local that the call writes one status value through.
        let rc = unsafe { (self.api.check_ipc_status)(self.source, &mut status) };
        if rc == doca::DOCA_SUCCESS {
            (
                status == doca::IPC_STATUS_CONNECTED,
                doca::ipc_status_name(status),
            )
        } else {
            (
                false,
                format!("unknown: the check failed with {}", self.api.error_name(rc)),
            )
        }
    }

    /// Notes the result of one reporting call; true on success. The first failure of the
    /// context is a warning, later ones are only counted (as events not kept).
    fn ok(&self, function: &str, rc: DocaError) -> bool {
        if rc == doca::DOCA_SUCCESS {
            return true;
        }
        if !self.warned_call_failure.replace(true) {
            log::warn!(
                "DOCA telemetry exporter: {function} failed ({}); the events it could not \
                 report to DTS are counted as not kept (further failures are not logged)",
                self.api.error_name(rc)
            );
        }
        false
    }

    /// Reports a batch (see the module documentation); returns how many events are kept.
    fn report(&mut self, agent: &CStr, events: &[Event]) -> usize {
        if events.is_empty() {
            return 0;
        }
        let api = self.api;
        let mut ts: doca::Timestamp = 0;
        // SAFETY: `get_timestamp` writes one `u64` through its argument, here the live local
        // `ts`.
        let rc = unsafe { (api.get_timestamp)(&mut ts) };
        if !self.ok("doca_telemetry_exporter_get_timestamp", rc) {
            return 0;
        }
        let labels: [*const c_char; 1] = [agent.as_ptr()];
        let mut reported = 0;
        for e in events {
            let Some(t) = e.kind() else {
                continue;
            };
            let i = t as usize;
            debug_assert!(i < EVENT_TYPE_COUNT);
            let value = e.value;
            // SAFETY: `report` runs only on a session in `State::Ready`, whose `setup` finished,
            // so `self.source` has a metrics context and `self.label_set`,
            // `self.error_label_set` and `self.base_histograms` are ids DOCA returned for it.
            // Metric names are `CString`s of `self.names`; each label-values array holds as many
            // NUL-terminated pointers as its label set has names (`labels`: `agent_name`;
            // `with_status`: `agent_name`, `status`), borrowed from `agent`, `self.names` and
            // the stack, all alive across the calls. `histogram_id` is a live local out-value.
            let good = unsafe {
                if let Some(status) = &self.names[i].status {
                    let with_status: [*const c_char; 2] = [agent.as_ptr(), status.as_ptr()];
                    let rc = (api.metrics_add_counter_increment)(
                        self.source,
                        ts,
                        self.names[i].counter.as_ptr(),
                        value,
                        self.error_label_set,
                        with_status.as_ptr(),
                    );
                    self.ok("doca_telemetry_exporter_metrics_add_counter_increment", rc)
                } else {
                    let mut good = true;
                    if let Some(gauge) = &self.names[i].gauge {
                        let rc = (api.metrics_add_gauge)(
                            self.source,
                            ts,
                            gauge.as_ptr(),
                            value as f64,
                            self.label_set,
                            labels.as_ptr(),
                        );
                        good &= self.ok("doca_telemetry_exporter_metrics_add_gauge", rc);
                    }
                    if let Some(h) = self.names[i].histogram {
                        let mut histogram_id: doca::HistogramId = 0;
                        let rc = (api.metrics_base_histogram_observe)(
                            self.source,
                            self.base_histograms[h],
                            labels.as_ptr(),
                            value as f64,
                            &mut histogram_id,
                        );
                        good &=
                            self.ok("doca_telemetry_exporter_metrics_base_histogram_observe", rc);
                    }
                    let rc = (api.metrics_add_counter_increment)(
                        self.source,
                        ts,
                        self.names[i].counter.as_ptr(),
                        value,
                        self.label_set,
                        labels.as_ptr(),
                    );
                    good &= self.ok("doca_telemetry_exporter_metrics_add_counter_increment", rc);
                    good
                }
            };
            if good {
                reported += 1;
            }
        }
        // SAFETY: the source of a set-up session (see the calls above), with its metrics
        // context.
        let rc = unsafe { (api.metrics_flush)(self.source) };
        let flushed = self.ok("doca_telemetry_exporter_metrics_flush", rc);
        let (connected, status_text) = self.ipc_status();
        self.status_text = status_text;
        if connected != self.connected {
            self.connected = connected;
            if connected {
                log::info!("DOCA telemetry exporter: IPC connected to {}", self.dts);
            } else if !self.warned_disconnected {
                self.warned_disconnected = true;
                log::warn!(
                    "DOCA telemetry IPC lost its connection to {} (status {}); events are \
                     counted as not kept until DOCA reconnects",
                    self.dts,
                    self.status_text
                );
            } else {
                log::info!(
                    "DOCA telemetry IPC disconnected from {} again (status {})",
                    self.dts,
                    self.status_text
                );
            }
        }
        if flushed && connected {
            reported
        } else {
            0
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let api = self.api;
        // SAFETY: `drop` runs once, so each call is made at most once, and only on what
        // `setup` got to create, as the flags and non-null handles record: the final metrics
        // flush on a completed setup, `source_flush` on a started source, `destroy_context`
        // after `create_context` succeeded, the source before the schema it came from. What
        // DOCA may still point to (`retained_strings`, `retained_bounds`) is freed only after
        // these calls, since fields drop after `Drop::drop` returns.
        unsafe {
            if self.ready {
                (api.metrics_flush)(self.source);
            }
            if self.source_started {
                (api.source_flush)(self.source);
            }
            if self.context_created {
                (api.metrics_destroy_context)(self.source);
            }
            if !self.source.is_null() {
                (api.source_destroy)(self.source);
            }
            if !self.schema.is_null() {
                (api.schema_destroy)(self.schema);
            }
        }
    }
}

enum State {
    /// DOCA could not be loaded or set up: this backend keeps nothing.
    Unavailable,
    /// Set up (connected to DTS or not).
    Ready(Session),
}

/// The process's DOCA context, shared by every agent whose exporter uses the `ipc` backend.
pub struct IpcContext {
    state: Mutex<State>,
}

impl IpcContext {
    /// Loads DOCA and sets the context up. Never fails: a missing library or symbol, a failing
    /// setup call or an unconnected IPC status is one warning (whose last words, `consequence`,
    /// say what happens to the events), and the context degrades as the module documents.
    pub fn open(
        settings: &IpcSettings,
        buckets: &Buckets,
        hostname: &str,
        labels: &WorkloadLabels,
        consequence: &str,
    ) -> IpcContext {
        let state = match doca::load(settings.lib_dir.as_deref()) {
            Err(e) => {
                log::warn!(
                    "DOCA telemetry exporter: the ipc backend is unavailable: {e}; set \
                     NIXL_TELEMETRY_DOCA_LIB_DIR to the directory of NVIDIA's DOCA libraries \
                     (libdoca_telemetry_exporter.so, libdoca_common.so); {consequence}"
                );
                State::Unavailable
            }
            Ok(api) => match Session::setup(api, settings, buckets, hostname, labels) {
                Err(SetupError(function, rc)) => {
                    log::warn!(
                        "DOCA telemetry exporter: the ipc backend is unavailable: {function} \
                         failed ({}) with the DOCA libraries {}; {consequence}",
                        api.error_name(rc),
                        api.origin
                    );
                    State::Unavailable
                }
                Ok(mut session) => {
                    if session.connected {
                        log::info!(
                            "DOCA telemetry exporter: ipc backend connected to {} ({})",
                            session.dts,
                            api.origin
                        );
                    } else {
                        session.warned_disconnected = true;
                        log::warn!(
                            "DOCA telemetry IPC not connected to {} (status {}); events are \
                             still reported to the DOCA library, which reconnects by itself, \
                             but are counted as not kept until it does; {consequence}",
                            session.dts,
                            session.status_text
                        );
                    }
                    State::Ready(session)
                }
            },
        };
        IpcContext {
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }

    /// Reports `events` of agent `agent` (one timestamp, then a flush); returns how many this
    /// backend kept (see the module documentation).
    pub fn report(&self, agent: &CStr, events: &[Event]) -> usize {
        match &mut *self.lock() {
            State::Unavailable => 0,
            State::Ready(s) => s.report(agent, events),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_has_its_c_names() {
        let n = names();
        assert_eq!(n.len(), EVENT_TYPE_COUNT);
        let tx = &n[EventType::AgentTxBytes as usize];
        assert_eq!(tx.counter.to_str().unwrap(), "agent_tx_bytes_total");
        assert_eq!(
            tx.gauge.as_ref().unwrap().to_str().unwrap(),
            "agent_tx_last_bytes"
        );
        assert_eq!((tx.histogram.is_none(), tx.status.is_none()), (true, true));
        let xfer = &n[EventType::AgentXferPostTime as usize];
        assert_eq!(xfer.histogram, Some(1));
        let err = &n[EventType::AgentErrBackend as usize];
        assert_eq!(err.counter.to_str().unwrap(), "agent_errors_total");
        assert_eq!(err.status.as_ref().unwrap().to_str().unwrap(), "backend");
        assert!(err.gauge.is_none());
        let dropped = &n[EventType::AgentTelemetryEventsDropped as usize];
        assert_eq!(
            dropped.counter.to_str().unwrap(),
            "agent_telemetry_events_dropped_total"
        );
    }
}
