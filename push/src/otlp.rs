//! OTLP/HTTP metrics (used by the `otlp` plug-in, `libtelemetry_exporter_otlp.so`, and
//! `nixl-telemetry serve --otlp`): metrics pushed as OTLP/HTTP with protobuf
//! (`POST .../v1/metrics`, `Content-Type: application/x-protobuf`, optionally gzip), using
//! the messages generated from the official opentelemetry-proto definitions
//! (`opentelemetry-proto`'s prost types), through the shared push loop of
//! `nixl_telemetry_push`. Configuration: [`config`] (the standard `OTEL_*` variables).
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
//! - resource attributes: `service.name` (default `nixl`), `service.instance.id`
//!   (`NIXL_TELEMETRY_PUSH_INSTANCE`, else `<host>:<pid>`: remote-write's `instance` label;
//!   see [`crate::rows::instance`]), `host.name`, `process.pid`, and `OTEL_RESOURCE_ATTRIBUTES`. The
//!   `prometheus` exporter's `hostname` label is the resource's `host.name` here;
//! - the sender's own counters ([`PUSH_COUNTERS`]) follow as monotonic Sums.
//!
//! Temporality: cumulative by default (start time: the exporter's creation); with delta, each
//! accepted push reports what changed since the previous accepted one (a failed push's
//! changes are in the next), so deltas add up to the cumulative totals. A `partial_success`
//! in the receiver's answer is logged once per distinct message.

pub mod config;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::pusher::{Payload, PushStatsSnapshot, PUSH_COUNTERS};
use crate::rows::{Labels, Source};
use crate::target::Body;
use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::EventType;
use nixl_telemetry_series::native::{NativeHistogram, ZERO_THRESHOLD};
use nixl_telemetry_series::{
    error_statuses, families, AgentSnapshot, FamilySource, HistogramSnapshot, NATIVE_SIZE_FAMILIES,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point, metric, number_data_point, AggregationTemporality,
    ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

pub use config::{OtlpConfig, Temporality};

/// The standard variable choosing the histogram aggregation: `explicit_bucket_histogram` (the
/// default) or `base2_exponential_bucket_histogram`.
pub const ENV_HISTOGRAM_AGGREGATION: &str =
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION";

/// Whether [`ENV_HISTOGRAM_AGGREGATION`] (read through `env`) asks for exponential histograms:
/// unset or empty, or `explicit_bucket_histogram`, no; `base2_exponential_bucket_histogram`,
/// yes (either case); anything else is an error naming the variable.
pub fn exponential_histograms(env: Lookup) -> Result<bool, String> {
    let value = env(ENV_HISTOGRAM_AGGREGATION).map_err(|e| e.message)?;
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("explicit_bucket_histogram") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("base2_exponential_bucket_histogram") => Ok(true),
        Some(v) => Err(format!(
            "{ENV_HISTOGRAM_AGGREGATION}='{v}' is invalid: it must be explicit_bucket_histogram \
             or base2_exponential_bucket_histogram"
        )),
    }
}

/// `h` as an exponential histogram data point (OpenTelemetry's bucket `i` is
/// `(b^i, b^(i+1)]`, one below Prometheus's index of the same bucket).
fn exponential_point(
    h: &NativeHistogram,
    attributes: Vec<KeyValue>,
    start_ns: u64,
    now_ns: u64,
) -> ExponentialHistogramDataPoint {
    let (offset, counts) = h.dense();
    ExponentialHistogramDataPoint {
        attributes,
        start_time_unix_nano: start_ns,
        time_unix_nano: now_ns,
        count: h.count(),
        sum: Some(h.sum() as f64),
        scale: i32::from(h.schema()),
        zero_count: h.zero_count(),
        zero_threshold: ZERO_THRESHOLD,
        positive: Some(exponential_histogram_data_point::Buckets {
            offset: offset - 1,
            bucket_counts: counts.to_vec(),
        }),
        ..Default::default()
    }
}

