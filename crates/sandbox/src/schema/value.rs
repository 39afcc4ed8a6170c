//! JSON arguments to component values (validating on the way) and
//! component results back to JSON, in the shapes [`super::json_schema`]
//! documents.
//!
//! Validation walks the WIT type itself rather than the derived JSON
//! Schema: the two describe the same set of values, and the type gives
//! errors in the tool's own vocabulary (parameter and field names).

use serde_json::{Map, Value};
use wasmtime::component::Val;

use super::wit::WitType;

/// One argument that does not fit the tool's parameter types.
///
/// `path` names the argument and the place inside it (`options.limit`,
/// `items[2]`); `message` states the rule and what was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` {message}")]
pub struct ArgError {
    pub path: String,
    pub message: String,
}

impl ArgError {
    fn new(path: &str, message: impl Into<String>) -> Self {
        ArgError {
            path: if path.is_empty() {
                "arguments".to_string()
            } else {
                path.to_string()
            },
            message: message.into(),
        }
    }
}

/// Converts a tool call's JSON arguments into the function's parameters.
///
/// The arguments must be an object with one key per parameter. An option
/// parameter may be left out; any other missing or unknown key is an error.
pub fn args_from_json(params: &[(String, WitType)], args: &Value) -> Result<Vec<Val>, ArgError> {
    let empty = Map::new();
    let object = match args {
        Value::Object(map) => map,
        Value::Null => &empty,
        other => {
            return Err(ArgError::new(
                "",
                format!("must be a JSON object; got {}", kind_of(other)),
            ));
        }
    };
    let fields: Vec<(&str, &WitType)> = params.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let values = record_from_json("", &fields, object)?;
    Ok(values.into_iter().map(|(_, v)| v).collect())
}

