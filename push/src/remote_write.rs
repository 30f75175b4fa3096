//! Prometheus remote-write 1.0: the messages ([`proto`]), the request of labelled snapshots
//! (exactly the series the `prometheus` exporter serves, one sample each at the push's
//! timestamp, labels sorted by name and series by labels), its body (snappy block format,
//! `Content-Encoding: snappy`, `Content-Type: application/x-protobuf`,
//! `X-Prometheus-Remote-Write-Version: 0.1.0`), with, when the series keep native histograms
//! (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS`), one native histogram sample per histogram family
//! (`agent_xfer_time_us`, `agent_xfer_post_time_us`, `agent_tx_request_size_bytes`,
//! `agent_rx_request_size_bytes`) beside the classic `_bucket`/`_sum`/`_count` series; the
//! configuration
//! (`NIXL_TELEMETRY_REMOTE_WRITE_*`) and the payload of the push loop. Used by the
//! `remote_write` plug-in and `nixl-telemetry serve --remote-write`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pusher::{Payload, PushConfig, PushStatsSnapshot, PUSH_COUNTERS};
use crate::rows::{Labels, Source};
use crate::target::{millis, Body, Target, TargetVars};
use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings;
use nixl_telemetry_series::native::{NativeHistogram, ZERO_THRESHOLD};
use nixl_telemetry_series::{
    families, for_each_sample, AgentSnapshot, FamilySource, NATIVE_SIZE_FAMILIES,
};
use prost::Message;

pub mod proto;

/// `NIXL_TELEMETRY_REMOTE_WRITE_URL`.
pub const ENV_URL: &str = settings::REMOTE_WRITE_URL.name;
/// `NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS`.
pub const ENV_INTERVAL_MS: &str = settings::REMOTE_WRITE_INTERVAL_MS.name;
/// `NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS`.
pub const ENV_FINAL_PUSH_MS: &str = settings::REMOTE_WRITE_FINAL_PUSH_MS.name;
/// The variables of the receiver.
pub const TARGET_VARS: TargetVars = TargetVars {
    url: ENV_URL,
    headers: settings::REMOTE_WRITE_HEADERS.name,
    basic_auth_user: settings::REMOTE_WRITE_BASIC_AUTH_USER.name,
    basic_auth_password_file: settings::REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE.name,
    bearer_token_file: settings::REMOTE_WRITE_BEARER_TOKEN_FILE.name,
    ca_file: settings::REMOTE_WRITE_CA_FILE.name,
    timeout_ms: settings::REMOTE_WRITE_TIMEOUT_MS.name,
};
/// Default push interval (Prometheus' own default for scraping and remote-write batches).
pub const DEFAULT_INTERVAL_MS: u64 = settings::REMOTE_WRITE_INTERVAL_MS.default_u64();
/// Default timeout of one push.
pub const DEFAULT_TIMEOUT_MS: u64 = settings::REMOTE_WRITE_TIMEOUT_MS.default_u64();
/// Default bound of the last push.
pub const DEFAULT_FINAL_PUSH_MS: u64 = settings::REMOTE_WRITE_FINAL_PUSH_MS.default_u64();

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

/// The sender's own counters in a push: their labels and values.
#[derive(Clone, Copy, Debug)]
pub struct OwnSeries<'a> {
    /// The labels of the sender's counters (`__name__` excluded).
    pub labels: &'a [(&'a str, &'a str)],
    /// The counters, as they were before this push.
    pub pushes: &'a PushStatsSnapshot,
}

