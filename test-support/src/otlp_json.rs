//! OTLP requests decoded as JSON, read by the tests: in the protobuf JSON mapping with the
//! field names of the `.proto` files (`resource_metrics`, `as_int`, ...), as the tests' Python
//! receiver writes them; [`proto_field_names`] brings OTLP/JSON (lowerCamelCase, as the
//! OpenTelemetry Collector's file exporter writes it) to that form.

use serde_json::Value;

/// The metric named `name` of a decoded request.
pub fn metric<'a>(request: &'a Value, name: &str) -> &'a Value {
    let metrics = request["request"]["resource_metrics"][0]["scope_metrics"][0]["metrics"]
        .as_array()
        .unwrap();
    metrics
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// A JSON integer (protobuf's JSON writes 64-bit integers as strings; absent is 0).
pub fn int(v: &Value) -> u64 {
    match v {
        Value::Null => 0,
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap(),
    }
}

/// The attributes of `v` (an attribute list) as sorted (key, value) pairs, integers as text.
pub fn attributes(v: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|kv| {
            let value = &kv["value"];
            let text = value["string_value"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| int(&value["int_value"]).to_string());
            (kv["key"].as_str().unwrap().to_owned(), text)
        })
        .collect();
    out.sort();
    out
}

/// The single point of a Sum or Gauge metric with these extra attributes.
pub fn point_value(request: &Value, name: &str, status: Option<&str>) -> u64 {
    let m = metric(request, name);
    let data = if m["sum"].is_object() {
        &m["sum"]
    } else {
        &m["gauge"]
    };
    let points = data["data_points"].as_array().unwrap();
    let p = points
        .iter()
        .find(|p| {
            status
                .is_none_or(|s| attributes(&p["attributes"]).contains(&("status".into(), s.into())))
        })
        .unwrap();
    int(&p["as_int"])
}

/// `request` in OTLP/JSON (lowerCamelCase field names, enumerations as numbers: the
/// Collector's file exporter) brought to the `.proto` field names and enumeration names of
/// the other tests, wrapped as `{"request": ...}`.
pub fn proto_field_names(request: &Value) -> Value {
    fn convert(key: Option<&str>, v: &Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let mut snake = String::new();
                        for ch in k.chars() {
                            if ch.is_ascii_uppercase() {
                                snake.push('_');
                            }
                            snake.push(ch.to_ascii_lowercase());
                        }
                        let v = convert(Some(&snake), v);
                        (snake, v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|i| convert(key, i)).collect()),
            Value::Number(n) if key == Some("aggregation_temporality") => {
                let name = match n.as_u64() {
                    Some(1) => "DELTA",
                    Some(2) => "CUMULATIVE",
                    _ => "UNSPECIFIED",
                };
                Value::String(format!("AGGREGATION_TEMPORALITY_{name}"))
            }
            v => v.clone(),
        }
    }
    serde_json::json!({ "request": convert(None, request) })
}
