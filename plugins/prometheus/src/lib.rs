//! The Prometheus exporter plug-in (`libtelemetry_exporter_prometheus.so`, selected with
//! `NIXL_TELEMETRY_EXPORTER=prometheus`): every agent's series (cumulative counters,
//! last-operation gauges, transfer-time histograms, errors by status, dropped events) served
//! at `GET /metrics` in the Prometheus text format 0.0.4.
//!
//! Configuration, read when an agent's exporter is created:
//! - `NIXL_TELEMETRY_PROMETHEUS_PORT`: TCP port, default 9090.
//! - `NIXL_TELEMETRY_PROMETHEUS_LOCAL`: boolean word; true binds 127.0.0.1, else 0.0.0.0.
//! - `NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`: histogram bounds (see
//!   [`nixl_telemetry_series::buckets`]).
//! - `NIXL_TELEMETRY_LABELS`, `NIXL_TELEMETRY_LABELS_FROM`: workload labels on every series
//!   (see [`nixl_telemetry_series::labels`]).
//! - `NIXL_TELEMETRY_NATIVE_HISTOGRAMS`: boolean word, default false; true keeps native
//!   histograms of transfer time and size (see [`nixl_telemetry_series::native`]) and answers a
//!   scraper whose `Accept` prefers it in the protobuf exposition (text stays the default).
//!
//! An invalid value fails the creation with a message naming the variable. One endpoint
//! serves all agents of the process (the first agent's address wins); agent names must be
//! unique; a port held by another process is a benign collision (`BIND_FAILED`: the host logs
//! one warning and the agent runs without a sink).

use std::ffi::CStr;
use std::sync::Arc;

use nixl_telemetry_base::env::read_bool;
use nixl_telemetry_base::event::xfer_stalled_event;
use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::settings::{self, process_settings};
use nixl_telemetry_base::Event;
use nixl_telemetry_series::endpoint::{address_from_env, Membership, SharedEndpoint};
use nixl_telemetry_series::native::{DEFAULT_MAX_BUCKETS, DEFAULT_SCHEMA};
use nixl_telemetry_series::{hostname, AgentSeries, Buckets, WorkloadLabels};

/// `NIXL_TELEMETRY_PROMETHEUS_PORT`: the scrape port.
pub const ENV_PORT: &str = settings::PROMETHEUS_PORT.name;
/// `NIXL_TELEMETRY_PROMETHEUS_LOCAL`: bind to 127.0.0.1 only.
pub const ENV_LOCAL: &str = settings::PROMETHEUS_LOCAL.name;
/// `NIXL_TELEMETRY_NATIVE_HISTOGRAMS`: keep native histograms.
pub const ENV_NATIVE_HISTOGRAMS: &str = settings::NATIVE_HISTOGRAMS.name;
/// The default scrape port.
pub const DEFAULT_PORT: u16 = settings::PROMETHEUS_PORT.default_u16();

/// The process's endpoint, shared by every agent using this plug-in.
static ENDPOINT: SharedEndpoint = SharedEndpoint::new("Prometheus");

/// One agent's exporter: its series, registered with the endpoint until dropped.
pub struct PrometheusExporter {
    membership: Membership,
}

impl TelemetryPlugin for PrometheusExporter {
    const NAME: &'static CStr = c"prometheus";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let addr = address_from_env(&process_settings, ENV_PORT, ENV_LOCAL, DEFAULT_PORT)
            .map_err(CreateError::InvalidParam)?;
        let buckets = Buckets::from_env().map_err(|e| CreateError::InvalidParam(e.message))?;
        let labels = WorkloadLabels::from_env().map_err(CreateError::InvalidParam)?;
        let native = read_bool(&process_settings, ENV_NATIVE_HISTOGRAMS)
            .map_err(|e| CreateError::InvalidParam(e.message))?
            .unwrap_or(settings::NATIVE_HISTOGRAMS.default_bool());
        let stalled = xfer_stalled_event(&process_settings)
            .map_err(|e| CreateError::InvalidParam(e.message))?;
        let agent = Arc::new(
            AgentSeries::new(params.agent_name, &hostname(), buckets)
                .with_labels(labels)
                .with_xfer_stalled(stalled)
                .with_native_histograms(native, DEFAULT_SCHEMA, DEFAULT_MAX_BUCKETS),
        );
        let membership = ENDPOINT.join(addr, agent)?;
        Ok(PrometheusExporter { membership })
    }

    fn export(&mut self, events: &[Event]) -> usize {
        self.membership.apply(events)
    }
}

nixl_telemetry_base::export_telemetry_plugin!(PrometheusExporter);
