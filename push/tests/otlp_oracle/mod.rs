//! The oracle of the OTLP encoder's tests (and of the push bench's "through the message" case):
//! the export request built from the messages generated from the official opentelemetry-proto
//! definitions (`opentelemetry-proto`'s prost types), whose protobuf prost writes. The push
//! crate writes the same bytes by hand (`nixl_telemetry_push::otlp::encode`); this is the
//! mapping of its module documentation, stated a second time with the official messages.

use nixl_telemetry_push::otlp::encode::SCOPE_NAME;
use nixl_telemetry_push::otlp::{Attribute, AttributeValue, OwnPoints, Row, Temporality};
use nixl_telemetry_push::PUSH_COUNTERS;
use nixl_telemetry_series::native::{NativeHistogram, ZERO_THRESHOLD};
use nixl_telemetry_series::{
    error_statuses, families, FamilySource, HistogramSnapshot, NATIVE_SIZE_FAMILIES,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point, metric, number_data_point, AggregationTemporality,
    ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

/// A string attribute.
fn string_attr(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// A resource attribute as the official message.
pub fn key_value(a: &Attribute) -> KeyValue {
    let value = match &a.value {
        AttributeValue::String(s) => any_value::Value::StringValue(s.clone()),
        AttributeValue::Int(i) => any_value::Value::IntValue(*i),
    };
    KeyValue {
        key: a.key.clone(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
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

/// The export request of `rows` and of the sender's own counters (monotonic Sums named as
/// [`PUSH_COUNTERS`]) at `now_ns` with resource attributes `resource`.
pub fn request(
    rows: &[Row],
    own: Option<OwnPoints>,
    resource: &[Attribute],
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
                            error_statuses(r.snapshot).map(move |(t, s)| {
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
                attributes: resource.iter().map(key_value).collect(),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.into(),
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