/// The `WriteRequest` of `rows` (each a snapshot and its labels, `__name__` and the snapshot's
/// workload labels excluded) and of the sender's own counters ([`PUSH_COUNTERS`]), every
/// sample at `timestamp_ms`, unencoded: series sorted by labels, labels by name.
pub fn write_request(
    rows: &[(&AgentSnapshot, &[(&str, &str)])],
    own: Option<OwnSeries>,
    timestamp_ms: i64,
) -> proto::WriteRequest {
    let mut timeseries = Vec::with_capacity(rows.len() * 64 + PUSH_COUNTERS.len());
    let series = |name: String, labels: &mut dyn Iterator<Item = (&str, &str)>, value: f64| {
        let mut l = vec![proto::Label {
            name: "__name__".into(),
            value: name,
        }];
        l.extend(labels.map(|(n, v)| proto::Label {
            name: n.to_owned(),
            value: v.to_owned(),
        }));
        l.sort_by(|a, b| a.name.cmp(&b.name));
        proto::TimeSeries {
            labels: l,
            samples: vec![proto::Sample {
                value,
                timestamp: timestamp_ms,
            }],
            histograms: Vec::new(),
        }
    };
    for (snapshot, labels) in rows {
        for family in families() {
            for_each_sample(family, snapshot, |suffix, extra, value| {
                timeseries.push(series(
                    format!("{}{suffix}", family.name),
                    &mut labels
                        .iter()
                        .copied()
                        .chain(snapshot.labels.iter())
                        .chain(extra),
                    value as f64,
                ));
            });
        }
        // The native histograms, named as their families (the classic series are suffixed).
        let natives = families()
            .iter()
            .filter_map(|f| match f.source {
                FamilySource::Histogram(t) => Some((f.name, t)),
                _ => None,
            })
            .chain(NATIVE_SIZE_FAMILIES.iter().map(|&(name, _, t)| (name, t)));
        for (name, t) in natives {
            let Some(h) = snapshot.native_histogram(t) else {
                continue;
            };
            let mut s = series(
                name.to_owned(),
                &mut labels.iter().copied().chain(snapshot.labels.iter()),
                0.0,
            );
            s.samples.clear();
            s.histograms.push(native_sample(h, timestamp_ms));
            timeseries.push(s);
        }
    }
    if let Some(own) = own {
        for counter in &PUSH_COUNTERS {
            timeseries.push(series(
                counter.name.to_owned(),
                &mut own.labels.iter().copied(),
                (counter.value)(own.pushes) as f64,
            ));
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

/// `h` as a remote-write native histogram sample at `timestamp_ms`.
pub fn native_sample(h: &NativeHistogram, timestamp_ms: i64) -> proto::Histogram {
    let (spans, deltas) = h.spans_and_deltas();
    proto::Histogram {
        count_int: h.count(),
        sum: h.sum() as f64,
        schema: i32::from(h.schema()),
        zero_threshold: ZERO_THRESHOLD,
        zero_count_int: h.zero_count(),
        positive_spans: spans
            .into_iter()
            .map(|(offset, length)| proto::BucketSpan { offset, length })
            .collect(),
        positive_deltas: deltas,
        reset_hint: 0,
        timestamp: timestamp_ms,
    }
}

/// The body of a push of `rows` (and the sender's own counters) at `timestamp_ms`: the
/// snappy-compressed `WriteRequest` with its headers.
pub fn body(
    rows: &[(&AgentSnapshot, &[(&str, &str)])],
    own: Option<OwnSeries>,
    timestamp_ms: i64,
) -> Body {
    let raw = write_request(rows, own, timestamp_ms).encode_to_vec();
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
pub struct RemoteWrite {
    /// The labelled snapshots of each push.
    pub source: Source,
    /// The labels of the sender's own counters.
    pub own_labels: Labels,
}

impl Payload for RemoteWrite {
    fn build(&mut self, pushes: &PushStatsSnapshot) -> Body {
        let rows = (self.source)();
        let labels: Vec<Vec<(&str, &str)>> = rows
            .iter()
            .map(|(_, l)| l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect())
            .collect();
        let refs: Vec<(&AgentSnapshot, &[(&str, &str)])> = rows
            .iter()
            .zip(&labels)
            .map(|((s, _), l)| (s, l.as_slice()))
            .collect();
        let own_labels: Vec<(&str, &str)> = self
            .own_labels
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let own = OwnSeries {
            labels: &own_labels,
            pushes,
        };
        body(&refs, Some(own), now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::{Event, EventType};
    use nixl_telemetry_series::{AgentSeries, Buckets, WorkloadLabels};

    #[test]
    fn every_series_carries_the_workload_labels_sorted_among_the_others() {
        let labels =
            WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), "42".into())]).unwrap();
        let s = AgentSeries::new("a", "h", Buckets::default()).with_labels(labels);
        s.apply(&[Event::new(EventType::AgentTxBytes, 10)]);
        let snapshot = s.snapshot();
        let request = write_request(&[(&snapshot, &[("agent_name", "a")])], None, 1);
        assert!(!request.timeseries.is_empty());
        for series in &request.timeseries {
            let names: Vec<&str> = series.labels.iter().map(|l| l.name.as_str()).collect();
            assert!(names.contains(&"slurm_job_id"), "{names:?}");
            assert!(names.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
        }
    }

    #[test]
    fn native_histograms_are_one_histogram_sample_per_family_beside_the_classic_series() {
        let off = AgentSeries::new("a", "h", Buckets::default());
        let on =
            AgentSeries::new("a", "h", Buckets::default()).with_native_histograms(true, 3, 160);
        for s in [&off, &on] {
            s.apply(&[
                Event::new(EventType::AgentXferTime, 100),
                Event::new(EventType::AgentTxBytes, 4096),
            ]);
        }
        let (off, on) = (off.snapshot(), on.snapshot());
        let plain = write_request(&[(&off, &[("agent_name", "a")])], None, 7);
        assert!(plain.timeseries.iter().all(|t| t.histograms.is_empty()));
        let native = write_request(&[(&on, &[("agent_name", "a")])], None, 7);
        let histograms: Vec<(&str, &proto::Histogram)> = native
            .timeseries
            .iter()
            .filter(|t| !t.histograms.is_empty())
            .map(|t| (t.labels[0].value.as_str(), &t.histograms[0]))
            .collect();
        let names: Vec<&str> = histograms.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "agent_rx_request_size_bytes",
                "agent_tx_request_size_bytes",
                "agent_xfer_post_time_us",
                "agent_xfer_time_us"
            ]
        );
        let time = histograms[3].1;
        assert_eq!(
            (time.count_int, time.sum, time.schema, time.timestamp),
            (1, 100.0, 3, 7)
        );
        assert_eq!(
            time.positive_spans,
            [proto::BucketSpan {
                offset: 54,
                length: 1
            }]
        );
        assert_eq!(time.positive_deltas, [1]);
        assert!(native
            .timeseries
            .iter()
            .all(|t| t.samples.is_empty() != t.histograms.is_empty()));
        // The classic series are all still there, with the same samples.
        let classic: Vec<&proto::TimeSeries> = native
            .timeseries
            .iter()
            .filter(|t| t.histograms.is_empty())
            .collect();
        assert_eq!(classic, plain.timeseries.iter().collect::<Vec<_>>());
    }

    #[test]
    fn the_senders_own_counters_are_pushed_with_its_labels_in_sorted_order() {
        let s = AgentSeries::new("a", "h", Buckets::default());
        let snapshot = s.snapshot();
        let pushes = PushStatsSnapshot {
            attempts: 3,
            successes: 2,
            failures: 1,
            bytes: 700,
        };
        let own = OwnSeries {
            labels: &[("hostname", "h"), ("agent_name", "a")],
            pushes: &pushes,
        };
        let request = write_request(&[(&snapshot, &[("agent_name", "a")])], Some(own), 1);
        let value = |name: &str| {
            let found: Vec<&proto::TimeSeries> = request
                .timeseries
                .iter()
                .filter(|t| t.labels[0].value == name)
                .collect();
            assert_eq!(found.len(), 1, "{name}");
            let names: Vec<&str> = found[0].labels.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["__name__", "agent_name", "hostname"]);
            found[0].samples[0].value
        };
        assert_eq!(value("nixl_telemetry_push_attempts_total"), 3.0);
        assert_eq!(value("nixl_telemetry_push_successes_total"), 2.0);
        assert_eq!(value("nixl_telemetry_push_failures_total"), 1.0);
        assert_eq!(value("nixl_telemetry_push_bytes_total"), 700.0);
        let keys: Vec<Vec<(&str, &str)>> = request
            .timeseries
            .iter()
            .map(|t| {
                t.labels
                    .iter()
                    .map(|l| (l.name.as_str(), l.value.as_str()))
                    .collect()
            })
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "series sorted by labels"
        );
    }
}
