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
use crate::rows::{self, Labels};
use crate::target::{millis, Body, Target, TargetVars};
use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings;
use nixl_telemetry_base::EventType;
use nixl_telemetry_series::native::{NativeHistogram, ZERO_THRESHOLD};
use nixl_telemetry_series::{
    families, for_each_sample, for_each_value, AgentSnapshot, Buckets, FamilySource,
    WorkloadLabels, NATIVE_SIZE_FAMILIES,
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
            final_setting: ENV_FINAL_PUSH_MS,
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

/// Where a series' sample comes from at each push.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// The next value, in the order of [`values`].
    Value,
    /// The native histogram of this row and event type.
    Native(usize, EventType),
}

/// Every series of `rows` and of the sender's own counters, unsorted, each with where its
/// sample comes from: per row, every family's samples ([`for_each_sample`]), then the native
/// histograms; then the sender's counters. Labels sorted by name.
fn each_series(
    rows: &[(&AgentSnapshot, &[(&str, &str)])],
    own: Option<OwnSeries>,
    timestamp_ms: i64,
    mut out: impl FnMut(proto::TimeSeries, Slot),
) {
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
    for (row, (snapshot, labels)) in rows.iter().enumerate() {
        for family in families() {
            for_each_sample(family, snapshot, |suffix, extra, value| {
                out(
                    series(
                        format!("{}{suffix}", family.name),
                        &mut labels
                            .iter()
                            .copied()
                            .chain(snapshot.labels.iter())
                            .chain(extra),
                        value as f64,
                    ),
                    Slot::Value,
                );
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
            out(s, Slot::Native(row, t));
        }
    }
    if let Some(own) = own {
        for counter in &PUSH_COUNTERS {
            out(
                series(
                    counter.name.to_owned(),
                    &mut own.labels.iter().copied(),
                    (counter.value)(own.pushes) as f64,
                ),
                Slot::Value,
            );
        }
    }
}

/// The values of the [`Slot::Value`] series of [`each_series`], in its order, appended to `out`.
fn values(
    rows: &[(&AgentSnapshot, &[(&str, &str)])],
    own: Option<OwnSeries>,
    mut f: impl FnMut(f64),
) {
    for (snapshot, _) in rows {
        for family in families() {
            for_each_value(family, snapshot, |v| f(v as f64));
        }
    }
    if let Some(own) = own {
        PUSH_COUNTERS
            .iter()
            .for_each(|c| f((c.value)(own.pushes) as f64));
    }
}

/// The order of series in a request: by their labels (sorted by name), compared pair by pair.
fn by_labels(a: &proto::TimeSeries, b: &proto::TimeSeries) -> std::cmp::Ordering {
    a.labels
        .iter()
        .map(|l| (&l.name, &l.value))
        .cmp(b.labels.iter().map(|l| (&l.name, &l.value)))
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
    each_series(rows, own, timestamp_ms, |s, _| timeseries.push(s));
    timeseries.sort_by(by_labels);
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

/// What the labels of a push's series depend on, for one row: its labels, its snapshot's
/// workload labels, histogram bounds, and whether it keeps native histograms.
#[derive(Debug, PartialEq)]
struct RowKey {
    labels: Vec<(String, String)>,
    workload: WorkloadLabels,
    bounds: Vec<Buckets>,
    native: bool,
}

impl RowKey {
    fn of((snapshot, labels): &(&AgentSnapshot, &[(&str, &str)])) -> RowKey {
        RowKey {
            labels: labels
                .iter()
                .map(|&(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
            workload: snapshot.labels.clone(),
            bounds: snapshot
                .histograms
                .iter()
                .map(|h| h.bounds.clone())
                .collect(),
            native: snapshot.native.is_some(),
        }
    }

    fn matches(&self, (snapshot, labels): &(&AgentSnapshot, &[(&str, &str)])) -> bool {
        self.native == snapshot.native.is_some()
            && self.labels.len() == labels.len()
            && self
                .labels
                .iter()
                .zip(labels.iter())
                .all(|((n, v), (m, w))| n == m && v == w)
            && self.workload == snapshot.labels
            && self
                .bounds
                .iter()
                .zip(&snapshot.histograms)
                .all(|(b, h)| *b == h.bounds)
    }
}

/// One series of an [`Encoder`], in request order: its encoded labels and its sample's source.
#[derive(Debug)]
struct Encoded {
    /// The series' label fields, encoded, in [`Encoder::labels`].
    labels: std::ops::Range<usize>,
    /// Its index in the push's values, or its native histogram.
    source: Source,
}

#[derive(Clone, Copy, Debug)]
enum Source {
    Value(usize),
    Native(usize, EventType),
}

/// The remote-write encoder of a push loop: [`body`]'s bytes, built faster by keeping, from one
/// push to the next, what only depends on the series' labels: each series' label fields
/// encoded, in request order, and the buffers. A push only encodes the samples between the
/// kept labels and compresses the result. What was kept is rebuilt whenever a row's labels,
/// workload labels, histogram bounds or native histograms, the rows or the sender's labels
/// differ from the last push's.
pub struct Encoder {
    rows: Vec<RowKey>,
    own: Option<Vec<(String, String)>>,
    /// The label fields of every series, in request order.
    labels: Vec<u8>,
    series: Vec<Encoded>,
    values: Vec<f64>,
    /// By value index: where its sample is in `raw` as laid out, and whether it holds a value
    /// there (a value of 0 is left out).
    samples: Vec<(usize, bool)>,
    /// The last push's request, encoded.
    raw: Vec<u8>,
    /// When `raw` holds every series with the samples at their places: the length of its
    /// timestamps' field, which all samples share.
    laid_out: Option<usize>,
    compressed: Vec<u8>,
    snappy: snap::raw::Encoder,
    rebuilds: u64,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("series", &self.series.len())
            .field("rebuilds", &self.rebuilds)
            .finish()
    }
}

impl Encoder {
    /// A new encoder (nothing kept yet).
    pub fn new() -> Encoder {
        Encoder {
            rows: Vec::new(),
            own: None,
            labels: Vec::new(),
            series: Vec::new(),
            values: Vec::new(),
            samples: Vec::new(),
            raw: Vec::new(),
            laid_out: None,
            compressed: Vec::new(),
            snappy: snap::raw::Encoder::new(),
            rebuilds: 0,
        }
    }

    /// How many times the kept labels were built (the first push included).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    fn matches(&self, rows: &[(&AgentSnapshot, &[(&str, &str)])], own: Option<OwnSeries>) -> bool {
        self.rows.len() == rows.len()
            && self.rows.iter().zip(rows).all(|(k, r)| k.matches(r))
            && match (&self.own, own) {
                (None, None) => true,
                (Some(kept), Some(own)) => {
                    kept.len() == own.labels.len()
                        && kept
                            .iter()
                            .zip(own.labels)
                            .all(|((n, v), (m, w))| n == m && v == w)
                }
                _ => false,
            }
    }

    fn rebuild(&mut self, rows: &[(&AgentSnapshot, &[(&str, &str)])], own: Option<OwnSeries>) {
        let mut all = Vec::with_capacity(rows.len() * 64 + PUSH_COUNTERS.len());
        let mut next = 0;
        each_series(rows, own, 0, |s, slot| {
            let source = match slot {
                Slot::Value => {
                    next += 1;
                    Source::Value(next - 1)
                }
                Slot::Native(row, t) => Source::Native(row, t),
            };
            all.push((s, source));
        });
        all.sort_by(|(a, _), (b, _)| by_labels(a, b));
        self.labels.clear();
        self.series.clear();
        for (s, source) in all {
            let start = self.labels.len();
            for label in &s.labels {
                prost::encoding::message::encode(1, label, &mut self.labels);
            }
            self.series.push(Encoded {
                labels: start..self.labels.len(),
                source,
            });
        }
        self.rows = rows.iter().map(RowKey::of).collect();
        self.own = own.map(|o| {
            o.labels
                .iter()
                .map(|&(n, v)| (n.to_owned(), v.to_owned()))
                .collect()
        });
        self.rebuilds += 1;
    }

    /// The body of a push, byte for byte [`body`]'s of the same arguments.
    pub fn body(
        &mut self,
        rows: &[(&AgentSnapshot, &[(&str, &str)])],
        own: Option<OwnSeries>,
        timestamp_ms: i64,
    ) -> Body {
        if self.rebuilds == 0 || !self.matches(rows, own) {
            self.rebuild(rows, own);
            self.laid_out = None;
        }
        // A sample: `value` (a double, left out when 0) and `timestamp` (left out when 0).
        let mut timestamp = [0u8; 11];
        let timestamp_len = if timestamp_ms == 0 {
            0
        } else {
            timestamp[0] = 0x10;
            prost::encoding::encode_varint(timestamp_ms as u64, &mut &mut timestamp[1..]);
            1 + prost::encoding::encoded_len_varint(timestamp_ms as u64)
        };
        let timestamp = &timestamp[..timestamp_len];
        if !(self.laid_out == Some(timestamp_len) && self.overwrite(rows, own, timestamp)) {
            self.values.clear();
            values(rows, own, |v| self.values.push(v));
            self.lay_out(rows, timestamp_ms, timestamp);
        }
        self.compressed
            .resize(snap::raw::max_compress_len(self.raw.len()), 0);
        let n = self
            .snappy
            .compress(&self.raw, &mut self.compressed)
            .expect("snappy takes any input below 4 GiB");
        Body {
            bytes: self.compressed[..n].to_vec(),
            content_type: "application/x-protobuf",
            content_encoding: Some("snappy"),
            headers: HEADERS,
        }
    }

    /// Encodes the whole request into [`Encoder::raw`], noting where each sample is.
    fn lay_out(
        &mut self,
        rows: &[(&AgentSnapshot, &[(&str, &str)])],
        timestamp_ms: i64,
        timestamp: &[u8],
    ) {
        let raw = &mut self.raw;
        raw.clear();
        self.samples.clear();
        self.samples.resize(self.values.len(), (0, false));
        let mut natives = false;
        for series in &self.series {
            let labels = &self.labels[series.labels.clone()];
            match series.source {
                Source::Value(i) => {
                    let value = self.values[i];
                    let sample_len = if value != 0.0 { 9 } else { 0 } + timestamp.len();
                    let len = labels.len() + 2 + sample_len;
                    raw.push(0x0a);
                    prost::encoding::encode_varint(len as u64, raw);
                    raw.extend_from_slice(labels);
                    raw.push(0x12);
                    raw.push(sample_len as u8);
                    self.samples[i] = (raw.len(), value != 0.0);
                    if value != 0.0 {
                        raw.push(0x09);
                        raw.extend_from_slice(&value.to_le_bytes());
                    }
                    raw.extend_from_slice(timestamp);
                }
                Source::Native(row, t) => {
                    natives = true;
                    let h = rows[row].0.native_histogram(t).expect("kept with the row");
                    let h = native_sample(h, timestamp_ms);
                    let len = labels.len() + prost::encoding::message::encoded_len(4, &h);
                    raw.push(0x0a);
                    prost::encoding::encode_varint(len as u64, raw);
                    raw.extend_from_slice(labels);
                    prost::encoding::message::encode(4, &h, raw);
                }
            }
        }
        // Native histograms change in length: laid out anew at every push.
        self.laid_out = (!natives).then_some(timestamp.len());
    }

    /// Writes this push's samples over the last push's in [`Encoder::raw`], where they have
    /// the same length: false (and `raw` to be laid out anew) if a value went from or to 0.
    fn overwrite(
        &mut self,
        rows: &[(&AgentSnapshot, &[(&str, &str)])],
        own: Option<OwnSeries>,
        timestamp: &[u8],
    ) -> bool {
        let raw = &mut self.raw[..];
        let mut samples = self.samples.iter();
        let mut same = true;
        // Millisecond timestamps from 1971 to 2109 take 7 bytes: copied as such, without a call.
        let timestamp7: Option<[u8; 7]> = timestamp.try_into().ok();
        values(rows, own, |value| {
            let Some(&(mut at, nonzero)) = samples.next() else {
                same = false;
                return;
            };
            if (value != 0.0) != nonzero {
                same = false;
            } else if same {
                if nonzero {
                    raw[at + 1..at + 9].copy_from_slice(&value.to_le_bytes());
                    at += 9;
                }
                match timestamp7 {
                    Some(t) => raw[at..at + 7].copy_from_slice(&t),
                    None => raw[at..at + timestamp.len()].copy_from_slice(timestamp),
                }
            }
        });
        same
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
    source: rows::Source,
    own_labels: Labels,
    encoder: Encoder,
}

impl RemoteWrite {
    /// The payload of `source`'s labelled snapshots, the sender's own counters labelled with
    /// `own_labels`.
    pub fn new(source: rows::Source, own_labels: Labels) -> RemoteWrite {
        RemoteWrite {
            source,
            own_labels,
            encoder: Encoder::new(),
        }
    }
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
        self.encoder.body(&refs, Some(own), now_ms())
    }
}

#[cfg(test)]
mod tests;
