//! OTLP/HTTP metrics (used by the `otlp` plug-in, `libtelemetry_exporter_otlp.so`, and
//! `nixl-telemetry serve --otlp`): metrics pushed as OTLP/HTTP with protobuf
//! (`POST .../v1/metrics`, `Content-Type: application/x-protobuf`, optionally gzip), through
//! the shared push loop of `nixl_telemetry_push`. Configuration: [`config`] (the standard
//! `OTEL_*` variables). The request's protobuf is written by hand ([`encode`](mod@encode)); the tests check
//! it byte for byte against the messages generated from the official opentelemetry-proto
//! definitions (`opentelemetry-proto`'s prost types, a dev-dependency only).
//!
//! Mapping, chosen so that a Prometheus conversion with default settings (the OpenTelemetry
//! Collector's) gives back the `prometheus` exporter's names:
//! - every metric is named as the `prometheus` exporter's family (`agent_tx_bytes_total`,
//!   `agent_xfer_time_us`, ...), with no unit (a unit would add a suffix) and the family's
//!   HELP text as description;
//! - counters (and `agent_errors_total`, one point per `status` attribute) are monotonic
//!   Sums of integers; the last-operation gauges are Gauges; the transfer-time histograms
//!   are explicit-bucket Histograms with the same bounds (`NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`);
//!   with `OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=base2_exponential_bucket_histogram`
//!   ([`ENV_HISTOGRAM_AGGREGATION`]) they are base-2 ExponentialHistograms instead (scale 3, at
//!   most 160 buckets, see `nixl_telemetry_series::native`), and the request sizes
//!   (`agent_tx_request_size_bytes`, `agent_rx_request_size_bytes`) follow as
//!   ExponentialHistograms;
//! - data-point attributes: `agent_name`, `local_rank` (when the rank variable is set),
//!   `status` (errors);
//! - resource attributes: `service.name` (default `nixl`), `service.instance.id` (the
//!   sender's identity, [`crate::rows::instance`], which remote-write's `instance` label holds
//!   too; set by [`OtlpConfig::from_settings`]), `host.name`, `process.pid`, and
//!   `OTEL_RESOURCE_ATTRIBUTES`. The
//!   `prometheus` exporter's `hostname` label is the resource's `host.name` here;
//! - the sender's own counters ([`PUSH_COUNTERS`](crate::pusher::PUSH_COUNTERS)) follow as monotonic Sums.
//!
//! Temporality: cumulative by default (start time: the exporter's creation); with delta, each
//! accepted push reports what changed since the previous accepted one (a failed push's
//! changes are in the next), so deltas add up to the cumulative totals. A `partial_success`
//! in the receiver's answer is logged once per distinct message.

pub mod config;
pub mod encode;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::pusher::{Payload, PushStatsSnapshot};
use crate::rows::{Labels, Source};
use crate::target::Body;
use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings;
use nixl_telemetry_series::AgentSnapshot;
use prost::Message;

pub use config::{OtlpConfig, Temporality};
pub use encode::encode;

/// The standard variable choosing the histogram aggregation: `explicit_bucket_histogram` (the
/// default) or `base2_exponential_bucket_histogram`; a declared setting
/// (`nixl_telemetry_base::settings::OTEL_HISTOGRAM_AGGREGATION`), so NIXL's configuration file
/// can set it too.
pub const ENV_HISTOGRAM_AGGREGATION: &str = settings::OTEL_HISTOGRAM_AGGREGATION.name;

/// Whether [`ENV_HISTOGRAM_AGGREGATION`] (read through `lookup`, the settings lookup: the
/// environment, then NIXL's configuration file) asks for exponential histograms: unset or
/// empty, or `explicit_bucket_histogram`, no; `base2_exponential_bucket_histogram`, yes
/// (either case); anything else is an error naming the variable.
pub fn exponential_histograms(lookup: Lookup) -> Result<bool, String> {
    let value = lookup(ENV_HISTOGRAM_AGGREGATION).map_err(|e| e.message)?;
    let explicit = settings::OTEL_HISTOGRAM_AGGREGATION.default_str();
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case(explicit) => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("base2_exponential_bucket_histogram") => Ok(true),
        Some(v) => Err(format!(
            "{ENV_HISTOGRAM_AGGREGATION}='{v}' is invalid: it must be explicit_bucket_histogram \
             or base2_exponential_bucket_histogram"
        )),
    }
}

