//! FPM payloads (`ForwardPassMetrics`, wire version 1) and their validation.
//!
//! Payloads arrive as the msgpack map Dynamo publishes ([`ValidPayload::from_msgpack`]) or as the
//! typed [`FpmPayload`]. Both go through one validator, which rejects exactly what Dynamo's trace
//! sink rejects:
//!
//! - bytes that are not msgpack, or hold something that is not a JSON value (binary, non-string
//!   map keys, extension types); a top level that is not a map;
//! - `version` missing or not the integer 1 (`1.0` does not count);
//! - `worker_id` missing or not a string (empty is allowed);
//! - `dp_rank` or `counter_id` missing, not an integer fitting i64, or negative;
//! - `wall_time` missing, not a number, negative or not finite (integers are accepted);
//! - `scheduled_requests` / `queued_requests` missing or not maps; their integer fields
//!   missing or not non-negative integers (floats such as `1.0` are refused; up to u64::MAX is
//!   fine); their variances missing, not numbers, negative or not finite.
//!
//! Unknown keys, at the top level and inside the two maps, are kept unchanged. A non-finite
//! float in an unknown field cannot be written as JSON and becomes `null`, as in Dynamo.
//!
//! Two rules are ours. A payload whose row would be longer than the readers' bound of 16 MiB
//! ([`crate::segments::row::MAX_ROW_BYTES`]) is dropped by the segment writer and counted in
//! `rejected`, so every row written can be read back. And a payload nested deeper than [`MAX_PAYLOAD_DEPTH`] levels of maps and
//! arrays (the payload map is level 1) is rejected. Dynamo writes any depth, but a row nested
//! past 127 levels is unreadable for serde_json (its readers, `nixl-telemetry fpm cat`) and a
//! deep one for Python's `json`; with this bound every row written parses, and decoding never
//! recurses deeper than the bound.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The only payload version accepted.
pub const FPM_VERSION: i64 = 1;

/// The deepest nesting of maps and arrays accepted in a payload, the payload map being level 1
/// (Dynamo's payloads have 2). A deeper payload is rejected (counted in `rejected`). A row adds
/// two levels (the envelope and the record), so every row written stays far inside serde_json's
/// limit of 127 levels and parses with Python's `json` too.
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// Integer fields of `scheduled_requests`, in Dynamo's declaration order.
const SCHEDULED_INTS: [&str; 5] = [
    "num_prefill_requests",
    "sum_prefill_tokens",
    "sum_prefill_kv_tokens",
    "num_decode_requests",
    "sum_decode_kv_tokens",
];
/// Integer fields of `queued_requests` (it has no `sum_prefill_kv_tokens`).
const QUEUED_INTS: [&str; 4] = [
    "num_prefill_requests",
    "sum_prefill_tokens",
    "num_decode_requests",
    "sum_decode_kv_tokens",
];
/// Variance fields of both maps.
const VARIANCES: [&str; 2] = ["var_prefill_length", "var_decode_kv_tokens"];

/// Key order used when writing: Dynamo's declaration order, unknown keys after, sorted.
const TOP_ORDER: [&str; 7] = [
    "version",
    "worker_id",
    "dp_rank",
    "counter_id",
    "wall_time",
    "scheduled_requests",
    "queued_requests",
];
const SCHEDULED_ORDER: [&str; 7] = [
    "num_prefill_requests",
    "sum_prefill_tokens",
    "var_prefill_length",
    "sum_prefill_kv_tokens",
    "num_decode_requests",
    "sum_decode_kv_tokens",
    "var_decode_kv_tokens",
];
const QUEUED_ORDER: [&str; 6] = [
    "num_prefill_requests",
    "sum_prefill_tokens",
    "var_prefill_length",
    "num_decode_requests",
    "sum_decode_kv_tokens",
    "var_decode_kv_tokens",
];

/// Requests scheduled in this iteration (`ScheduledRequestMetrics`). Integer fields must be >= 0
/// and variances finite and >= 0, or the payload is rejected.
// Also the C ABI's `nixl_telemetry_fpm_scheduled_requests_t` (cbindgen_fpm.toml renames it):
// one definition, whose C layout is fixed here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ScheduledRequests {
    /// Prefill requests scheduled.
    pub num_prefill_requests: i64,
    /// Tokens freshly computed for prefill (the chunk size).
    pub sum_prefill_tokens: i64,
    /// Population variance of the full prompt lengths.
    pub var_prefill_length: f64,
    /// KV tokens read for prefill (prefix hits plus earlier chunks).
    pub sum_prefill_kv_tokens: i64,
    /// Decode requests scheduled.
    pub num_decode_requests: i64,
    /// Total decode context.
    pub sum_decode_kv_tokens: i64,
    /// Variance of the decode context lengths.
    pub var_decode_kv_tokens: f64,
}

