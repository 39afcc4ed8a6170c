//! Schema derivation, validation errors and the JSON <-> value round trip,
//! for every WIT type kind.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::json_schema::{params_schema, schema_for};
use super::value::from_json;
use super::*;

fn rec(fields: &[(&str, WitType)]) -> WitType {
    WitType::Record(
        fields
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
    )
}

fn opt(t: WitType) -> WitType {
    WitType::Option(Box::new(t))
}

fn names(ns: &[&str]) -> Vec<String> {
    ns.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------- schemas

#[test]
fn integers_carry_their_exact_range() {
    let cases = [
        (WitType::S8, json!(-128), json!(127)),
        (WitType::U8, json!(0), json!(255)),
        (WitType::S16, json!(-32768), json!(32767)),
        (WitType::U16, json!(0), json!(65535)),
        (WitType::S32, json!(-2147483648i64), json!(2147483647)),
        (WitType::U32, json!(0), json!(4294967295u64)),
        (WitType::S64, json!(i64::MIN), json!(i64::MAX)),
        (WitType::U64, json!(0), json!(u64::MAX)),
    ];
    for (ty, min, max) in cases {
        assert_eq!(
            schema_for(&ty),
            json!({"type": "integer", "minimum": min, "maximum": max}),
            "{ty:?}"
        );
    }
}

#[test]
fn scalars() {
    assert_eq!(schema_for(&WitType::Bool), json!({"type": "boolean"}));
    assert_eq!(schema_for(&WitType::F32), json!({"type": "number"}));
    assert_eq!(schema_for(&WitType::F64), json!({"type": "number"}));
    assert_eq!(schema_for(&WitType::String), json!({"type": "string"}));
    assert_eq!(
        schema_for(&WitType::Char),
        json!({"type": "string", "minLength": 1, "maxLength": 1})
    );
}

#[test]
fn lists_and_tuples() {
    assert_eq!(
        schema_for(&WitType::List(Box::new(WitType::String))),
        json!({"type": "array", "items": {"type": "string"}})
    );
    assert_eq!(
        schema_for(&WitType::FixedList(Box::new(WitType::Bool), 3)),
        json!({"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3})
    );
    assert_eq!(
        schema_for(&WitType::Tuple(vec![WitType::String, WitType::Bool])),
        json!({
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "boolean"}],
            "items": false, "minItems": 2, "maxItems": 2
        })
    );
}

#[test]
fn records_require_non_option_fields_and_forbid_others() {
    let ty = rec(&[("path", WitType::String), ("limit", opt(WitType::Bool))]);
    assert_eq!(
        schema_for(&ty),
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    );
}

#[test]
fn options_nest_without_ambiguity() {
    assert_eq!(
        schema_for(&opt(opt(WitType::U8))),
        json!({"anyOf": [
            {"type": "object",
             "properties": {"some": {"anyOf": [
                 {"type": "integer", "minimum": 0, "maximum": 255}, {"type": "null"}]}},
             "required": ["some"], "additionalProperties": false},
            {"type": "null"}
        ]})
    );
}

#[test]
fn enums_flags_variants_results() {
    assert_eq!(
        schema_for(&WitType::Enum(names(&["a", "b"]))),
        json!({"type": "string", "enum": ["a", "b"]})
    );
    assert_eq!(
        schema_for(&WitType::Flags(names(&["r", "w"]))),
        json!({"type": "array", "items": {"type": "string", "enum": ["r", "w"]}, "uniqueItems": true})
    );
    assert_eq!(
        schema_for(&WitType::Variant(vec![
            ("none".into(), None),
            ("some".into(), Some(WitType::U8)),
        ])),
        json!({"oneOf": [
            {"const": "none"},
            {"type": "object",
             "properties": {"some": {"type": "integer", "minimum": 0, "maximum": 255}},
             "required": ["some"], "additionalProperties": false}
        ]})
    );
    assert_eq!(
        schema_for(&WitType::Result {
            ok: None,
            err: Some(Box::new(WitType::String))
        }),
        json!({"oneOf": [
            {"type": "object", "properties": {"ok": {"type": "null"}},
             "required": ["ok"], "additionalProperties": false},
            {"type": "object", "properties": {"err": {"type": "string"}},
             "required": ["err"], "additionalProperties": false}
        ]})
    );
}

#[test]
fn params_schema_is_an_object_of_parameters() {
    let params = vec![
        ("path".to_string(), WitType::String),
        ("count".to_string(), opt(WitType::U32)),
    ];
    let schema = params_schema(&params);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["path"]));
    assert_eq!(schema["additionalProperties"], json!(false));
}