/// The value of a resource attribute: OTLP's `AnyValue`, of the two kinds sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeValue {
    /// `string_value`.
    String(String),
    /// `int_value`.
    Int(i64),
}

/// A resource attribute (OTLP's `KeyValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// The key (`service.name`, ...).
    pub key: String,
    /// The value.
    pub value: AttributeValue,
}

impl Attribute {
    /// A string attribute.
    pub fn string(key: &str, value: &str) -> Attribute {
        Attribute {
            key: key.to_owned(),
            value: AttributeValue::String(value.to_owned()),
        }
    }
}

/// The resource of this process: the configured attributes (`service.name` first, and
/// `service.instance.id`: see [`OtlpConfig::from_settings`]), then `host.name` and
/// `process.pid` unless configured.
pub fn resource(configured: &[(String, String)], host: &str) -> Vec<Attribute> {
    let pid = std::process::id();
    let mut attrs: Vec<Attribute> = configured
        .iter()
        .map(|(k, v)| Attribute::string(k, v))
        .collect();
    let has = |attrs: &[Attribute], k: &str| attrs.iter().any(|a| a.key == k);
    if !has(&attrs, "host.name") {
        attrs.push(Attribute::string("host.name", host));
    }
    if !has(&attrs, "process.pid") {
        attrs.push(Attribute {
            key: "process.pid".into(),
            value: AttributeValue::Int(i64::from(pid)),
        });
    }
    attrs
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `current - base`, series by series (gauges keep their current value).
pub fn delta(current: &AgentSnapshot, base: &AgentSnapshot) -> AgentSnapshot {
    let mut d = current.clone();
    for (c, b) in d.counters.iter_mut().zip(&base.counters) {
        *c = c.wrapping_sub(*b);
    }
    for (h, b) in d.histograms.iter_mut().zip(&base.histograms) {
        for (c, b) in h.buckets.iter_mut().zip(&b.buckets) {
            *c = c.wrapping_sub(*b);
        }
        h.sum = h.sum.wrapping_sub(b.sum);
    }
    if let (Some(now), Some(base)) = (&mut d.native, &base.native) {
        for (n, b) in now.iter_mut().zip(base.iter()) {
            *n = n.since(b);
        }
    }
    d
}

/// One row of an export: a snapshot, its data-point attributes, and the start of its period.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// The values (for delta temporality: the changes).
    pub snapshot: &'a AgentSnapshot,
    /// Data-point attributes (`agent_name`, `local_rank`, ...); the snapshot's workload labels
    /// follow them.
    pub attributes: &'a [(&'a str, &'a str)],
    /// The start of the period (cumulative: the exporter's start; delta: the last push).
    pub start_ns: u64,
}

/// The sender's own counters in an export: their data-point attributes, values (for delta
/// temporality: the changes) and the start of their period.
#[derive(Clone, Copy, Debug)]
pub struct OwnPoints<'a> {
    /// Data-point attributes of the sender's counters.
    pub attributes: &'a [(&'a str, &'a str)],
    /// The counters (as they were before this push) or their changes.
    pub pushes: &'a PushStatsSnapshot,
    /// The start of the period.
    pub start_ns: u64,
}

/// The OTLP/HTTP body of an encoded request, gzip-compressed if `gzip`.
pub fn body(raw: Vec<u8>, gzip: bool) -> Body {
    let (bytes, content_encoding) = if gzip {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).expect("writing to memory");
        (z.finish().expect("writing to memory"), Some("gzip"))
    } else {
        (raw, None)
    };
    Body {
        bytes,
        content_type: "application/x-protobuf",
        content_encoding,
        headers: &[],
    }
}