/// Requests waiting, not scheduled (`QueuedRequestMetrics`); same rules.
// Also the C ABI's `nixl_telemetry_fpm_queued_requests_t` (cbindgen_fpm.toml renames it): one
// definition, whose C layout is fixed here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct QueuedRequests {
    /// Prefill requests waiting.
    pub num_prefill_requests: i64,
    /// Prompt tokens waiting.
    pub sum_prefill_tokens: i64,
    /// Population variance of the waiting prompt lengths.
    pub var_prefill_length: f64,
    /// Preempted decode requests.
    pub num_decode_requests: i64,
    /// Their total context.
    pub sum_decode_kv_tokens: i64,
    /// Variance of their context lengths.
    pub var_decode_kv_tokens: f64,
}

/// A typed FPM payload (`ForwardPassMetrics`); validated like a msgpack one.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct FpmPayload {
    /// Schema version; must be 1.
    pub version: i64,
    /// The engine instance's runtime connection id.
    pub worker_id: String,
    /// Data-parallel rank (non-negative).
    pub dp_rank: i64,
    /// Per-(worker, rank) sequence number (non-negative); heartbeats advance it too.
    pub counter_id: i64,
    /// Iteration duration in seconds; 0 for an idle heartbeat.
    pub wall_time: f64,
    /// Requests run in this iteration.
    pub scheduled_requests: ScheduledRequests,
    /// Requests waiting.
    pub queued_requests: QueuedRequests,
}

impl FpmPayload {
    /// An idle heartbeat: everything zero.
    pub fn heartbeat(worker_id: &str, dp_rank: i64, counter_id: i64) -> FpmPayload {
        FpmPayload {
            version: FPM_VERSION,
            worker_id: worker_id.to_owned(),
            dp_rank,
            counter_id,
            ..FpmPayload::default()
        }
    }

    /// The payload as Dynamo's publishers put it on the wire: a msgpack map with string keys.
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("an FPM payload always serializes")
    }

    /// Validates the payload.
    pub fn validate(&self) -> Result<ValidPayload, String> {
        let value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        ValidPayload::from_value(value)
    }
}

/// A payload that passed validation: its key fields, and the complete map to write.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidPayload {
    /// `worker_id`.
    pub worker_id: String,
    /// `dp_rank`.
    pub dp_rank: u64,
    /// `counter_id`.
    pub counter_id: u64,
    /// `wall_time` (finite, >= 0; 0 for a heartbeat).
    pub wall_time: f64,
    map: Map<String, Value>,
}

impl ValidPayload {
    /// Decodes and validates a msgpack payload.
    pub fn from_msgpack(bytes: &[u8]) -> Result<ValidPayload, String> {
        let mut decoder = rmp_serde::Deserializer::from_read_ref(bytes);
        // The decoder refuses to enter level MAX_PAYLOAD_DEPTH + 1.
        decoder.set_max_depth(MAX_PAYLOAD_DEPTH + 1);
        let value = Value::deserialize(&mut decoder).map_err(|e| match e {
            rmp_serde::decode::Error::DepthLimitExceeded => too_deep(),
            e => format!("payload is not a msgpack value convertible to JSON: {e}"),
        })?;
        ValidPayload::from_value(value)
    }