// ------------------------------------------------------------- validation

fn params(list: &[(&str, WitType)]) -> Vec<(String, WitType)> {
    list.iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect()
}

fn arg_error(list: &[(&str, WitType)], args: Value) -> String {
    args_from_json(&params(list), &args)
        .expect_err("should be refused")
        .to_string()
}

#[test]
fn every_validation_rule_names_the_argument_and_the_rule() {
    let metric = WitType::Enum(names(&["request_count", "error_rate", "p95_latency"]));
    type Case<'a> = (Vec<(&'a str, WitType)>, Value, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![("metric", metric)],
            json!({"metric": "latency"}),
            "`metric` must be one of request_count, error_rate, p95_latency; got \"latency\"",
        ),
        (
            vec![("n", WitType::U8)],
            json!({"n": 256}),
            "`n` must be between 0 and 255 (u8); got 256",
        ),
        (
            vec![("n", WitType::S8)],
            json!({"n": -129}),
            "`n` must be between -128 and 127 (s8); got -129",
        ),
        (
            vec![("n", WitType::U32)],
            json!({"n": 1.5}),
            "`n` must be a whole number; got 1.5",
        ),
        (
            vec![("n", WitType::U32)],
            json!({"n": "7"}),
            "`n` must be an integer; got the string \"7\"",
        ),
        (
            vec![("b", WitType::Bool)],
            json!({"b": 1}),
            "`b` must be a boolean; got the number 1",
        ),
        (
            vec![("x", WitType::F64)],
            json!({"x": null}),
            "`x` must be a number; got null",
        ),
        (
            vec![("c", WitType::Char)],
            json!({"c": "ab"}),
            "`c` must be exactly one character; got \"ab\"",
        ),
        (
            vec![("s", WitType::String)],
            json!({"s": ["a"]}),
            "`s` must be a string; got an array of 1 items",
        ),
        (
            vec![("path", WitType::String)],
            json!({}),
            "`path` is required (string) but missing",
        ),
        (
            vec![("path", WitType::String)],
            json!({"path": "a", "paht": "b"}),
            "`paht` is not a known argument; allowed: path",
        ),
        (
            vec![("items", WitType::List(Box::new(WitType::U8)))],
            json!({"items": [1, 2, 300]}),
            "`items[2]` must be between 0 and 255 (u8); got 300",
        ),
        (
            vec![("items", WitType::FixedList(Box::new(WitType::U8), 2))],
            json!({"items": [1]}),
            "`items` must have exactly 2 items; got 1",
        ),
        (
            vec![("t", WitType::Tuple(vec![WitType::String, WitType::U8]))],
            json!({"t": ["a"]}),
            "`t` must have exactly 2 items; got 1",
        ),
        (
            vec![("p", rec(&[("x", WitType::S32)]))],
            json!({"p": {"x": 1, "z": 2}}),
            "`p.z` is not a known field; allowed: x",
        ),
        (
            vec![("p", rec(&[("x", WitType::S32)]))],
            json!({"p": {}}),
            "`p.x` is required (s32) but missing",
        ),
        (
            vec![("p", rec(&[("x", WitType::S32)]))],
            json!({"p": 3}),
            "`p` must be an object; got the number 3",
        ),
        (
            vec![("f", WitType::Flags(names(&["read", "write"])))],
            json!({"f": ["read", "exec"]}),
            "`f[1]` must be one of read, write; got \"exec\"",
        ),
        (
            vec![("f", WitType::Flags(names(&["read", "write"])))],
            json!({"f": ["read", "read"]}),
            "`f[1]` repeats the flag \"read\"; each flag may appear once",
        ),
        (
            vec![(
                "s",
                WitType::Variant(vec![
                    ("circle".into(), Some(WitType::F64)),
                    ("empty".into(), None),
                ]),
            )],
            json!({"s": "square"}),
            "`s` must be one of the cases circle, empty; got \"square\"",
        ),
        (
            vec![(
                "s",
                WitType::Variant(vec![
                    ("circle".into(), Some(WitType::F64)),
                    ("empty".into(), None),
                ]),
            )],
            json!({"s": "circle"}),
            "`s` case \"circle\" carries a f64; send {\"circle\": value}",
        ),
        (
            vec![(
                "s",
                WitType::Variant(vec![
                    ("circle".into(), Some(WitType::F64)),
                    ("empty".into(), None),
                ]),
            )],
            json!({"s": {"empty": 3}}),
            "`s.empty` carries no value; send just \"empty\"",
        ),
        (
            vec![(
                "r",
                WitType::Result {
                    ok: Some(Box::new(WitType::U8)),
                    err: None,
                },
            )],
            json!({"r": {"value": 1}}),
            "`r` must be {\"ok\": …} or {\"err\": …}; got key \"value\"",
        ),
        (
            vec![(
                "r",
                WitType::Result {
                    ok: Some(Box::new(WitType::U8)),
                    err: None,
                },
            )],
            json!({"r": {"err": "x"}}),
            "`r.err` carries no value and must be null; got the string \"x\"",
        ),
        (
            vec![("o", opt(opt(WitType::U8)))],
            json!({"o": 3}),
            "`o` must be {\"some\": …}; got the number 3",
        ),
    ];
    for (list, args, expected) in cases {
        assert_eq!(arg_error(&list, args.clone()), expected, "args: {args}");
    }
}

