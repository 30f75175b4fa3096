//! Prometheus remote-write 1.0: the messages ([`proto`]), the request of labelled snapshots
//! (exactly the series the `prometheus` exporter serves, one sample each at the push's
//! timestamp, labels sorted by name and series by labels), its body (snappy block format,
//! `Content-Encoding: snappy`, `Content-Type: application/x-protobuf`,
//! `X-Prometheus-Remote-Write-Version: 0.1.0`), the configuration
//! (`NIXL_TELEMETRY_REMOTE_WRITE_*`) and the payload of the push loop. Used by the
//! `remote_write` plug-in and `nixl-telemetry serve --remote-write`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pusher::{Payload, PushConfig};
use crate::rows::Source;
use crate::target::{millis, Body, Target, TargetVars};
use nixl_telemetry::env::Lookup;
use nixl_telemetry_series::{families, for_each_sample, AgentSnapshot};
use prost::Message;

pub mod proto;

/// `NIXL_TELEMETRY_REMOTE_WRITE_URL`.
pub const ENV_URL: &str = "NIXL_TELEMETRY_REMOTE_WRITE_URL";
/// `NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS`.
pub const ENV_INTERVAL_MS: &str = "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS";
/// `NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS`.
pub const ENV_FINAL_PUSH_MS: &str = "NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS";
/// The variables of the receiver.
pub const TARGET_VARS: TargetVars = TargetVars {
    url: ENV_URL,
    headers: "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
    basic_auth_user: "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER",
    basic_auth_password_file: "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE",
    bearer_token_file: "NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE",
    ca_file: "NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE",
    timeout_ms: "NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS",
};
/// Default push interval (Prometheus' own default for scraping and remote-write batches).
pub const DEFAULT_INTERVAL_MS: u64 = 15_000;
/// Default timeout of one push.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Default bound of the last push.
pub const DEFAULT_FINAL_PUSH_MS: u64 = 5_000;

/// The protocol's headers.
pub const HEADERS: &[(&str, &str)] = &[("X-Prometheus-Remote-Write-Version", "0.1.0")];

/// The receiver and timing, read from settings.
#[derive(Debug)]
pub struct Config {
    /// The receiver.
    pub target: Target,
    /// The push timing.
    pub push: PushConfig,
}

impl Config {
    /// Reads the configuration through `settings` (see the crate documentation).
    pub fn from_settings(settings: Lookup) -> Result<Config, String> {
        let target = Target::from_settings(settings, &TARGET_VARS, DEFAULT_TIMEOUT_MS)?;
        let push = PushConfig {
            name: "remote_write".into(),
            interval: millis(settings, ENV_INTERVAL_MS, DEFAULT_INTERVAL_MS, true)?,
            timeout: target.timeout,
            final_timeout: millis(settings, ENV_FINAL_PUSH_MS, DEFAULT_FINAL_PUSH_MS, false)?,
        };
        Ok(Config { target, push })
    }
}

/// The `WriteRequest` of `rows` (each a snapshot and its labels, `__name__` and the snapshot's
/// workload labels excluded), every
/// sample at `timestamp_ms`, unencoded: series sorted by labels, labels by name.
pub fn write_request(
    rows: &[(&AgentSnapshot, &[(&str, &str)])],
    timestamp_ms: i64,
) -> proto::WriteRequest {
    let mut timeseries = Vec::with_capacity(rows.len() * 64);
    for (snapshot, labels) in rows {
        for family in families() {
            for_each_sample(family, snapshot, |suffix, extra, value| {
                let mut l = Vec::with_capacity(labels.len() + 2);
                l.push(proto::Label {
                    name: "__name__".into(),
                    value: format!("{}{suffix}", family.name),
                });
                l.extend(
                    labels
                        .iter()
                        .copied()
                        .chain(snapshot.labels.iter())
                        .chain(extra)
                        .map(|(n, v)| proto::Label {
                            name: n.to_owned(),
                            value: v.to_owned(),
                        }),
                );
                l.sort_by(|a, b| a.name.cmp(&b.name));
                timeseries.push(proto::TimeSeries {
                    labels: l,
                    samples: vec![proto::Sample {
                        value: value as f64,
                        timestamp: timestamp_ms,
                    }],
                });
            });
        }
    }
    timeseries.sort_by(|a, b| {
        a.labels
            .iter()
            .map(|l| (&l.name, &l.value))
            .cmp(b.labels.iter().map(|l| (&l.name, &l.value)))
    });
    proto::WriteRequest { timeseries }
}

/// The body of a push of `rows` at `timestamp_ms`: the snappy-compressed `WriteRequest` with
/// its headers.
pub fn body(rows: &[(&AgentSnapshot, &[(&str, &str)])], timestamp_ms: i64) -> Body {
    let raw = write_request(rows, timestamp_ms).encode_to_vec();
    let bytes = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("snappy takes any input below 4 GiB");
    Body {
        bytes,
        content_type: "application/x-protobuf",
        content_encoding: Some("snappy"),
        headers: HEADERS,
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as i64
}

/// The remote-write payload over any source of labelled snapshots.
pub struct RemoteWrite(pub Source);

impl Payload for RemoteWrite {
    fn build(&mut self) -> Body {
        let rows = (self.0)();
        let labels: Vec<Vec<(&str, &str)>> = rows
            .iter()
            .map(|(_, l)| l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect())
            .collect();
        let refs: Vec<(&AgentSnapshot, &[(&str, &str)])> = rows
            .iter()
            .zip(&labels)
            .map(|((s, _), l)| (s, l.as_slice()))
            .collect();
        body(&refs, now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry::{Event, EventType};
    use nixl_telemetry_series::{AgentSeries, Buckets, WorkloadLabels};

    #[test]
    fn every_series_carries_the_workload_labels_sorted_among_the_others() {
        let labels =
            WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), "42".into())]).unwrap();
        let s = AgentSeries::new("a", "h", Buckets::default()).with_labels(labels);
        s.apply(&[Event::new(EventType::AgentTxBytes, 10)]);
        let snapshot = s.snapshot();
        let request = write_request(&[(&snapshot, &[("agent_name", "a")])], 1);
        assert!(!request.timeseries.is_empty());
        for series in &request.timeseries {
            let names: Vec<&str> = series.labels.iter().map(|l| l.name.as_str()).collect();
            assert!(names.contains(&"slurm_job_id"), "{names:?}");
            assert!(names.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
        }
    }
}