    /// Validates an already decoded payload.
    pub fn from_value(value: Value) -> Result<ValidPayload, String> {
        if nesting_depth(&value) > MAX_PAYLOAD_DEPTH {
            return Err(too_deep());
        }
        let Value::Object(map) = value else {
            return Err("FPM payload is not a msgpack map".into());
        };
        match map.get("version") {
            Some(Value::Number(n)) if n.as_i64() == Some(FPM_VERSION) => {}
            Some(v) => return Err(format!("version must be the integer 1, got {v}")),
            None => return Err("version is missing".into()),
        }
        let worker_id = match map.get("worker_id") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(format!("worker_id must be a string, got {v}")),
            None => return Err("worker_id is missing".into()),
        };
        let dp_rank = signed_field(&map, "dp_rank", "")?;
        let counter_id = signed_field(&map, "counter_id", "")?;
        let wall_time = float_field(&map, "wall_time", "")?;
        for (name, ints) in [
            ("scheduled_requests", &SCHEDULED_INTS[..]),
            ("queued_requests", &QUEUED_INTS[..]),
        ] {
            let inner = match map.get(name) {
                Some(Value::Object(inner)) => inner,
                Some(v) => return Err(format!("{name} must be a map, got {v}")),
                None => return Err(format!("{name} is missing")),
            };
            for field in ints {
                match inner.get(*field) {
                    Some(Value::Number(n)) if n.is_u64() => {}
                    Some(v) => {
                        return Err(format!(
                            "{name}.{field} must be a non-negative integer, got {v}"
                        ))
                    }
                    None => return Err(format!("{name}.{field} is missing")),
                }
            }
            for field in VARIANCES {
                float_field(inner, field, name)?;
            }
        }
        Ok(ValidPayload {
            worker_id,
            dp_rank,
            counter_id,
            wall_time,
            map,
        })
    }

    /// Whether this is an idle heartbeat (`wall_time` 0).
    pub fn is_heartbeat(&self) -> bool {
        self.wall_time == 0.0
    }

    /// The complete payload map, unknown keys included.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.map
    }
}

fn too_deep() -> String {
    format!("payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels of maps and arrays")
}

/// Levels of maps and arrays in `value` (0 for a scalar), counted without recursion.
fn nesting_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((v, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(m) => Box::new(m.values()),
            Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        deepest = deepest.max(above + 1);
        stack.extend(children.map(|c| (c, above + 1)));
    }
    deepest
}

fn describe(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_owned()
    } else {
        format!("{prefix}.{field}")
    }
}

/// A non-negative integer that fits i64.
fn signed_field(map: &Map<String, Value>, field: &str, prefix: &str) -> Result<u64, String> {
    match map.get(field) {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v >= 0 => Ok(v as u64),
            _ => Err(format!(
                "{} must be a non-negative integer fitting i64, got {n}",
                describe(prefix, field)
            )),
        },
        Some(v) => Err(format!(
            "{} must be a non-negative integer, got {v}",
            describe(prefix, field)
        )),
        None => Err(format!("{} is missing", describe(prefix, field))),
    }
}

/// A finite number >= 0 (integers accepted).
fn float_field(map: &Map<String, Value>, field: &str, prefix: &str) -> Result<f64, String> {
    match map.get(field).and_then(Value::as_f64) {
        Some(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Some(v) => Err(format!(
            "{} must be a finite number >= 0, got {v}",
            describe(prefix, field)
        )),
        None => match map.get(field) {
            Some(v) => Err(format!(
                "{} must be a finite number >= 0, got {v}",
                describe(prefix, field)
            )),
            None => Err(format!("{} is missing", describe(prefix, field))),
        },
    }
}

/// A map written with `order`'s keys first (those present), then the others sorted.
struct Ordered<'a> {
    map: &'a Map<String, Value>,
    order: &'static [&'static str],
    nested: bool,
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(self.map.len()))?;
        for key in self.order {
            if let Some(value) = self.map.get(*key) {
                let nested_order: Option<&'static [&'static str]> = match (self.nested, *key) {
                    (true, "scheduled_requests") => Some(&SCHEDULED_ORDER),
                    (true, "queued_requests") => Some(&QUEUED_ORDER),
                    _ => None,
                };
                match (nested_order, value) {
                    (Some(order), Value::Object(inner)) => out.serialize_entry(
                        key,
                        &Ordered {
                            map: inner,
                            order,
                            nested: false,
                        },
                    )?,
                    _ => out.serialize_entry(key, value)?,
                }
            }
        }
        for (key, value) in self.map {
            if !self.order.contains(&key.as_str()) {
                out.serialize_entry(key, value)?;
            }
        }
        out.end()
    }
}