#[test]
fn arguments_must_be_an_object() {
    let err = arg_error(&[("path", WitType::String)], json!(["a"]));
    assert_eq!(
        err,
        "`arguments` must be a JSON object; got an array of 1 items"
    );
}

#[test]
fn missing_options_and_null_arguments_are_none() {
    let vals = args_from_json(&params(&[("limit", opt(WitType::U32))]), &json!(null)).unwrap();
    assert_eq!(vals, vec![wasmtime::component::Val::Option(None)]);
}

#[test]
fn whole_floats_are_accepted_as_integers() {
    let vals = args_from_json(&params(&[("n", WitType::U8)]), &json!({"n": 3.0})).unwrap();
    assert_eq!(vals, vec![wasmtime::component::Val::U8(3)]);
}

#[test]
fn long_strings_are_shortened_in_errors() {
    let long = "x".repeat(10_000);
    let err = arg_error(&[("c", WitType::Char)], json!({ "c": long }));
    assert!(err.len() < 300, "{err}");
    assert!(err.contains("10000 chars"), "{err}");
}

// ------------------------------------------------------------- round trip

/// A name list of `n` distinct names (`prefix0`, `prefix1`, …).
fn distinct(prefix: &'static str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn arb_type() -> impl Strategy<Value = WitType> {
    let leaf = prop_oneof![
        Just(WitType::Bool),
        Just(WitType::S8),
        Just(WitType::U8),
        Just(WitType::S16),
        Just(WitType::U16),
        Just(WitType::S32),
        Just(WitType::U32),
        Just(WitType::S64),
        Just(WitType::U64),
        Just(WitType::F32),
        Just(WitType::F64),
        Just(WitType::Char),
        Just(WitType::String),
        (1usize..5).prop_map(|n| WitType::Enum(distinct("case", n))),
        (1usize..5).prop_map(|n| WitType::Flags(distinct("flag", n))),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| WitType::List(Box::new(t))),
            (inner.clone(), 0u32..4).prop_map(|(t, n)| WitType::FixedList(Box::new(t), n)),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|ts| WitType::Record(
                ts.into_iter()
                    .enumerate()
                    .map(|(i, t)| (format!("field{i}"), t))
                    .collect()
            )),
            prop::collection::vec(inner.clone(), 1..4).prop_map(WitType::Tuple),
            prop::collection::vec(prop::option::of(inner.clone()), 1..4).prop_map(|cs| {
                WitType::Variant(
                    cs.into_iter()
                        .enumerate()
                        .map(|(i, t)| (format!("case{i}"), t))
                        .collect(),
                )
            }),
            inner.clone().prop_map(|t| WitType::Option(Box::new(t))),
            (prop::option::of(inner.clone()), prop::option::of(inner)).prop_map(|(ok, err)| {
                WitType::Result {
                    ok: ok.map(Box::new),
                    err: err.map(Box::new),
                }
            }),
        ]
    })
}

