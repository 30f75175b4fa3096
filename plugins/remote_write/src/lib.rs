//! The Prometheus remote-write exporter plug-in (`libtelemetry_exporter_remote_write.so`,
//! selected with `NIXL_TELEMETRY_EXPORTER=remote_write`): every agent's series, exactly those
//! the `prometheus` exporter serves (same names and labels, histograms as `_bucket{le}`,
//! `_sum` and `_count`, plus `local_rank` when the rank variable is set and the sender's
//! `instance`: `NIXL_TELEMETRY_PUSH_INSTANCE`, else `nixl_telemetry_push::rows::instance`'s
//! default, `<host>:<pid>` with a tag outside the host's PID namespace), pushed as
//! remote-write 1.0 requests (`nixl_telemetry_push::remote_write`): a protobuf `WriteRequest`, snappy,
//! `Content-Encoding: snappy`, `Content-Type: application/x-protobuf`,
//! `X-Prometheus-Remote-Write-Version: 0.1.0`, one sample per series with the push's
//! timestamp, labels sorted by name and series sorted by labels.
//!
//! The push loop is `nixl_telemetry_push`'s: own thread, interval, backoff, one pending
//! snapshot, the bounded last push when the agent's exporter is destroyed.
//!
//! Configuration (read when an agent's exporter is created; an invalid value fails the
//! creation with a message naming the variable):
//! - `NIXL_TELEMETRY_REMOTE_WRITE_URL` (required): the receiver's full URL, e.g.
//!   `http://host:9090/api/v1/write`.
//! - `NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS` (15000), `..._TIMEOUT_MS` (10000),
//!   `..._FINAL_PUSH_MS` (5000: how long destroying the agent waits for the last push, one
//!   attempt; the log says when it cuts it).
//! - `..._HEADERS` (`name=value,...`), `..._BASIC_AUTH_USER` with
//!   `..._BASIC_AUTH_PASSWORD_FILE`, or `..._BEARER_TOKEN_FILE`; `..._CA_FILE` (PEM; else the
//!   system's roots).
//! - `NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`, `NIXL_TELEMETRY_RANK_ENV` as for `prometheus_mp`.
//! - `NIXL_TELEMETRY_NATIVE_HISTOGRAMS` (false): true adds native histogram samples of
//!   transfer time and size (see `nixl_telemetry_series::native`); the receiver must accept
//!   them (Prometheus: `--enable-feature=native-histograms`).

use std::ffi::CStr;

use nixl_telemetry_base::env::read_bool;
use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::settings::{self, process_settings};
use nixl_telemetry_base::Event;
use nixl_telemetry_push::remote_write::{Config, RemoteWrite};
use nixl_telemetry_push::AgentPush;
use nixl_telemetry_series::hostname;

/// One agent's exporter: its series, pushed by its own loop until dropped.
pub struct RemoteWriteExporter(AgentPush);

impl TelemetryPlugin for RemoteWriteExporter {
    const NAME: &'static CStr = c"remote_write";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let config = Config::from_settings(&process_settings).map_err(CreateError::InvalidParam)?;
        let native = read_bool(&process_settings, settings::NATIVE_HISTOGRAMS.name)
            .map_err(|e| CreateError::InvalidParam(e.message))?
            .unwrap_or(settings::NATIVE_HISTOGRAMS.default_bool());
        let push = AgentPush::start(
            params.agent_name,
            &hostname(),
            true,
            native,
            config.target,
            config.push,
            |source, own_labels| Box::new(RemoteWrite::new(source, own_labels)),
        )?;
        Ok(RemoteWriteExporter(push))
    }

    fn export(&mut self, events: &[Event]) -> usize {
        self.0.apply(events)
    }
}

nixl_telemetry_base::export_telemetry_plugin!(RemoteWriteExporter);