impl Serialize for ValidPayload {
    /// Writes the payload with Dynamo's field order (`version`, `worker_id`, `dp_rank`,
    /// `counter_id`, `wall_time`, `scheduled_requests`, `queued_requests`, and the same inside
    /// the two maps), unknown keys after the known ones in sorted order. Readers must not
    /// depend on key order.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Ordered {
            map: &self.map,
            order: &TOP_ORDER,
            nested: true,
        }
        .serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> FpmPayload {
        FpmPayload {
            version: 1,
            worker_id: "4192".into(),
            dp_rank: 0,
            counter_id: 42,
            wall_time: 0.025,
            scheduled_requests: ScheduledRequests {
                num_prefill_requests: 2,
                sum_prefill_tokens: 256,
                var_prefill_length: 0.0,
                sum_prefill_kv_tokens: 64,
                num_decode_requests: 3,
                sum_decode_kv_tokens: 1024,
                var_decode_kv_tokens: 0.0,
            },
            queued_requests: QueuedRequests {
                num_prefill_requests: 1,
                sum_prefill_tokens: 128,
                ..QueuedRequests::default()
            },
        }
    }

    fn json_of(p: &ValidPayload) -> String {
        serde_json::to_string(p).unwrap()
    }

    fn with(f: impl FnOnce(&mut Map<String, Value>)) -> Result<ValidPayload, String> {
        let mut v = serde_json::to_value(sample()).unwrap();
        f(v.as_object_mut().unwrap());
        ValidPayload::from_value(v)
    }

    #[test]
    fn msgpack_round_trip_keeps_values_and_writes_dynamo_order() {
        let p = ValidPayload::from_msgpack(&sample().to_msgpack()).unwrap();
        assert_eq!(
            (p.worker_id.as_str(), p.dp_rank, p.counter_id),
            ("4192", 0, 42)
        );
        assert_eq!(
            json_of(&p),
            r#"{"version":1,"worker_id":"4192","dp_rank":0,"counter_id":42,"wall_time":0.025,"scheduled_requests":{"num_prefill_requests":2,"sum_prefill_tokens":256,"var_prefill_length":0.0,"sum_prefill_kv_tokens":64,"num_decode_requests":3,"sum_decode_kv_tokens":1024,"var_decode_kv_tokens":0.0},"queued_requests":{"num_prefill_requests":1,"sum_prefill_tokens":128,"var_prefill_length":0.0,"num_decode_requests":0,"sum_decode_kv_tokens":0,"var_decode_kv_tokens":0.0}}"#
        );
        assert_eq!(sample().validate().unwrap(), p);
    }

    #[test]
    fn unknown_keys_are_kept() {
        let p = with(|m| {
            m.insert("timing_scope".into(), json!("execute_model_cuda"));
            m.insert("extend_lengths".into(), json!([1, 2]));
            m["scheduled_requests"]
                .as_object_mut()
                .unwrap()
                .insert("extra".into(), json!(7));
        })
        .unwrap();
        let text = json_of(&p);
        assert!(
            text.ends_with(r#","extend_lengths":[1,2],"timing_scope":"execute_model_cuda"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""var_decode_kv_tokens":0.0,"extra":7}"#),
            "{text}"
        );
    }

    #[test]
    fn malformed_bytes_and_non_maps_are_rejected() {
        assert!(ValidPayload::from_msgpack(b"not-msgpack").is_err());
        assert!(ValidPayload::from_msgpack(&[]).is_err());
        let array_like = rmp_serde::to_vec(&sample()).unwrap();
        assert!(ValidPayload::from_msgpack(&array_like)
            .unwrap_err()
            .contains("not a msgpack map"));
        // A map with an integer key cannot become JSON.
        let int_key = rmp_serde::to_vec(&std::collections::BTreeMap::from([(1u8, 2u8)])).unwrap();
        assert!(ValidPayload::from_msgpack(&int_key).is_err());
    }

    #[test]
    fn nesting_is_bounded_for_decoded_and_given_values() {
        // `levels` nested arrays under the unknown key `deep`: the payload is 1 + levels deep.
        let nested = |levels: usize| {
            with(|m| {
                let mut v = json!(0);
                for _ in 0..levels {
                    v = json!([v]);
                }
                m.insert("deep".into(), v);
            })
        };
        assert_eq!(nesting_depth(&json!(1)), 0);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": []}], "c": {}})), 4);
        assert!(nested(MAX_PAYLOAD_DEPTH - 1).is_ok());
        assert!(nested(MAX_PAYLOAD_DEPTH)
            .unwrap_err()
            .contains("nested deeper than 64"));
        let deep_msgpack = |levels: usize| {
            let mut bytes = sample().to_msgpack();
            bytes[0] += 1; // one more key in the top fixmap
            bytes.extend_from_slice(b"\xa4deep");
            bytes.resize(bytes.len() + levels, 0x91); // fixarrays of 1
            bytes.push(0xc0);
            ValidPayload::from_msgpack(&bytes)
        };
        assert!(deep_msgpack(MAX_PAYLOAD_DEPTH - 1).is_ok());
        for levels in [MAX_PAYLOAD_DEPTH, 1_000_000] {
            let e = deep_msgpack(levels).unwrap_err();
            assert!(e.contains("nested deeper than 64"), "{e}");
        }
    }

    #[test]
    fn top_level_rules() {
        let bad: Vec<(&str, Value)> = vec![
            ("version", json!(2)),
            ("version", json!(1.0)),
            ("version", json!("1")),
            ("worker_id", json!(4192)),
            ("dp_rank", json!(-1)),
            ("dp_rank", json!(1.0)),
            ("dp_rank", json!(u64::MAX)),
            ("counter_id", json!(-5)),
            ("counter_id", json!("7")),
            ("wall_time", json!(-0.5)),
            ("wall_time", json!("0.1")),
            ("wall_time", Value::Null),
            ("scheduled_requests", json!([])),
            ("queued_requests", json!(3)),
        ];
        for (field, value) in bad {
            let r = with(|m| {
                m.insert(field.into(), value.clone());
            });
            assert!(r.unwrap_err().contains(field), "{field}={value}");
        }
        for field in TOP_ORDER {
            let r = with(|m| {
                m.remove(field);
            });
            assert!(r.unwrap_err().contains("missing"), "{field}");
        }
        // Accepted edge values.
        assert_eq!(
            with(|m| {
                m.insert("worker_id".into(), json!(""));
                m.insert("wall_time".into(), json!(3));
                m.insert("counter_id".into(), json!(i64::MAX));
            })
            .unwrap()
            .counter_id,
            i64::MAX as u64
        );
    }

    #[test]
    fn nested_rules() {
        for (map, ints) in [
            ("scheduled_requests", &SCHEDULED_INTS[..]),
            ("queued_requests", &QUEUED_INTS[..]),
        ] {
            for field in ints {
                for value in [json!(-1), json!(1.0), json!("1"), Value::Null] {
                    let r = with(|m| {
                        m[map]
                            .as_object_mut()
                            .unwrap()
                            .insert(field.to_string(), value.clone());
                    });
                    assert!(r.unwrap_err().contains(field), "{map}.{field}={value}");
                }
                assert!(with(|m| {
                    m[map].as_object_mut().unwrap().remove(*field);
                })
                .is_err());
                with(|m| {
                    m[map]
                        .as_object_mut()
                        .unwrap()
                        .insert(field.to_string(), json!(u64::MAX));
                })
                .unwrap();
            }
            for field in VARIANCES {
                for value in [json!(-0.1), json!("x"), Value::Null] {
                    assert!(with(|m| {
                        m[map]
                            .as_object_mut()
                            .unwrap()
                            .insert(field.into(), value.clone());
                    })
                    .is_err());
                }
                with(|m| {
                    m[map]
                        .as_object_mut()
                        .unwrap()
                        .insert(field.into(), json!(4));
                })
                .unwrap();
            }
        }
        // Incomplete (empty) maps are rejected.
        assert!(with(|m| {
            m.insert("scheduled_requests".into(), json!({}));
        })
        .is_err());
        assert!(with(|m| {
            m.insert("queued_requests".into(), json!({}));
        })
        .is_err());
        // queued_requests needs no sum_prefill_kv_tokens.
        assert!(!QUEUED_INTS.contains(&"sum_prefill_kv_tokens"));
    }

    #[test]
    fn typed_payloads_validate_the_same_way() {
        let mut p = sample();
        p.wall_time = f64::NAN;
        assert!(p.validate().unwrap_err().contains("wall_time"));
        p.wall_time = f64::INFINITY;
        assert!(p.validate().is_err());
        let mut p = sample();
        p.queued_requests.var_decode_kv_tokens = -1.0;
        assert!(p.validate().is_err());
        let mut p = sample();
        p.version = 0;
        assert!(p.validate().is_err());
        let hb = FpmPayload::heartbeat("w", 1, 9).validate().unwrap();
        assert!(hb.is_heartbeat());
    }
}