/// A string attribute.
pub fn string_attr(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// The resource of this process: the configured attributes (`service.name` first), then
/// `service.instance.id`, `host.name` and `process.pid` unless configured.
pub fn resource(configured: &[(String, String)], host: &str) -> Vec<KeyValue> {
    let pid = std::process::id();
    let mut attrs: Vec<KeyValue> = configured.iter().map(|(k, v)| string_attr(k, v)).collect();
    let has = |attrs: &[KeyValue], k: &str| attrs.iter().any(|a| a.key == k);
    if !has(&attrs, "service.instance.id") {
        attrs.push(string_attr("service.instance.id", &format!("{host}:{pid}")));
    }
    if !has(&attrs, "host.name") {
        attrs.push(string_attr("host.name", host));
    }
    if !has(&attrs, "process.pid") {
        attrs.push(KeyValue {
            key: "process.pid".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(pid as i64)),
            }),
            ..Default::default()
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

/// The export request of `rows` and of the sender's own counters (monotonic Sums named as
/// [`PUSH_COUNTERS`]) at `now_ns` with resource attributes `resource`.
pub fn request(
    rows: &[Row],
    own: Option<OwnPoints>,
    resource: Vec<KeyValue>,
    temporality: Temporality,
    now_ns: u64,
) -> ExportMetricsServiceRequest {
    let temporality = match temporality {
        Temporality::Cumulative => AggregationTemporality::Cumulative,
        Temporality::Delta => AggregationTemporality::Delta,
    } as i32;
    let attrs = |row: &Row, extra: Option<(&str, &str)>| -> Vec<KeyValue> {
        row.attributes
            .iter()
            .copied()
            .chain(row.snapshot.labels.iter())
            .chain(extra)
            .map(|(k, v)| string_attr(k, v))
            .collect()
    };
    let point = |row: &Row, extra, value: u64| NumberDataPoint {
        attributes: attrs(row, extra),
        start_time_unix_nano: row.start_ns,
        time_unix_nano: now_ns,
        value: Some(number_data_point::Value::AsInt(value as i64)),
        ..Default::default()
    };
    let metrics = families()
        .iter()
        .map(|family| {
            let data = match family.source {
                FamilySource::Counter(t) => metric::Data::Sum(Sum {
                    data_points: rows
                        .iter()
                        .map(|r| point(r, None, r.snapshot.counters[t as usize]))
                        .collect(),
                    aggregation_temporality: temporality,
                    is_monotonic: true,
                }),
                FamilySource::Errors => metric::Data::Sum(Sum {
                    data_points: rows
                        .iter()
                        .flat_map(|r| {
                            error_statuses().map(move |(t, s)| {
                                point(r, Some(("status", s)), r.snapshot.counters[t as usize])
                            })
                        })
                        .collect(),
                    aggregation_temporality: temporality,
                    is_monotonic: true,
                }),
                FamilySource::Gauge(t) => metric::Data::Gauge(Gauge {
                    data_points: rows
                        .iter()
                        .map(|r| NumberDataPoint {
                            start_time_unix_nano: 0,
                            ..point(r, None, r.snapshot.gauges[t as usize])
                        })
                        .collect(),
                }),
                FamilySource::Histogram(t)
                    if !rows.is_empty()
                        && rows
                            .iter()
                            .all(|r| r.snapshot.native_histogram(t).is_some()) =>
                {
                    metric::Data::ExponentialHistogram(ExponentialHistogram {
                        data_points: rows
                            .iter()
                            .map(|r| {
                                let h = r.snapshot.native_histogram(t).expect("checked");
                                exponential_point(h, attrs(r, None), r.start_ns, now_ns)
                            })
                            .collect(),
                        aggregation_temporality: temporality,
                    })
                }
                FamilySource::Histogram(t) => metric::Data::Histogram(Histogram {
                    data_points: rows
                        .iter()
                        .map(|r| {
                            let h: &HistogramSnapshot =
                                r.snapshot.histogram(t).expect("histogram event");
                            HistogramDataPoint {
                                attributes: attrs(r, None),
                                start_time_unix_nano: r.start_ns,
                                time_unix_nano: now_ns,
                                count: h.count(),
                                sum: Some(h.sum as f64),
                                bucket_counts: h.buckets.clone(),
                                explicit_bounds: h.bounds.bounds().to_vec(),
                                ..Default::default()
                            }
                        })
                        .collect(),
                    aggregation_temporality: temporality,
                }),
            };
            Metric {
                name: family.name.to_owned(),
                description: family.help.to_owned(),
                data: Some(data),
                ..Default::default()
            }
        })
        .chain(NATIVE_SIZE_FAMILIES.iter().filter_map(|&(name, help, t)| {
            let data_points: Vec<ExponentialHistogramDataPoint> = rows
                .iter()
                .filter_map(|r| {
                    let h = r.snapshot.native_histogram(t)?;
                    Some(exponential_point(h, attrs(r, None), r.start_ns, now_ns))
                })
                .collect();
            (!data_points.is_empty()).then(|| Metric {
                name: name.to_owned(),
                description: help.to_owned(),
                data: Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
                    data_points,
                    aggregation_temporality: temporality,
                })),
                ..Default::default()
            })
        }))
        .chain(own.into_iter().flat_map(|own| {
            PUSH_COUNTERS.iter().map(move |counter| Metric {
                name: counter.name.to_owned(),
                description: counter.help.to_owned(),
                data: Some(metric::Data::Sum(Sum {
                    data_points: vec![NumberDataPoint {
                        attributes: own
                            .attributes
                            .iter()
                            .map(|(k, v)| string_attr(k, v))
                            .collect(),
                        start_time_unix_nano: own.start_ns,
                        time_unix_nano: now_ns,
                        value: Some(number_data_point::Value::AsInt(
                            (counter.value)(own.pushes) as i64
                        )),
                        ..Default::default()
                    }],
                    aggregation_temporality: temporality,
                    is_monotonic: true,
                })),
                ..Default::default()
            })
        }))
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "nixl-telemetry".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Appends to `out` the protobuf of [`request`] with the same arguments, byte for byte, without
/// building the message: every data point is written straight from the snapshots, each row's
/// attributes encoded once for all its points (the explicit-bucket and number points by hand,
/// the rare exponential ones through their messages).
pub fn encode(
    rows: &[Row],
    own: Option<OwnPoints>,
    resource: &[KeyValue],
    temporality: Temporality,
    now_ns: u64,
    out: &mut Vec<u8>,
) {
    let temporality = match temporality {
        Temporality::Cumulative => AggregationTemporality::Cumulative,
        Temporality::Delta => AggregationTemporality::Delta,
    } as u64;
    // Each row's attributes (its own, then the snapshot's workload labels), as the encoded
    // `KeyValue` messages without their field key, one after the other; and `status`.
    let mut attributes = Vec::new();
    let mut row_attributes = Vec::with_capacity(rows.len());
    for row in rows {
        let start = attributes.len();
        for (k, v) in row
            .attributes
            .iter()
            .copied()
            .chain(row.snapshot.labels.iter())
        {
            key_value(k, v, &mut attributes);
        }
        row_attributes.push(start..attributes.len());
    }
    let own_attributes = {
        let start = attributes.len();
        for &(k, v) in own.iter().flat_map(|o| o.attributes) {
            key_value(k, v, &mut attributes);
        }
        start..attributes.len()
    };
    let attributes = &attributes[..];
    // A row's attributes as fields `field` of a point, then `extra`'s.
    let write_attributes = |field: u32,
                            range: &std::ops::Range<usize>,
                            extra: Option<(&str, &str)>,
                            out: &mut Vec<u8>| {
        let mut at = range.start;
        while at < range.end {
            let (len, n) = read_varint(&attributes[at..]);
            key(field, 2, out);
            out.extend_from_slice(&attributes[at..at + n + len]);
            at += n + len;
        }
        if let Some((k, v)) = extra {
            key(field, 2, out);
            let mut kv = Vec::new();
            key_value(k, v, &mut kv);
            out.extend_from_slice(&kv);
        }
    };
    // A `NumberDataPoint` as field 1 of its metric.
    let number =
        |range: &std::ops::Range<usize>, extra, start_ns: u64, value: u64, out: &mut Vec<u8>| {
            nested(1, out, |out| {
                fixed64(2, start_ns, out);
                fixed64(3, now_ns, out);
                key(6, 1, out);
                out.extend_from_slice(&value.to_le_bytes());
                write_attributes(7, range, extra, out);
            });
        };
    let sum = |out: &mut Vec<u8>, points: &mut dyn FnMut(&mut Vec<u8>)| {
        nested(7, out, |out| {
            points(out);
            varint_field(2, temporality, out);
            varint_field(3, 1, out);
        });
    };
    nested(1, out, |out| {
        prost::encoding::message::encode(
            1,
            &Resource {
                attributes: resource.to_vec(),
                ..Default::default()
            },
            out,
        );
        nested(2, out, |out| {
            prost::encoding::message::encode(1, &scope(), out);
            for family in families() {
                nested(2, out, |out| {
                    string_field(1, family.name, out);
                    string_field(2, family.help, out);
                    match family.source {
                        FamilySource::Counter(t) => sum(out, &mut |out| {
                            for (r, a) in rows.iter().zip(&row_attributes) {
                                number(a, None, r.start_ns, r.snapshot.counters[t as usize], out);
                            }
                        }),
                        FamilySource::Errors => sum(out, &mut |out| {
                            for (r, a) in rows.iter().zip(&row_attributes) {
                                for (t, status) in error_statuses() {
                                    let value = r.snapshot.counters[t as usize];
                                    number(a, Some(("status", status)), r.start_ns, value, out);
                                }
                            }
                        }),
                        FamilySource::Gauge(t) => nested(5, out, |out| {
                            for (r, a) in rows.iter().zip(&row_attributes) {
                                number(a, None, 0, r.snapshot.gauges[t as usize], out);
                            }
                        }),
                        FamilySource::Histogram(t) if exponential(rows, t) => {
                            nested(10, out, |out| {
                                for r in rows {
                                    let h = r.snapshot.native_histogram(t).expect("checked");
                                    let point = exponential_point(
                                        h,
                                        point_attributes(r),
                                        r.start_ns,
                                        now_ns,
                                    );
                                    prost::encoding::message::encode(1, &point, out);
                                }
                                varint_field(2, temporality, out);
                            })
                        }
                        FamilySource::Histogram(t) => nested(9, out, |out| {
                            for (r, a) in rows.iter().zip(&row_attributes) {
                                let h: &HistogramSnapshot =
                                    r.snapshot.histogram(t).expect("histogram event");
                                nested(1, out, |out| {
                                    fixed64(2, r.start_ns, out);
                                    fixed64(3, now_ns, out);
                                    fixed64(4, h.count(), out);
                                    key(5, 1, out);
                                    out.extend_from_slice(&(h.sum as f64).to_le_bytes());
                                    if !h.buckets.is_empty() {
                                        key(6, 2, out);
                                        push_varint(8 * h.buckets.len() as u64, out);
                                        for c in &h.buckets {
                                            out.extend_from_slice(&c.to_le_bytes());
                                        }
                                    }
                                    let bounds = h.bounds.bounds();
                                    if !bounds.is_empty() {
                                        key(7, 2, out);
                                        push_varint(8 * bounds.len() as u64, out);
                                        for b in bounds {
                                            out.extend_from_slice(&b.to_le_bytes());
                                        }
                                    }
                                    write_attributes(9, a, None, out);
                                });
                            }
                            varint_field(2, temporality, out);
                        }),
                    }
                });
            }
            for (name, help, t) in NATIVE_SIZE_FAMILIES {
                if rows
                    .iter()
                    .all(|r| r.snapshot.native_histogram(t).is_none())
                {
                    continue;
                }
                nested(2, out, |out| {
                    string_field(1, name, out);
                    string_field(2, help, out);
                    nested(10, out, |out| {
                        for r in rows {
                            if let Some(h) = r.snapshot.native_histogram(t) {
                                let point =
                                    exponential_point(h, point_attributes(r), r.start_ns, now_ns);
                                prost::encoding::message::encode(1, &point, out);
                            }
                        }
                        varint_field(2, temporality, out);
                    });
                });
            }
            if let Some(own) = own {
                for counter in &PUSH_COUNTERS {
                    nested(2, out, |out| {
                        string_field(1, counter.name, out);
                        string_field(2, counter.help, out);
                        sum(out, &mut |out| {
                            let value = (counter.value)(own.pushes);
                            number(&own_attributes, None, own.start_ns, value, out);
                        });
                    });
                }
            }
        });
    });
}

