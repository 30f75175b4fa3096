//! FPM payloads from Python: msgpack bytes as given, or a record (a dict or other mapping, a
//! dataclass instance, a msgspec-style struct with `__struct_fields__`) encoded as the msgpack map
//! Dynamo's publishers send, for the library to validate like any other payload.
//!
//! Encoding never fails on content: whatever cannot be represented as a JSON value (binary
//! data, non-string keys, sets, objects, integers beyond 64 bits, nesting deeper than
//! [`MAX_DEPTH`] or more than [`MAX_VALUES`] values, a field that raises when read) is written
//! as a msgpack value that the
//! library's validator refuses (bin, the key as is, or an empty extension), so the payload is
//! rejected and counted by the trace, never raised. Only a payload that is none of the accepted
//! kinds at all is an invalid argument.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PyMemoryView,
    PyString, PyTuple, PyType,
};
use rmp::encode::{self as mp, ByteBuf};

use crate::errors;

/// Records nested deeper than this (a self-referencing dict, say) are not followed.
pub const MAX_DEPTH: usize = 32;

/// Values encoded at most per payload (a list holding itself twice is not followed 2^32 times).
pub const MAX_VALUES: usize = 1 << 20;

/// Calls `f` with the msgpack bytes of `payload`; an invalid argument when `payload` is neither
/// bytes-like nor a record.
pub fn with_msgpack<T>(payload: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    if let Ok(bytes) = payload.cast::<PyBytes>() {
        return Ok(f(bytes.as_bytes()));
    }
    if let Ok(bytes) = payload.cast::<PyByteArray>() {
        return Ok(f(&bytes.to_vec()));
    }
    if payload.is_instance_of::<PyMemoryView>() {
        let bytes = payload
            .call_method0(intern!(payload.py(), "tobytes"))?
            .cast_into::<PyBytes>()?;
        return Ok(f(bytes.as_bytes()));
    }
    match entries(payload) {
        Some(entries) => {
            let mut encoder = Encoder {
                out: ByteBuf::new(),
                budget: MAX_VALUES,
            };
            encoder.map(entries, 0);
            Ok(f(encoder.out.as_slice()))
        }
        None => Err(not_a_payload(payload)),
    }
}

/// Checks that `payload` is an accepted kind, without encoding it.
pub fn check(payload: &Bound<'_, PyAny>) -> PyResult<()> {
    let bytes_like = payload.is_instance_of::<PyBytes>()
        || payload.is_instance_of::<PyByteArray>()
        || payload.is_instance_of::<PyMemoryView>();
    if bytes_like || payload.is_instance_of::<PyDict>() || is_record(payload) {
        Ok(())
    } else {
        Err(not_a_payload(payload))
    }
}

fn not_a_payload(payload: &Bound<'_, PyAny>) -> PyErr {
    let kind = payload
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    errors::invalid(format!(
        "an FPM payload must be a dict, msgpack bytes or a dataclass of ForwardPassMetrics \
         fields, got {kind}"
    ))
}

/// One entry of a record: its key, and its value (or the error reading it raised).
type Entry<'py> = (Bound<'py, PyAny>, PyResult<Bound<'py, PyAny>>);

/// Whether `obj` is a record other than a dict: a dataclass instance, a struct or a mapping.
fn is_record(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    let kind = obj.get_type();
    !obj.is_instance_of::<PyType>()
        && (kind
            .hasattr(intern!(py, "__dataclass_fields__"))
            .unwrap_or(false)
            || kind
                .hasattr(intern!(py, "__struct_fields__"))
                .unwrap_or(false)
            || obj.is_instance_of::<PyMapping>())
}

/// The entries of a record (a snapshot: a dict changed while it is encoded is not followed),
/// or None when `obj` is not a record.
fn entries<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Entry<'py>>> {
    let py = obj.py();
    if let Ok(dict) = obj.cast::<PyDict>() {
        return pairs(&dict.items());
    }
    if obj.is_instance_of::<PyType>() {
        return None;
    }
    let kind = obj.get_type();
    let names = if kind.hasattr(intern!(py, "__dataclass_fields__")).ok()? {
        dataclass_fields(obj)?
    } else if let Ok(names) = kind.getattr(intern!(py, "__struct_fields__")) {
        names.cast_into::<PyTuple>().ok()?.iter().collect()
    } else {
        return pairs(&obj.cast::<PyMapping>().ok()?.items().ok()?);
    };
    Some(
        names
            .into_iter()
            .map(|name| {
                let value = name
                    .cast::<PyString>()
                    .map_err(PyErr::from)
                    .and_then(|n| obj.getattr(n));
                (name, value)
            })
            .collect(),
    )
}

