//! Components from other toolchains: a Python tool built by componentize-py
//! and a JavaScript tool built by componentize-js (which imports wasi:http,
//! as every componentize-js component does). Both load, list their tools
//! with exact schemas and run, with no SDK of this host's.
//!
//! This crate's build script builds them (`scripts/build-foreign`); CI
//! installs both toolchains and sets SKILLBOX_REQUIRE_FOREIGN=1, so a
//! missing toolchain fails the build there instead of skipping.

use serde_json::json;
use skillbox_e2e::{Run, skillbox};

/// The folder of built foreign components, or `None` (with a message) when
/// a toolchain is missing on a developer's machine.
fn foreign() -> Option<&'static std::path::Path> {
    let dir = skillbox_e2e::foreign_components();
    if dir.is_none() {
        eprintln!("skipping: a foreign toolchain was missing when the tests were built");
    }
    dir
}

fn inspect(path: &std::path::Path) -> serde_json::Value {
    let r: Run = skillbox().arg("inspect").arg(path).output().unwrap().into();
    assert_eq!(r.code, 0, "{r:?}");
    r.json()
}

fn call(path: &std::path::Path, function: &str, args: serde_json::Value) -> Run {
    skillbox()
        .args(["call", "--component"])
        .arg(path)
        .args([function, "--args", &args.to_string()])
        .output()
        .unwrap()
        .into()
}

#[test]
fn a_python_component_from_componentize_py_is_a_typed_tool() {
    let Some(dir) = foreign() else { return };
    let wasm = dir.join("wordcount.wasm");
    let tools = inspect(&wasm)["tools"].clone();
    assert_eq!(tools[0]["name"], "count-words");
    assert_eq!(
        tools[0]["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "min-length": {"anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": 255},
                    {"type": "null"}
                ]}
            },
            "required": ["text"],
            "additionalProperties": false
        })
    );
    let r = call(
        &wasm,
        "count-words",
        json!({"text": "the quick brown fox\njumps over", "min-length": 4}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.json(),
        json!({"words": 4, "lines": 2, "longest": "quick"})
    );
    let bad = call(
        &wasm,
        "count-words",
        json!({"text": "x", "min-length": 300}),
    );
    assert_eq!(bad.code, 1, "{bad:?}");
    bad.stderr_says(&["invalid arguments"]);
}

#[test]
fn a_javascript_component_importing_wasi_http_loads_and_runs() {
    let Some(dir) = foreign() else { return };
    let wasm = dir.join("slug.wasm");
    let bytes = std::fs::read(&wasm).unwrap();
    let imports_http = bytes
        .windows(b"wasi:http/outgoing-handler".len())
        .any(|w| w == b"wasi:http/outgoing-handler");
    assert!(imports_http, "componentize-js components import wasi:http");
    let tools = inspect(&wasm)["tools"].clone();
    assert_eq!(tools[0]["name"], "slugify");
    assert_eq!(
        tools[0]["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "max-length": {"anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": 4294967295u64},
                    {"type": "null"}
                ]}
            },
            "required": ["title"],
            "additionalProperties": false
        })
    );
    let r = call(
        &wasm,
        "slugify",
        json!({"title": "Hello, World! A Title", "max-length": 11}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json(), json!("hello-world"));
}
