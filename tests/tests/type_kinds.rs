//! Every WIT type kind through a real component: the derived schema, and
//! JSON -> component value -> guest -> component value -> JSON.

use serde_json::{Value, json};
use skillbox_e2e::component;
use skillbox_sandbox::{DiskCache, EngineOptions, Grants, Limits, Sandbox};

fn sandbox() -> Sandbox {
    let cache = DiskCache::new(skillbox_e2e::repo().join("target/test-cache/components"));
    Sandbox::with_options(&EngineOptions::default(), Some(cache)).expect("engine")
}

async fn echo(sandbox: &Sandbox, function: &str, args: Value) -> Value {
    let tb = sandbox.load_file(&component("testbed")).unwrap();
    sandbox
        .call(&tb, function, &args, &Grants::default(), &Limits::default())
        .await
        .unwrap_or_else(|e| panic!("{function}({args}): {e}"))
        .value
}

#[tokio::test]
async fn every_kind_round_trips_through_the_guest() {
    let sb = sandbox();
    let ints = json!({"a": -128, "b": 255, "c": -32768, "d": 65535, "e": -2147483648i64,
                      "f": 4294967295u64, "g": i64::MIN, "h": u64::MAX});
    assert_eq!(
        echo(&sb, "echo-ints", ints).await,
        json!([
            -128,
            255,
            -32768,
            65535,
            -2147483648i64,
            4294967295u64,
            i64::MIN,
            u64::MAX
        ])
    );
    assert_eq!(
        echo(&sb, "echo-floats", json!({"a": 1.5, "b": -2.25e100})).await,
        json!([1.5, -2.25e100])
    );
    assert_eq!(echo(&sb, "echo-char", json!({"c": "ß"})).await, json!("ß"));
    assert_eq!(
        echo(&sb, "echo-string", json!({"s": "héllo\n"})).await,
        json!("héllo\n")
    );
    assert_eq!(
        echo(&sb, "echo-list", json!({"items": [1, 2, 3]})).await,
        json!([1, 2, 3])
    );
    assert_eq!(
        echo(&sb, "echo-record", json!({"p": {"x": 1, "y": -2}})).await,
        json!({"x": 1, "y": -2, "label": null})
    );
    assert_eq!(
        echo(
            &sb,
            "echo-record",
            json!({"p": {"x": 1, "y": 2, "label": "a"}})
        )
        .await,
        json!({"x": 1, "y": 2, "label": "a"})
    );
    assert_eq!(
        echo(&sb, "echo-tuple", json!({"t": ["a", 7, true]})).await,
        json!(["a", 7, true])
    );
    for o in [json!(null), json!({"some": null}), json!({"some": 9})] {
        assert_eq!(echo(&sb, "echo-option", json!({ "o": o })).await, o);
    }
    assert_eq!(
        echo(&sb, "echo-enum", json!({"c": "green"})).await,
        json!("green")
    );
    assert_eq!(
        echo(&sb, "echo-flags", json!({"p": ["read", "exec"]})).await,
        json!(["read", "exec"])
    );
    assert_eq!(echo(&sb, "echo-flags", json!({"p": []})).await, json!([]));
    for s in [
        json!({"circle": 2.5}),
        json!({"rect": {"x": 0, "y": 1, "label": null}}),
        json!("empty"),
    ] {
        assert_eq!(echo(&sb, "echo-variant", json!({ "s": s })).await, s);
    }
    for r in [json!({"ok": 5}), json!({"err": "bad"})] {
        assert_eq!(
            echo(&sb, "echo-outcome", json!({"o": {"r": r}})).await,
            json!({ "r": r })
        );
    }
}

#[test]
fn the_derived_schemas_match_the_wit() {
    let sb = sandbox();
    let tb = sb.load_file(&component("testbed")).unwrap();
    let schema = |name: &str| tb.exports.function(name).unwrap().input_schema();

    assert_eq!(
        schema("noop"),
        json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false})
    );
    let ints = schema("echo-ints");
    assert_eq!(
        ints["properties"]["b"],
        json!({"type": "integer", "minimum": 0, "maximum": 255})
    );
    assert_eq!(ints["properties"]["h"]["maximum"], json!(u64::MAX));
    let record = schema("echo-record");
    assert_eq!(record["properties"]["p"]["required"], json!(["x", "y"]));
    assert_eq!(
        record["properties"]["p"]["additionalProperties"],
        json!(false)
    );
    assert_eq!(
        schema("echo-enum")["properties"]["c"]["enum"],
        json!(["red", "green", "blue"])
    );
    assert_eq!(
        schema("echo-flags")["properties"]["p"]["uniqueItems"],
        json!(true)
    );
    assert_eq!(
        schema("echo-variant")["properties"]["s"]["oneOf"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        schema("echo-tuple")["properties"]["t"]["prefixItems"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        schema("echo-char")["properties"]["c"]["maxLength"],
        json!(1)
    );
}

#[test]
fn functions_taking_resources_are_skipped_with_a_reason() {
    let sb = sandbox();
    let tb = sb.load_file(&component("testbed")).unwrap();
    let bump = tb
        .exports
        .skipped
        .iter()
        .find(|s| s.name == "bump")
        .expect("bump is skipped");
    assert!(bump.reason.contains("resource"), "{}", bump.reason);
    assert!(tb.exports.function("bump").is_none());
}

/// A component the compiled-code cache already holds is described from
/// its code, without reading its file (the skill loader does so when the
/// file's stamp says it is unchanged); the code must describe exactly what
/// its bytes do, functions, types, skipped exports and all.
#[test]
fn a_component_reads_the_same_from_its_bytes_as_from_its_code() {
    let sb = sandbox();
    let guests = [
        "testbed",
        "text",
        "files",
        "csv",
        "json",
        "web",
        "hello_kit",
        "escape_kit",
        "release-check",
    ];
    for name in guests {
        let bytes = std::fs::read(component(name)).unwrap();
        let from_bytes = skillbox_sandbox::schema::read_exports_from_binary(&bytes).unwrap();
        let from_code = sb.load_bytes(&bytes).unwrap().exports.clone();
        assert!(
            !from_bytes.functions.is_empty() || from_bytes.is_command,
            "{name} serves nothing"
        );
        assert_eq!(
            format!("{from_bytes:?}"),
            format!("{from_code:?}"),
            "{name}"
        );
    }
}