/// Whether the histogram family of `t` is sent as exponential histograms: every row keeps
/// native histograms (and there is a row).
fn exponential(rows: &[Row], t: EventType) -> bool {
    !rows.is_empty()
        && rows
            .iter()
            .all(|r| r.snapshot.native_histogram(t).is_some())
}

/// A row's data-point attributes as messages: its own, then the snapshot's workload labels.
fn point_attributes(row: &Row) -> Vec<KeyValue> {
    row.attributes
        .iter()
        .copied()
        .chain(row.snapshot.labels.iter())
        .map(|(k, v)| string_attr(k, v))
        .collect()
}

/// The instrumentation scope of every export.
fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "nixl-telemetry".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

/// Appends a field key.
fn key(field: u32, wire_type: u32, out: &mut Vec<u8>) {
    push_varint(u64::from(field << 3 | wire_type), out);
}

/// Appends a varint.
fn push_varint(v: u64, out: &mut Vec<u8>) {
    prost::encoding::encode_varint(v, out);
}

/// Reads a varint at the start of `b`: its value and length.
fn read_varint(b: &[u8]) -> (usize, usize) {
    let (mut v, mut n) = (0usize, 0);
    loop {
        v |= usize::from(b[n] & 0x7f) << (7 * n);
        n += 1;
        if b[n - 1] < 0x80 {
            return (v, n);
        }
    }
}

