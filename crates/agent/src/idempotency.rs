//! Idempotency keys: the same side-effecting call (tool and arguments, in
//! any key order) gets the same key, so a retry is recognised.

use serde_json::{Map, Value};

/// Canonical JSON text (sorted keys) of arguments, for comparing calls.
pub(super) fn canonical(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .map(|v| sorted(&v).to_string())
        .unwrap_or_else(|_| arguments.trim().to_string())
}

/// `value` with every object's keys in order, whatever map the JSON
/// library was built with.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A stable key for a side-effecting call: the same tool and arguments
/// give the same key, so a retry is recognised.
pub(super) fn idempotency_key(name: &str, arguments: &Map<String, Value>) -> String {
    let canonical = sorted(&Value::Object(arguments.clone())).to_string();
    crate::sandbox::sha256_hex(format!("{name}\u{0}{canonical}").as_bytes())
}