/// A JSON value of `ty`, in the canonical shape `to_json` produces.
fn arb_json(ty: &WitType) -> BoxedStrategy<Value> {
    match ty {
        WitType::Bool => any::<bool>().prop_map(Value::from).boxed(),
        WitType::S8 => any::<i8>().prop_map(Value::from).boxed(),
        WitType::U8 => any::<u8>().prop_map(Value::from).boxed(),
        WitType::S16 => any::<i16>().prop_map(Value::from).boxed(),
        WitType::U16 => any::<u16>().prop_map(Value::from).boxed(),
        WitType::S32 => any::<i32>().prop_map(Value::from).boxed(),
        WitType::U32 => any::<u32>().prop_map(Value::from).boxed(),
        WitType::S64 => any::<i64>().prop_map(Value::from).boxed(),
        WitType::U64 => any::<u64>().prop_map(Value::from).boxed(),
        WitType::F32 => prop::num::f32::NORMAL
            .prop_map(|f| Value::from(f64::from(f)))
            .boxed(),
        WitType::F64 => prop::num::f64::NORMAL.prop_map(Value::from).boxed(),
        WitType::Char => any::<char>()
            .prop_map(|c| Value::from(c.to_string()))
            .boxed(),
        WitType::String => ".{0,12}".prop_map(Value::from).boxed(),
        WitType::Enum(names) => prop::sample::select(names.clone())
            .prop_map(Value::from)
            .boxed(),
        WitType::Flags(names) => prop::sample::subsequence(names.clone(), 0..=names.len())
            .prop_map(Value::from)
            .boxed(),
        WitType::List(t) => prop::collection::vec(arb_json(t), 0..4)
            .prop_map(Value::from)
            .boxed(),
        WitType::FixedList(t, n) => prop::collection::vec(arb_json(t), *n as usize)
            .prop_map(Value::from)
            .boxed(),
        WitType::Tuple(ts) => ts
            .iter()
            .map(arb_json)
            .collect::<Vec<_>>()
            .prop_map(Value::from)
            .boxed(),
        WitType::Record(fields) => {
            let keys: Vec<String> = fields.iter().map(|(n, _)| n.clone()).collect();
            fields
                .iter()
                .map(|(_, t)| arb_json(t))
                .collect::<Vec<_>>()
                .prop_map(move |vs| Value::Object(keys.iter().cloned().zip(vs).collect()))
                .boxed()
        }
        WitType::Variant(cases) => {
            let arms: Vec<BoxedStrategy<Value>> = cases
                .iter()
                .map(|(name, t)| {
                    let name = name.clone();
                    match t {
                        None => Just(Value::from(name)).boxed(),
                        Some(t) => arb_json(t)
                            .prop_map(move |v| json!({ name.clone(): v }))
                            .boxed(),
                    }
                })
                .collect();
            prop::strategy::Union::new(arms).boxed()
        }
        WitType::Option(inner) => {
            let wrap = inner.admits_null();
            prop_oneof![
                Just(Value::Null),
                arb_json(inner).prop_map(move |v| if wrap { json!({"some": v}) } else { v }),
            ]
            .boxed()
        }
        WitType::Result { ok, err } => {
            let arm = |key: &'static str, t: &Option<Box<WitType>>| match t {
                None => Just(json!({ key: null })).boxed(),
                Some(t) => arb_json(t).prop_map(move |v| json!({ key: v })).boxed(),
            };
            prop_oneof![arm("ok", ok), arm("err", err)].boxed()
        }
    }
}

fn arb_typed_json() -> impl Strategy<Value = (WitType, Value)> {
    arb_type().prop_flat_map(|ty| arb_json(&ty).prop_map(move |v| (ty.clone(), v)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn json_to_value_to_json_is_the_identity((ty, json) in arb_typed_json()) {
        let val = from_json("x", &ty, &json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(to_json(&ty, &val), json);
    }

    #[test]
    fn validation_never_panics_on_arbitrary_json(ty in arb_type(), json in arb_any_json()) {
        let _ = from_json("x", &ty, &json);
    }
}

fn arb_any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
