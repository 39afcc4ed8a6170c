//! WIT types to JSON Schema (draft 2020-12), exact to the type.
//!
//! The JSON shape of each type is fixed here and mirrored by
//! [`super::value`], which converts values the same way:
//!
//! | WIT | JSON |
//! |---|---|
//! | integers | integer with the type's exact `minimum`/`maximum` |
//! | `f32`, `f64` | number |
//! | `char` | one-character string |
//! | `list<T>` | array |
//! | `tuple<…>` | array with `prefixItems` |
//! | `record` | object, non-option fields `required`, `additionalProperties: false` |
//! | `option<T>` | `T` or `null`; as a record field or parameter, not required. `option<option<T>>` spells `some` as `{"some": …}` |
//! | `enum` | string enum |
//! | `flags` | array of unique strings from the flag names |
//! | `variant` | `oneOf`: a case without payload is its name; with payload, `{"case": payload}` |
//! | `result<T, E>` as an argument | `{"ok": T}` or `{"err": E}` |

use serde_json::{Value, json};

use super::wit::WitType;

/// The JSON Schema of one value of `ty`.
pub fn schema_for(ty: &WitType) -> Value {
    if let Some((min, max)) = ty.integer_range() {
        return json!({ "type": "integer", "minimum": int_json(min), "maximum": int_json(max) });
    }
    match ty {
        WitType::Bool => json!({ "type": "boolean" }),
        WitType::F32 | WitType::F64 => json!({ "type": "number" }),
        WitType::Char => json!({ "type": "string", "minLength": 1, "maxLength": 1 }),
        WitType::String => json!({ "type": "string" }),
        WitType::List(item) => json!({ "type": "array", "items": schema_for(item) }),
        WitType::FixedList(item, n) => json!({
            "type": "array", "items": schema_for(item), "minItems": n, "maxItems": n
        }),
        WitType::Record(fields) => object_schema(fields.iter().map(|(n, t)| (n.as_str(), t))),
        WitType::Tuple(items) => json!({
            "type": "array",
            "prefixItems": items.iter().map(schema_for).collect::<Vec<_>>(),
            "items": false,
            "minItems": items.len(),
            "maxItems": items.len(),
        }),
        WitType::Variant(cases) => json!({
            "oneOf": cases.iter().map(|(name, payload)| match payload {
                None => json!({ "const": name }),
                Some(t) => single_key_object(name, schema_for(t)),
            }).collect::<Vec<_>>()
        }),
        WitType::Enum(names) => json!({ "type": "string", "enum": names }),
        WitType::Option(inner) => {
            let some = if inner.admits_null() {
                single_key_object("some", schema_for(inner))
            } else {
                schema_for(inner)
            };
            json!({ "anyOf": [some, { "type": "null" }] })
        }
        WitType::Result { ok, err } => {
            let arm = |name: &str, t: &Option<Box<WitType>>| {
                let payload = t.as_deref().map_or(json!({ "type": "null" }), schema_for);
                single_key_object(name, payload)
            };
            json!({ "oneOf": [arm("ok", ok), arm("err", err)] })
        }
        WitType::Flags(names) => json!({
            "type": "array", "items": { "type": "string", "enum": names }, "uniqueItems": true
        }),
        _ => unreachable!("integers handled above"),
    }
}

/// The schema of what a successful call returns: a top-level `result`'s
/// ok type (its err type is reported as a tool error), or the type itself.
pub fn output_schema(ty: &WitType) -> Value {
    match ty {
        WitType::Result { ok, .. } => ok.as_deref().map_or(json!({ "type": "null" }), schema_for),
        other => schema_for(other),
    }
}

/// The `inputSchema` of a function: an object of its named parameters.
pub fn params_schema(params: &[(String, WitType)]) -> Value {
    object_schema(params.iter().map(|(n, t)| (n.as_str(), t)))
}

fn object_schema<'a>(fields: impl Iterator<Item = (&'a str, &'a WitType)>) -> Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        // An option field may be left out; `null` is accepted too.
        if !matches!(ty, WitType::Option(_)) {
            required.push(Value::from(name));
        }
        properties.insert(name.to_string(), schema_for(ty));
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn single_key_object(key: &str, value_schema: Value) -> Value {
    json!({
        "type": "object",
        "properties": { key: value_schema },
        "required": [key],
        "additionalProperties": false,
    })
}

fn int_json(n: i128) -> Value {
    if let Ok(v) = i64::try_from(n) {
        Value::from(v)
    } else {
        Value::from(u64::try_from(n).expect("integer bounds fit in i64 or u64"))
    }
}