/// Converts one JSON value to a value of `ty`, naming `path` in errors.
pub fn from_json(path: &str, ty: &WitType, json: &Value) -> Result<Val, ArgError> {
    if let Some((min, max)) = ty.integer_range() {
        return integer_from_json(path, ty, json, min, max);
    }
    match ty {
        WitType::Bool => match json {
            Value::Bool(b) => Ok(Val::Bool(*b)),
            other => Err(expected(path, "a boolean", other)),
        },
        WitType::F32 => Ok(Val::Float32(number(path, json)? as f32)),
        WitType::F64 => Ok(Val::Float64(number(path, json)?)),
        WitType::Char => {
            let s = string(path, json)?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Ok(Val::Char(c)),
                _ => Err(ArgError::new(
                    path,
                    format!("must be exactly one character; got {}", quote(s)),
                )),
            }
        }
        WitType::String => Ok(Val::String(string(path, json)?.to_string())),
        WitType::List(item) => Ok(Val::List(list_from_json(path, item, json, None)?)),
        WitType::FixedList(item, n) => Ok(Val::FixedLengthList(list_from_json(
            path,
            item,
            json,
            Some(*n as usize),
        )?)),
        WitType::Record(fields) => {
            let Value::Object(object) = json else {
                return Err(expected(path, "an object", json));
            };
            let fields: Vec<(&str, &WitType)> =
                fields.iter().map(|(n, t)| (n.as_str(), t)).collect();
            Ok(Val::Record(
                record_from_json(path, &fields, object)?
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), v))
                    .collect(),
            ))
        }
        WitType::Tuple(types) => {
            let Value::Array(items) = json else {
                return Err(expected(
                    path,
                    &format!("an array of {} items", types.len()),
                    json,
                ));
            };
            if items.len() != types.len() {
                return Err(ArgError::new(
                    path,
                    format!(
                        "must have exactly {} items; got {}",
                        types.len(),
                        items.len()
                    ),
                ));
            }
            let vals = types
                .iter()
                .zip(items)
                .enumerate()
                .map(|(i, (t, v))| from_json(&index_path(path, i), t, v))
                .collect::<Result<_, _>>()?;
            Ok(Val::Tuple(vals))
        }
        WitType::Variant(cases) => variant_from_json(path, cases, json),
        WitType::Enum(names) => {
            let s = string(path, json)?;
            if names.iter().any(|n| n == s) {
                Ok(Val::Enum(s.to_string()))
            } else {
                Err(ArgError::new(
                    path,
                    format!("must be one of {}; got {}", names.join(", "), quote(s)),
                ))
            }
        }
        WitType::Option(inner) => {
            if json.is_null() {
                return Ok(Val::Option(None));
            }
            let payload = if inner.admits_null() {
                single_key(path, json, &["some"])?.1
            } else {
                json
            };
            Ok(Val::Option(Some(Box::new(from_json(
                path, inner, payload,
            )?))))
        }
        WitType::Result { ok, err } => {
            let (key, payload) = single_key(path, json, &["ok", "err"])?;
            let ty = if key == "ok" { ok } else { err };
            let val = match ty {
                Some(t) => Some(Box::new(from_json(&field_path(path, key), t, payload)?)),
                None if payload.is_null() => None,
                None => {
                    return Err(ArgError::new(
                        &field_path(path, key),
                        format!(
                            "carries no value and must be null; got {}",
                            kind_of(payload)
                        ),
                    ));
                }
            };
            Ok(Val::Result(if key == "ok" { Ok(val) } else { Err(val) }))
        }
        WitType::Flags(names) => {
            let Value::Array(items) = json else {
                return Err(expected(path, "an array of flag names", json));
            };
            let mut set: Vec<String> = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let p = index_path(path, i);
                let s = string(&p, item)?;
                if !names.iter().any(|n| n == s) {
                    return Err(ArgError::new(
                        &p,
                        format!("must be one of {}; got {}", names.join(", "), quote(s)),
                    ));
                }
                if set.iter().any(|n| n == s) {
                    return Err(ArgError::new(
                        &p,
                        format!("repeats the flag {}; each flag may appear once", quote(s)),
                    ));
                }
                set.push(s.to_string());
            }
            Ok(Val::Flags(set))
        }
        _ => unreachable!("integers handled above"),
    }
}

/// Converts a component value of `ty` to JSON.
///
/// Non-finite floats have no JSON number; they become the strings `"NaN"`,
/// `"Infinity"` and `"-Infinity"`.
pub fn to_json(ty: &WitType, val: &Val) -> Value {
    match (ty, val) {
        (_, Val::Bool(b)) => Value::Bool(*b),
        (_, Val::S8(n)) => Value::from(*n),
        (_, Val::U8(n)) => Value::from(*n),
        (_, Val::S16(n)) => Value::from(*n),
        (_, Val::U16(n)) => Value::from(*n),
        (_, Val::S32(n)) => Value::from(*n),
        (_, Val::U32(n)) => Value::from(*n),
        (_, Val::S64(n)) => Value::from(*n),
        (_, Val::U64(n)) => Value::from(*n),
        (_, Val::Float32(f)) => float_json(f64::from(*f)),
        (_, Val::Float64(f)) => float_json(*f),
        (_, Val::Char(c)) => Value::String(c.to_string()),
        (_, Val::String(s)) => Value::String(s.clone()),
        (WitType::List(item) | WitType::FixedList(item, _), Val::List(vs))
        | (WitType::List(item) | WitType::FixedList(item, _), Val::FixedLengthList(vs)) => {
            Value::Array(vs.iter().map(|v| to_json(item, v)).collect())
        }
        (WitType::Record(fields), Val::Record(vs)) => {
            let mut map = Map::new();
            for ((name, fty), (_, v)) in fields.iter().zip(vs) {
                map.insert(name.clone(), to_json(fty, v));
            }
            Value::Object(map)
        }
        (WitType::Tuple(types), Val::Tuple(vs)) => {
            Value::Array(types.iter().zip(vs).map(|(t, v)| to_json(t, v)).collect())
        }
        (WitType::Variant(cases), Val::Variant(name, payload)) => {
            let case_ty = cases
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, t)| t.as_ref());
            match (case_ty, payload) {
                (Some(t), Some(v)) => single_key_value(name, to_json(t, v)),
                _ => Value::String(name.clone()),
            }
        }
        (_, Val::Enum(name)) => Value::String(name.clone()),
        (WitType::Option(inner), Val::Option(opt)) => match opt {
            None => Value::Null,
            Some(v) if inner.admits_null() => single_key_value("some", to_json(inner, v)),
            Some(v) => to_json(inner, v),
        },
        (WitType::Result { ok, err }, Val::Result(r)) => {
            let (key, t, v) = match r {
                Ok(v) => ("ok", ok, v),
                Err(v) => ("err", err, v),
            };
            let payload = match (t, v) {
                (Some(t), Some(v)) => to_json(t, v),
                _ => Value::Null,
            };
            single_key_value(key, payload)
        }
        (_, Val::Flags(names)) => Value::Array(names.iter().cloned().map(Value::String).collect()),
        // The type and value come from the same function signature, so a
        // mismatch is a host bug; say so instead of panicking mid-call.
        (ty, other) => Value::String(format!(
            "<unrepresentable {} value: {other:?}>",
            ty.describe()
        )),
    }
}