/// The OTLP payload over any source of labelled snapshots: keeps the start time, the delta
/// baselines (by attributes) and the partial-success messages already logged.
pub struct Otlp {
    source: Source,
    resource: Vec<Attribute>,
    temporality: Temporality,
    gzip: bool,
    start_ns: u64,
    /// Delta: the last accepted snapshot and its time, by attributes.
    baseline: HashMap<Labels, (AgentSnapshot, u64)>,
    /// Delta: what the body being sent holds, to become the baseline once accepted.
    pending: Vec<(Labels, AgentSnapshot, u64)>,
    /// Data-point attributes of the sender's own counters.
    own_attributes: Labels,
    /// Delta: the sender's counters last accepted and their time.
    own_baseline: (PushStatsSnapshot, u64),
    /// Delta: the sender's counters in the body being sent.
    own_pending: (PushStatsSnapshot, u64),
    logged: HashSet<String>,
    /// The length of the last request, to allocate the next one's at once.
    last_len: usize,
}

impl Otlp {
    /// A payload of `source`'s rows with this configuration and host; the sender's own
    /// counters carry `own_attributes`.
    pub fn new(source: Source, own_attributes: Labels, config: &OtlpConfig, host: &str) -> Otlp {
        let start_ns = now_ns();
        Otlp {
            own_attributes,
            own_baseline: (PushStatsSnapshot::default(), start_ns),
            own_pending: (PushStatsSnapshot::default(), start_ns),
            source,
            resource: resource(&config.resource, host),
            temporality: config.temporality,
            gzip: config.gzip,
            start_ns,
            baseline: HashMap::new(),
            pending: Vec::new(),
            logged: HashSet::new(),
            last_len: 0,
        }
    }
}

impl Payload for Otlp {
    fn build(&mut self, pushes: &PushStatsSnapshot) -> Body {
        let now = now_ns();
        let rows = (self.source)();
        let mut values = Vec::with_capacity(rows.len());
        self.pending.clear();
        for (snapshot, attrs) in &rows {
            match self.temporality {
                Temporality::Cumulative => values.push((Cow::Borrowed(snapshot), self.start_ns)),
                Temporality::Delta => {
                    let (d, start) = match self.baseline.get(attrs) {
                        Some((base, at)) => (Cow::Owned(delta(snapshot, base)), *at),
                        None => (Cow::Borrowed(snapshot), self.start_ns),
                    };
                    values.push((d, start));
                    self.pending.push((attrs.clone(), snapshot.clone(), now));
                }
            }
        }
        let attrs: Vec<Vec<(&str, &str)>> = rows
            .iter()
            .map(|(_, a)| a.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
            .collect();
        let rows: Vec<Row> = values
            .iter()
            .zip(&attrs)
            .map(|((snapshot, start_ns), attributes)| Row {
                snapshot,
                attributes,
                start_ns: *start_ns,
            })
            .collect();
        let (own_values, own_start) = match self.temporality {
            Temporality::Cumulative => (*pushes, self.start_ns),
            Temporality::Delta => {
                let (base, at) = self.own_baseline;
                self.own_pending = (*pushes, now);
                (
                    PushStatsSnapshot {
                        attempts: pushes.attempts - base.attempts,
                        successes: pushes.successes - base.successes,
                        failures: pushes.failures - base.failures,
                        bytes: pushes.bytes - base.bytes,
                        exits: pushes.exits - base.exits,
                    },
                    at,
                )
            }
        };
        let own_attributes: Vec<(&str, &str)> = self
            .own_attributes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let own = OwnPoints {
            attributes: &own_attributes,
            pushes: &own_values,
            start_ns: own_start,
        };
        let mut raw = Vec::with_capacity(self.last_len);
        encode(
            &rows,
            Some(own),
            &self.resource,
            self.temporality,
            now,
            &mut raw,
        );
        self.last_len = raw.len();
        body(raw, self.gzip)
    }

    fn sent(&mut self, answer: &[u8]) {
        for (attrs, snapshot, at) in self.pending.drain(..) {
            self.baseline.insert(attrs, (snapshot, at));
        }
        if self.temporality == Temporality::Delta {
            self.own_baseline = self.own_pending;
        }
        let Ok(response) = Response::decode(answer) else {
            return;
        };
        if let Some(p) = response.partial_success {
            if (p.rejected_data_points != 0 || !p.error_message.is_empty())
                && self.logged.insert(p.error_message.clone())
            {
                log::warn!(
                    "otlp: the receiver rejected {} data points: {}",
                    p.rejected_data_points,
                    p.error_message
                );
            }
        }
    }
}

/// The receiver's answer (`ExportMetricsServiceResponse`), of which only its partial success
/// is read: the two messages declared from the official definitions for prost, as far as read.
#[derive(Clone, PartialEq, prost::Message)]
struct Response {
    /// `partial_success`.
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

/// `ExportMetricsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
struct PartialSuccess {
    /// `rejected_data_points`.
    #[prost(int64, tag = "1")]
    rejected_data_points: i64,
    /// `error_message`.
    #[prost(string, tag = "2")]
    error_message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::{Event, EventType};
    use nixl_telemetry_series::{AgentSeries, Buckets};
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
    };

