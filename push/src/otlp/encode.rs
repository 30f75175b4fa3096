//! The OTLP request's protobuf, written by hand (`ExportMetricsServiceRequest` of the official
//! opentelemetry-proto definitions, field numbers and encoding as prost writes them): every data
//! point is written straight from the snapshots, each row's attributes encoded once for all its
//! points, each message's length written after its contents. No message is built (building the
//! request was an allocation per attribute of every point). The tests check it byte for byte
//! against the request built from the official messages and encoded by prost
//! (`push/tests/otlp_encoding.rs`).

use nixl_telemetry_base::EventType;
use nixl_telemetry_series::native::{NativeHistogram, ZERO_THRESHOLD};
use nixl_telemetry_series::{
    error_statuses, families, FamilySource, HistogramSnapshot, NATIVE_SIZE_FAMILIES,
};

use super::{Attribute, AttributeValue, OwnPoints, Row, Temporality};
use crate::pusher::PUSH_COUNTERS;

/// `AggregationTemporality`'s values.
const DELTA: u64 = 1;
const CUMULATIVE: u64 = 2;

/// The instrumentation scope of every export: its name (its version is this crate's).
pub const SCOPE_NAME: &str = "nixl-telemetry";

/// Appends to `out` the protobuf of the export request of `rows` and of the sender's own
/// counters (monotonic Sums named as [`PUSH_COUNTERS`]) at `now_ns` with resource attributes
/// `resource` (see the module documentation of [`super`] for the mapping).
pub fn encode(
    rows: &[Row],
    own: Option<OwnPoints>,
    resource: &[Attribute],
    temporality: Temporality,
    now_ns: u64,
    out: &mut Vec<u8>,
) {
    let temporality = match temporality {
        Temporality::Cumulative => CUMULATIVE,
        Temporality::Delta => DELTA,
    };
    // Each row's attributes (its own, then the snapshot's workload labels), as the encoded
    // `KeyValue` messages without their field key, one after the other; and the sender's.
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
            key_value(k, Any::Str(v), &mut attributes);
        }
        row_attributes.push(start..attributes.len());
    }
    let own_attributes = {
        let start = attributes.len();
        for &(k, v) in own.iter().flat_map(|o| o.attributes) {
            key_value(k, Any::Str(v), &mut attributes);
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
            key_value(k, Any::Str(v), out);
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
    // An `ExponentialHistogramDataPoint` as field 1 of its metric (OpenTelemetry's bucket `i`
    // is `(b^i, b^(i+1)]`, one below Prometheus's index of the same bucket).
    let exponential_point =
        |h: &NativeHistogram, range: &std::ops::Range<usize>, start_ns, out: &mut Vec<u8>| {
            nested(1, out, |out| {
                write_attributes(1, range, None, out);
                fixed64(2, start_ns, out);
                fixed64(3, now_ns, out);
                fixed64(4, h.count(), out);
                double(5, h.sum() as f64, out);
                varint_field(6, zigzag(i32::from(h.schema())), out);
                fixed64(7, h.zero_count(), out);
                let (offset, counts) = h.dense();
                nested(8, out, |out| {
                    varint_field(1, zigzag(offset - 1), out);
                    if !counts.is_empty() {
                        key(2, 2, out);
                        let len: usize = counts
                            .iter()
                            .map(|&c| prost::encoding::encoded_len_varint(c))
                            .sum();
                        push_varint(len as u64, out);
                        for &c in counts {
                            push_varint(c, out);
                        }
                    }
                });
                if ZERO_THRESHOLD != 0.0 {
                    double(14, ZERO_THRESHOLD, out);
                }
            });
        };
    let sum = |out: &mut Vec<u8>, points: &mut dyn FnMut(&mut Vec<u8>)| {
        nested(7, out, |out| {
            points(out);
            varint_field(2, temporality, out);
            varint_field(3, 1, out);
        });
    };
    let exponential_histogram = |out: &mut Vec<u8>, points: &mut dyn FnMut(&mut Vec<u8>)| {
        nested(10, out, |out| {
            points(out);
            varint_field(2, temporality, out);
        });
    };
    // ExportMetricsServiceRequest.resource_metrics
    nested(1, out, |out| {
        // ResourceMetrics.resource: its attributes.
        nested(1, out, |out| {
            for a in resource {
                key(1, 2, out);
                let value = match &a.value {
                    AttributeValue::String(s) => Any::Str(s),
                    AttributeValue::Int(i) => Any::Int(*i),
                };
                key_value(&a.key, value, out);
            }
        });
        // ResourceMetrics.scope_metrics: the scope, then the metrics.
        nested(2, out, |out| {
            nested(1, out, |out| {
                string_field(1, SCOPE_NAME, out);
                string_field(2, env!("CARGO_PKG_VERSION"), out);
            });
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
                                for (t, status) in error_statuses(r.snapshot) {
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
                            exponential_histogram(out, &mut |out| {
                                for (r, a) in rows.iter().zip(&row_attributes) {
                                    let h = r.snapshot.native_histogram(t).expect("checked");
                                    exponential_point(h, a, r.start_ns, out);
                                }
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
                                    double(5, h.sum as f64, out);
                                    packed_fixed64(6, h.buckets.iter().copied(), out);
                                    packed_fixed64(
                                        7,
                                        h.bounds.bounds().iter().map(|b| b.to_bits()),
                                        out,
                                    );
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
                    exponential_histogram(out, &mut |out| {
                        for (r, a) in rows.iter().zip(&row_attributes) {
                            if let Some(h) = r.snapshot.native_histogram(t) {
                                exponential_point(h, a, r.start_ns, out);
                            }
                        }
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

/// An attribute's value as it is encoded (`AnyValue`'s `string_value` or `int_value`).
#[derive(Clone, Copy)]
enum Any<'a> {
    Str(&'a str),
    Int(i64),
}

/// Appends a field key.
fn key(field: u32, wire_type: u32, out: &mut Vec<u8>) {
    push_varint(u64::from(field << 3 | wire_type), out);
}

/// Appends a varint.
fn push_varint(v: u64, out: &mut Vec<u8>) {
    prost::encoding::encode_varint(v, out);
}

/// A `sint32` as its varint (zigzag).
fn zigzag(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
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

/// Appends a `double` field that is always written (an `optional` one that is set).
fn double(field: u32, v: f64, out: &mut Vec<u8>) {
    key(field, 1, out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a packed repeated 64-bit field (`fixed64` or `double`, given as bits), left out when
/// empty.
fn packed_fixed64(field: u32, values: impl ExactSizeIterator<Item = u64>, out: &mut Vec<u8>) {
    if values.len() == 0 {
        return;
    }
    key(field, 2, out);
    push_varint(8 * values.len() as u64, out);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends a varint field (an enumeration, a bool, a zigzagged `sint32`), left out when 0.
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

/// Appends an attribute as a length-prefixed `KeyValue` (no field key).
fn key_value(k: &str, v: Any, out: &mut Vec<u8>) {
    let varint_len = |n: u64| prost::encoding::encoded_len_varint(n);
    // The `AnyValue`: its one field (written even when empty or 0: a oneof's).
    let value_len = match v {
        Any::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
        Any::Int(i) => 1 + varint_len(i as u64),
    };
    let mut len = 1 + varint_len(value_len as u64) + value_len;
    if !k.is_empty() {
        len += 1 + varint_len(k.len() as u64) + k.len();
    }
    push_varint(len as u64, out);
    string_field(1, k, out);
    key(2, 2, out);
    push_varint(value_len as u64, out);
    match v {
        Any::Str(s) => {
            key(1, 2, out);
            push_varint(s.len() as u64, out);
            out.extend_from_slice(s.as_bytes());
        }
        Any::Int(i) => {
            key(3, 0, out);
            push_varint(i as u64, out);
        }
    }
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