/// Appends a `fixed64` field, left out when 0 (as prost does).
fn fixed64(field: u32, v: u64, out: &mut Vec<u8>) {
    if v != 0 {
        key(field, 1, out);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends a varint field (an enumeration, a bool), left out when 0.
fn varint_field(field: u32, v: u64, out: &mut Vec<u8>) {
    if v != 0 {
        key(field, 0, out);
        push_varint(v, out);
    }
}

/// Appends a string field, left out when empty.
fn string_field(field: u32, v: &str, out: &mut Vec<u8>) {
    if !v.is_empty() {
        key(field, 2, out);
        push_varint(v.len() as u64, out);
        out.extend_from_slice(v.as_bytes());
    }
}

/// Appends a string attribute as a length-prefixed `KeyValue` (no field key).
fn key_value(k: &str, v: &str, out: &mut Vec<u8>) {
    let value_len = 1 + prost::encoding::encoded_len_varint(v.len() as u64) + v.len();
    let mut len = 1 + prost::encoding::encoded_len_varint(value_len as u64) + value_len;
    if !k.is_empty() {
        len += 1 + prost::encoding::encoded_len_varint(k.len() as u64) + k.len();
    }
    push_varint(len as u64, out);
    string_field(1, k, out);
    key(2, 2, out);
    push_varint(value_len as u64, out);
    // The `string_value` of the oneof is written even when empty.
    key(1, 2, out);
    push_varint(v.len() as u64, out);
    out.extend_from_slice(v.as_bytes());
}

/// Appends message field `field` whose contents `f` writes: the length is written after them
/// and the contents moved to make room when it takes more than a byte.
fn nested(field: u32, out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    key(field, 2, out);
    let at = out.len();
    out.push(0);
    f(out);
    let len = out.len() - at - 1;
    let n = prost::encoding::encoded_len_varint(len as u64);
    if n > 1 {
        out.splice(at + 1..at + 1, std::iter::repeat_n(0, n - 1));
    }
    let mut b = [0u8; 10];
    let mut v = len as u64;
    for slot in b.iter_mut().take(n) {
        *slot = v as u8 & 0x7f | 0x80;
        v >>= 7;
    }
    b[n - 1] &= 0x7f;
    out[at..at + n].copy_from_slice(&b[..n]);
}

/// Encodes `request` as an OTLP/HTTP protobuf body, gzip-compressed if `gzip`.
pub fn body(request: &ExportMetricsServiceRequest, gzip: bool) -> Body {
    raw_body(request.encode_to_vec(), gzip)
}

/// The OTLP/HTTP body of an encoded request, gzip-compressed if `gzip`.
pub fn raw_body(raw: Vec<u8>, gzip: bool) -> Body {
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
    resource: Vec<KeyValue>,
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
        raw_body(raw, self.gzip)
    }

    fn sent(&mut self, answer: &[u8]) {
        for (attrs, snapshot, at) in self.pending.drain(..) {
            self.baseline.insert(attrs, (snapshot, at));
        }
        if self.temporality == Temporality::Delta {
            self.own_baseline = self.own_pending;
        }
        let Ok(response) = ExportMetricsServiceResponse::decode(answer) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::{Event, EventType};
    use nixl_telemetry_series::{AgentSeries, Buckets};
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;

    #[test]
    fn the_encoder_writes_the_bytes_of_the_request_message() {
        let plain = AgentSeries::new("a", "h", Buckets::default());
        let native =
            AgentSeries::new("n", "h", Buckets::default()).with_native_histograms(true, 3, 160);
        let labelled = AgentSeries::new("w", "h", Buckets::default()).with_labels(
            nixl_telemetry_series::WorkloadLabels::from_pairs(vec![(
                "slurm_job_id".into(),
                "7".repeat(200),
            )])
            .unwrap(),
        );
        let check = |rows: &[Row], own: Option<OwnPoints>, t: Temporality, now: u64| {
            let resource = resource(&[("service.name".into(), "nixl".into())], "h");
            let mut out = vec![1, 2, 3];
            encode(rows, own, &resource, t, now, &mut out);
            assert_eq!(
                out[3..],
                request(rows, own, resource, t, now).encode_to_vec()[..]
            );
        };
        let pushes = PushStatsSnapshot {
            attempts: 300,
            successes: 0,
            failures: 1,
            bytes: 1 << 40,
        };
        let own = OwnPoints {
            attributes: &[("pusher", "test"), ("empty", "")],
            pushes: &pushes,
            start_ns: 5,
        };
        for n in 0..3u64 {
            let (p, nat, l) = (plain.snapshot(), native.snapshot(), labelled.snapshot());
            let row = |snapshot, attributes, start_ns| Row {
                snapshot,
                attributes,
                start_ns,
            };
            let a: &[(&str, &str)] = &[("agent_name", "a"), ("local_rank", "3")];
            for t in [Temporality::Cumulative, Temporality::Delta] {
                check(&[], None, t, 0);
                check(&[], Some(own), t, 9);
                check(&[row(&p, a, 0)], None, t, 1_700_000_000_000_000_000);
                check(&[row(&p, a, 7), row(&l, &[], 8)], Some(own), t, 10);
                check(&[row(&nat, a, 7)], Some(own), t, 11);
                check(
                    &[row(&p, a, 7), row(&nat, &[("agent_name", "n")], 7)],
                    Some(own),
                    t,
                    12,
                );
            }
            for s in [&plain, &native, &labelled] {
                s.apply(&[
                    Event::new(EventType::AgentXferTime, 1 + 1000 * n),
                    Event::new(EventType::AgentTxBytes, 4096 << n),
                    Event::new(EventType::AgentErrBackend, 1),
                    Event::new(EventType::AgentRxBytes, 0),
                ]);
            }
        }
    }

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
    fn native_histograms_become_exponential_histograms() {
        let s = AgentSeries::new("a", "h", Buckets::default()).with_native_histograms(true, 3, 160);
        s.apply(&[
            Event::new(EventType::AgentXferTime, 100),
            Event::new(EventType::AgentXferTime, 200),
            Event::new(EventType::AgentTxBytes, 4096),
            Event::new(EventType::AgentRxBytes, 0),
        ]);
        let snapshot = s.snapshot();
        let rows = [Row {
            snapshot: &snapshot,
            attributes: &[("agent_name", "a")],
            start_ns: 1,
        }];
        let r = request(&rows, None, vec![], Temporality::Cumulative, 2);
        let metrics = &r.resource_metrics[0].scope_metrics[0].metrics;
        let exponential = |name: &str| -> ExponentialHistogramDataPoint {
            let m = metrics.iter().find(|m| m.name == name).unwrap();
            match &m.data {
                Some(metric::Data::ExponentialHistogram(e)) => e.data_points[0].clone(),
                other => panic!("{name}: {other:?}"),
            }
        };
        let time = exponential("agent_xfer_time_us");
        assert_eq!((time.count, time.sum, time.scale), (2, Some(300.0), 3));
        // Prometheus buckets 54 and 62: OpenTelemetry's 53 and 61, dense between.
        let positive = time.positive.unwrap();
        assert_eq!(positive.offset, 53);
        assert_eq!(positive.bucket_counts.len(), 9);
        assert_eq!(
            (positive.bucket_counts[0], positive.bucket_counts[8]),
            (1, 1)
        );
        assert_eq!(positive.bucket_counts.iter().sum::<u64>(), 2);
        assert_eq!(
            exponential("agent_tx_request_size_bytes")
                .positive
                .unwrap()
                .offset,
            95
        );
        let rx = exponential("agent_rx_request_size_bytes");
        assert_eq!((rx.count, rx.zero_count), (1, 1));
        // The post-time histogram has no values yet but is still exponential.
        assert_eq!(exponential("agent_xfer_post_time_us").count, 0);
        // Without native histograms: explicit buckets, no size metrics.
        let plain = AgentSeries::new("a", "h", Buckets::default()).snapshot();
        let rows = [Row {
            snapshot: &plain,
            attributes: &[("agent_name", "a")],
            start_ns: 1,
        }];
        let r = request(&rows, None, vec![], Temporality::Cumulative, 2);
        let metrics = &r.resource_metrics[0].scope_metrics[0].metrics;
        assert!(metrics.iter().all(|m| !m.name.contains("request_size")));
        assert!(metrics
            .iter()
            .all(|m| !matches!(m.data, Some(metric::Data::ExponentialHistogram(_)))));
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
        let config = OtlpConfig::from_settings(&env).unwrap();
        let mut p = Otlp::new(Box::new(Vec::new), Vec::new(), &config, "h");
        p.sent(&[]);
        p.sent(&answer(0, ""));
        assert!(p.logged.is_empty());
        p.sent(&answer(3, "too old"));
        p.sent(&answer(5, "too old"));
        p.sent(&answer(1, "bad name"));
        assert_eq!(p.logged.len(), 2);
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