    #[test]
    fn the_aggregation_variable_is_parsed_strictly() {
        let env = |v: &'static str| move |_: &str| Ok(Some(v.to_owned()));
        assert_eq!(exponential_histograms(&|_: &str| Ok(None)), Ok(false));
        assert_eq!(exponential_histograms(&env("")), Ok(false));
        assert_eq!(
            exponential_histograms(&env("explicit_bucket_histogram")),
            Ok(false)
        );
        assert_eq!(
            exponential_histograms(&env(" BASE2_exponential_bucket_histogram ")),
            Ok(true)
        );
        let e = exponential_histograms(&env("exponential")).unwrap_err();
        assert!(e.starts_with(ENV_HISTOGRAM_AGGREGATION), "{e}");
    }

    #[test]
    fn a_delta_subtracts_the_native_histograms() {
        let s = AgentSeries::new("a", "h", Buckets::default()).with_native_histograms(true, 3, 160);
        s.apply(&[Event::new(EventType::AgentXferTime, 100)]);
        let base = s.snapshot();
        s.apply(&[
            Event::new(EventType::AgentXferTime, 100),
            Event::new(EventType::AgentXferTime, 5000),
        ]);
        let d = delta(&s.snapshot(), &base);
        let h = d.native_histogram(EventType::AgentXferTime).unwrap();
        assert_eq!((h.count(), h.sum()), (2, 5100));
        assert_eq!(h.buckets().map(|(_, n)| n).sum::<u64>(), 2);
    }

    fn answer(rejected: i64, message: &str) -> Vec<u8> {
        ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: rejected,
                error_message: message.into(),
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn a_partial_success_is_logged_once_per_distinct_message() {
        let env = nixl_telemetry_base::env::fixed_env(&[]);
        let config = OtlpConfig::from_settings(&env, "h").unwrap();
        let mut p = Otlp::new(Box::new(Vec::new), Vec::new(), &config, "h");
        p.sent(&[]);
        p.sent(&answer(0, ""));
        assert!(p.logged.is_empty());
        p.sent(&answer(3, "too old"));
        p.sent(&answer(5, "too old"));
        p.sent(&answer(1, "bad name"));
        assert_eq!(p.logged.len(), 2);
        assert!(p.logged.contains("too old") && p.logged.contains("bad name"));
    }

    #[test]
    fn delta_subtracts_counters_and_histograms_and_keeps_gauges() {
        use nixl_telemetry_base::EventType::*;
        let s = AgentSeries::new("a", "h", Buckets::default());
        s.apply(&[Event::new(AgentTxBytes, 10), Event::new(AgentXferTime, 30)]);
        let base = s.snapshot();
        s.apply(&[Event::new(AgentTxBytes, 5), Event::new(AgentXferTime, 700)]);
        let d = delta(&s.snapshot(), &base);
        assert_eq!(d.counter(AgentTxBytes), 5);
        assert_eq!(d.gauge(AgentTxBytes), Some(5));
        let h = d.histogram(AgentXferTime).unwrap();
        assert_eq!((h.count(), h.sum), (1, 700));
    }
}
