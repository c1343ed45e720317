//! Python keyword arguments to [`blockwire::TransportOptions`], and config fields to JSON.

use std::time::Duration;

use blockwire::TransportOptions;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

use crate::errors::raise;

fn bad_config(py: Python<'_>, message: String) -> PyErr {
    raise(py, "ConfigError", "config", message)
}

/// `config_fields` (a dict, or `None`) as the JSON object the fingerprint is computed from.
///
/// Keys must be strings: Python's own formula sorts the keys before `json.dumps` turns
/// non-string ones into strings, an order no JSON object keeps, so such keys are refused
/// rather than fingerprinted differently. Values are what `json.dumps` takes, except NaN and
/// infinities (not JSON).
pub(crate) fn config_fields(
    fields: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Map<String, Value>>> {
    let Some(fields) = fields.filter(|f| !f.is_none()) else {
        return Ok(None);
    };
    let py = fields.py();
    match to_json(fields, "config_fields", 0)? {
        Value::Object(map) => Ok(Some(map)),
        _ => Err(bad_config(
            py,
            format!("config_fields must be a dict, not {}", type_name(fields)),
        )),
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Deeper than this is refused (a cycle, or nothing a config needs).
const MAX_DEPTH: usize = 64;

fn to_json(v: &Bound<'_, PyAny>, path: &str, depth: usize) -> PyResult<Value> {
    let py = v.py();
    if depth > MAX_DEPTH {
        return Err(bad_config(
            py,
            format!("{path}: nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        // Python's int text, arbitrary precision kept (serde_json's `arbitrary_precision`).
        let text = v.call_method0("__index__")?.str()?.to_string();
        return number(py, &text, path);
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        let x = f.value();
        if !x.is_finite() {
            return Err(bad_config(
                py,
                format!("{path}: {x} is not JSON (json.dumps would write {x:?} as a bare word)"),
            ));
        }
        return number(py, &f.repr()?.to_string(), path);
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, item) in d.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                return Err(bad_config(
                    py,
                    format!(
                        "{path}: key {} is a {}, not a str (JSON object keys are strings)",
                        k.repr()?,
                        type_name(&k)
                    ),
                ));
            };
            let key = key.to_str()?.to_owned();
            let value = to_json(&item, &format!("{path}[{key:?}]"), depth + 1)?;
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in v.try_iter()?.enumerate() {
            items.push(to_json(&item?, &format!("{path}[{i}]"), depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    Err(bad_config(
        py,
        format!("{path}: a {} is not JSON serializable", type_name(v)),
    ))
}

fn number(py: Python<'_>, text: &str, path: &str) -> PyResult<Value> {
    serde_json::from_str::<Value>(text)
        .map_err(|e| bad_config(py, format!("{path}: {text} as a JSON number: {e}")))
}

/// A duration in seconds; `inf` means none.
fn seconds(py: Python<'_>, what: &str, s: f64) -> PyResult<Option<Duration>> {
    if s == f64::INFINITY {
        return Ok(None);
    }
    Duration::try_from_secs_f64(s)
        .map(Some)
        .map_err(|e| bad_config(py, format!("{what}={s}: {e}")))
}

/// What the Python constructor takes besides the buffer and the backend.
pub(crate) struct Settings<'py> {
    pub(crate) name: Option<String>,
    pub(crate) config_fields: Option<Bound<'py, PyAny>>,
    pub(crate) options: Option<Bound<'py, PyDict>>,
    pub(crate) stall_timeout: Option<f64>,
    pub(crate) close_timeout: Option<f64>,
    pub(crate) max_consecutive_failures: Option<u32>,
    pub(crate) notification_capacity: Option<usize>,
    pub(crate) telemetry: bool,
}

impl Settings<'_> {
    /// The transport options these settings ask for.
    pub(crate) fn options(&self, py: Python<'_>) -> PyResult<TransportOptions> {
        let mut o = TransportOptions::default()
            .with_config_fields(config_fields(self.config_fields.as_ref())?)
            .with_telemetry(self.telemetry);
        if let Some(name) = &self.name {
            o = o.with_name(name.clone());
        }
        if let Some(s) = self.stall_timeout {
            o = o.with_stall_timeout(seconds(py, "stall_timeout", s)?);
        }
        if let Some(s) = self.close_timeout {
            let Some(d) = seconds(py, "close_timeout", s)? else {
                return Err(bad_config(
                    py,
                    "close_timeout must be finite: a close always ends".into(),
                ));
            };
            o = o.with_close_timeout(d);
        }
        if let Some(n) = self.max_consecutive_failures {
            o = o.with_max_consecutive_failures(n);
        }
        if let Some(n) = self.notification_capacity {
            o = o.with_notification_capacity(n);
        }
        if let Some(options) = &self.options {
            for (k, v) in options.iter() {
                let key: String = k.extract().map_err(|_| {
                    bad_config(py, format!("backend option key {k:?} is not a str"))
                })?;
                // Values may be given as numbers or booleans; the backend reads text.
                let value = if let Ok(b) = v.cast::<PyBool>() {
                    if b.is_true() { "true" } else { "false" }.to_owned()
                } else {
                    v.str()?.to_string()
                };
                o = o.with_backend_option(key, value);
            }
        }
        Ok(o)
    }
}