fn record_from_json<'a>(
    path: &str,
    fields: &[(&'a str, &WitType)],
    object: &Map<String, Value>,
) -> Result<Vec<(&'a str, Val)>, ArgError> {
    if let Some(unknown) = object.keys().find(|k| !fields.iter().any(|(n, _)| n == k)) {
        let known: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
        let allowed = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        return Err(ArgError::new(
            &field_path(path, unknown),
            format!("is not a known {}; allowed: {allowed}", noun(path)),
        ));
    }
    fields
        .iter()
        .map(|(name, ty)| {
            let p = field_path(path, name);
            let val = match object.get(*name) {
                Some(v) => from_json(&p, ty, v)?,
                None if matches!(ty, WitType::Option(_)) => Val::Option(None),
                None => {
                    return Err(ArgError::new(
                        &p,
                        format!("is required ({}) but missing", ty.describe()),
                    ));
                }
            };
            Ok((*name, val))
        })
        .collect()
}

fn variant_from_json(
    path: &str,
    cases: &[(String, Option<WitType>)],
    json: &Value,
) -> Result<Val, ArgError> {
    let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
    let (name, payload) = match json {
        Value::String(s) => (s.as_str(), None),
        Value::Object(_) => {
            let (k, v) = single_key(path, json, &names)?;
            (k, Some(v))
        }
        other => {
            return Err(expected(
                path,
                "a case name or a {\"case\": value} object",
                other,
            ));
        }
    };
    let Some((_, case_ty)) = cases.iter().find(|(n, _)| n == name) else {
        return Err(ArgError::new(
            path,
            format!(
                "must be one of the cases {}; got {}",
                names.join(", "),
                quote(name)
            ),
        ));
    };
    let p = field_path(path, name);
    let val = match (case_ty, payload) {
        (Some(t), Some(v)) => Some(Box::new(from_json(&p, t, v)?)),
        (Some(t), None) => {
            return Err(ArgError::new(
                path,
                format!(
                    "case {} carries a {}; send {{\"{name}\": value}}",
                    quote(name),
                    t.describe()
                ),
            ));
        }
        (None, Some(v)) if !v.is_null() => {
            return Err(ArgError::new(
                &p,
                format!("carries no value; send just {}", quote(name)),
            ));
        }
        (None, _) => None,
    };
    Ok(Val::Variant(name.to_string(), val))
}

fn integer_from_json(
    path: &str,
    ty: &WitType,
    json: &Value,
    min: i128,
    max: i128,
) -> Result<Val, ArgError> {
    let n: i128 = match json {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into()
            } else if let Some(u) = n.as_u64() {
                u.into()
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() != 0.0 || !f.is_finite() {
                    return Err(ArgError::new(
                        path,
                        format!("must be a whole number; got {n}"),
                    ));
                }
                // Whole floats such as 3.0 are accepted; out-of-range ones
                // are caught just below.
                f as i128
            }
        }
        other => return Err(expected(path, "an integer", other)),
    };
    if n < min || n > max {
        return Err(ArgError::new(
            path,
            format!(
                "must be between {min} and {max} ({}); got {n}",
                ty.describe()
            ),
        ));
    }
    Ok(match ty {
        WitType::S8 => Val::S8(n as i8),
        WitType::U8 => Val::U8(n as u8),
        WitType::S16 => Val::S16(n as i16),
        WitType::U16 => Val::U16(n as u16),
        WitType::S32 => Val::S32(n as i32),
        WitType::U32 => Val::U32(n as u32),
        WitType::S64 => Val::S64(n as i64),
        _ => Val::U64(n as u64),
    })
}