/// The field names of a dataclass instance, from `dataclasses.fields` (which leaves out class
/// variables and init-only pseudo-fields).
fn dataclass_fields<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    static FIELDS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = obj.py();
    let fields = FIELDS
        .get_or_try_init(py, || {
            PyResult::Ok(py.import("dataclasses")?.getattr("fields")?.unbind())
        })
        .ok()?;
    let fields = fields.bind(py).call1((obj,)).ok()?;
    fields
        .try_iter()
        .ok()?
        .map(|field| field.ok()?.getattr(intern!(py, "name")).ok())
        .collect()
}

/// `(key, value)` pairs of an `items()` list.
fn pairs<'py>(items: &Bound<'py, PyList>) -> Option<Vec<Entry<'py>>> {
    items
        .iter()
        .map(|item| {
            let item = item.cast_into::<PyTuple>().ok()?;
            Some((item.get_item(0).ok()?, item.get_item(1)))
        })
        .collect()
}

/// Writes msgpack into `out`, at most `budget` more values.
struct Encoder {
    out: ByteBuf,
    budget: usize,
}

impl Encoder {
    /// Writes a map of `entries`.
    fn map(&mut self, entries: Vec<Entry<'_>>, depth: usize) {
        let Ok(len) = u32::try_from(entries.len()) else {
            return self.unrepresentable();
        };
        let Ok(_) = mp::write_map_len(&mut self.out, len);
        for (key, value) in entries {
            if let Ok(key) = key.cast::<PyString>() {
                self.string(key);
            } else if key.is_instance_of::<PyInt>() && !key.is_instance_of::<PyBool>() {
                // msgpack allows it; the validator refuses a key that is not a string.
                self.integer(&key);
            } else {
                self.unrepresentable();
            }
            match value {
                Ok(value) => self.value(&value, depth + 1),
                Err(_) => self.unrepresentable(),
            }
        }
    }

    /// Writes one value.
    fn value(&mut self, obj: &Bound<'_, PyAny>, depth: usize) {
        if depth > MAX_DEPTH || self.budget == 0 {
            return self.unrepresentable();
        }
        self.budget -= 1;
        let out = &mut self.out;
        if obj.is_none() {
            let Ok(()) = mp::write_nil(out);
        } else if let Ok(b) = obj.cast::<PyBool>() {
            let Ok(()) = mp::write_bool(out, b.is_true());
        } else if obj.is_instance_of::<PyInt>() {
            self.integer(obj);
        } else if let Ok(f) = obj.cast::<PyFloat>() {
            let Ok(()) = mp::write_f64(out, f.value());
        } else if let Ok(s) = obj.cast::<PyString>() {
            self.string(s);
        } else if let Ok(b) = obj.cast::<PyBytes>() {
            let Ok(()) = mp::write_bin(out, b.as_bytes());
        } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
            self.array(obj, depth);
        } else if let Some(entries) = entries(obj) {
            self.map(entries, depth);
        } else {
            self.unrepresentable();
        }
    }

    fn array(&mut self, obj: &Bound<'_, PyAny>, depth: usize) {
        let items: Vec<_> = match obj.try_iter() {
            Ok(items) => items.collect(),
            Err(_) => return self.unrepresentable(),
        };
        let Ok(len) = u32::try_from(items.len()) else {
            return self.unrepresentable();
        };
        let Ok(_) = mp::write_array_len(&mut self.out, len);
        for item in items {
            match item {
                Ok(item) => self.value(&item, depth + 1),
                Err(_) => self.unrepresentable(),
            }
        }
    }

    fn integer(&mut self, obj: &Bound<'_, PyAny>) {
        let written = if let Ok(v) = obj.extract::<i64>() {
            mp::write_sint(&mut self.out, v).map(drop)
        } else if let Ok(v) = obj.extract::<u64>() {
            mp::write_uint(&mut self.out, v).map(drop)
        } else {
            return self.unrepresentable();
        };
        let Ok(()) = written;
    }

    fn string(&mut self, s: &Bound<'_, PyString>) {
        match s.to_str() {
            Ok(s) => {
                let Ok(()) = mp::write_str(&mut self.out, s);
            }
            // A lone surrogate has no UTF-8 form.
            Err(_) => self.unrepresentable(),
        }
    }

    /// An empty extension value: valid msgpack that is not a JSON value, so the library
    /// rejects the payload holding it.
    fn unrepresentable(&mut self) {
        let Ok(_) = mp::write_ext_meta(&mut self.out, 0, 0);
    }
}