fn list_from_json(
    path: &str,
    item: &WitType,
    json: &Value,
    exact_len: Option<usize>,
) -> Result<Vec<Val>, ArgError> {
    let Value::Array(items) = json else {
        return Err(expected(path, "an array", json));
    };
    if let Some(n) = exact_len
        && items.len() != n
    {
        return Err(ArgError::new(
            path,
            format!("must have exactly {n} items; got {}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| from_json(&index_path(path, i), item, v))
        .collect()
}

/// Reads an object with exactly one key, which must be one of `allowed`.
fn single_key<'v>(
    path: &str,
    json: &'v Value,
    allowed: &[&str],
) -> Result<(&'v str, &'v Value), ArgError> {
    let shape = allowed
        .iter()
        .map(|k| format!("{{\"{k}\": …}}"))
        .collect::<Vec<_>>()
        .join(" or ");
    match json {
        Value::Object(map) if map.len() == 1 => {
            let (k, v) = map.iter().next().expect("one entry");
            if allowed.contains(&k.as_str()) {
                Ok((k.as_str(), v))
            } else {
                Err(ArgError::new(
                    path,
                    format!("must be {shape}; got key {}", quote(k)),
                ))
            }
        }
        Value::Object(map) => Err(ArgError::new(
            path,
            format!(
                "must be {shape} with exactly one key; got {} keys",
                map.len()
            ),
        )),
        other => Err(expected(path, &shape, other)),
    }
}

fn number(path: &str, json: &Value) -> Result<f64, ArgError> {
    match json {
        Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) if s == "NaN" => Ok(f64::NAN),
        Value::String(s) if s == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
        other => Err(expected(path, "a number", other)),
    }
}

fn string<'v>(path: &str, json: &'v Value) -> Result<&'v str, ArgError> {
    json.as_str()
        .ok_or_else(|| expected(path, "a string", json))
}

fn expected(path: &str, what: &str, got: &Value) -> ArgError {
    ArgError::new(path, format!("must be {what}; got {}", kind_of(got)))
}

fn kind_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", quote(s)),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// Quotes user text for an error message, shortened so a huge argument
/// cannot flood the message.
fn quote(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}… ({} chars)", s.chars().count())
    }
}

fn noun(path: &str) -> &'static str {
    if path.is_empty() { "argument" } else { "field" }
}

fn field_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn index_path(path: &str, i: usize) -> String {
    format!("{}[{i}]", if path.is_empty() { "arguments" } else { path })
}

fn single_key_value(key: &str, value: Value) -> Value {
    let mut map = Map::new();
    map.insert(key.to_string(), value);
    Value::Object(map)
}

fn float_json(f: f64) -> Value {
    if f.is_nan() {
        Value::from("NaN")
    } else if f.is_infinite() {
        Value::from(if f > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}
