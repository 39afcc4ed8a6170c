//! The command-line contract: output, exit codes and error text.

use serde_json::json;
use skillbox_e2e::{call, component, repo, run, skillbox, workspace};

fn path(name: &str) -> String {
    component(name).to_string_lossy().into_owned()
}

#[test]
fn call_prints_json_and_exits_zero() {
    let out = call("testbed", "noop", &json!({}), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json(), json!(42));
}

#[test]
fn a_tool_error_exits_one_with_one_readable_line() {
    let out = call(
        "testbed",
        "fail",
        &json!({"message": "input is empty"}),
        &[],
    );
    assert_eq!(out.code, 1);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr.trim(),
        "error: the tool reported an error: input is empty"
    );
}

#[test]
fn limits_are_set_from_flags() {
    let out = call(
        "testbed",
        "spin",
        &json!({}),
        &["--timeout-ms", "200", "--fuel", "100000000000000"],
    );
    assert_eq!(out.code, 1);
    out.stderr_says(&["timeout", "200 ms"]);

    let out = call(
        "testbed",
        "grow-memory",
        &json!({"mib": 40}),
        &["--memory-mib", "16"],
    );
    out.stderr_says(&["memory limit", "16 MiB"]);

    let out = call(
        "testbed",
        "burn",
        &json!({"iterations": 1u64 << 40}),
        &["--fuel", "1000"],
    );
    out.stderr_says(&["out of fuel"]);

    let out = call(
        "testbed",
        "big-string",
        &json!({"bytes": 5000}),
        &["--max-output-bytes", "1000"],
    );
    out.stderr_says(&["output limit", "result"]);
}

#[test]
fn invalid_arguments_exit_one_and_name_the_rule() {
    let out = call("testbed", "echo-enum", &json!({"c": "purple"}), &[]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("`c` must be one of red, green, blue; got \"purple\""),
        "{}",
        out.stderr
    );
    out.stderr_says(&["Nothing was run"]);
}

#[test]
fn usage_errors_exit_two() {
    let testbed = path("testbed");
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "call",
            "--component",
            &testbed,
            "noop",
            "--args",
            "{not json",
        ],
        vec!["call", "--component", "missing.wasm", "noop"],
        vec!["call", "--component", &testbed, "noop", "--allow-write"],
        vec![
            "call",
            "--component",
            &testbed,
            "noop",
            "--workspace",
            "/definitely/not/here",
        ],
        vec![
            "call",
            "--component",
            &testbed,
            "noop",
            "--memory-mib",
            "99999",
        ],
        vec!["call", "--component", &testbed, "noop", "--bogus"],
        vec!["inspect"],
        vec!["frobnicate"],
    ];
    for argv in cases {
        let out = run(&argv);
        assert_eq!(out.code, 2, "{argv:?} exited {}: {}", out.code, out.stderr);
        assert!(!out.stderr.is_empty(), "{argv:?} said nothing");
        assert!(!out.stderr.contains("panicked"), "{argv:?}: {}", out.stderr);
    }
}

#[test]
fn a_file_that_is_not_a_component_is_refused_clearly() {
    let ws = workspace(&[("fake.wasm", "definitely not wasm")]);
    let fake = ws.path().join("fake.wasm");
    let out = run(&["call", "--component", fake.to_str().unwrap(), "noop"]);
    assert_eq!(out.code, 1);
    out.stderr_says(&["not WebAssembly"]);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
}

#[test]
fn every_command_has_help() {
    for argv in [
        vec!["--help"],
        vec!["call", "--help"],
        vec!["inspect", "--help"],
        vec!["run-script", "--help"],
        vec!["bench", "--help"],
    ] {
        let out = run(&argv);
        assert_eq!(out.code, 0, "{argv:?}");
        assert!(out.stdout.contains("Usage"), "{argv:?}: {}", out.stdout);
    }
    let call_help = run(&["call", "--help"]).stdout;
    for flag in [
        "--workspace",
        "--allow-write",
        "--timeout-ms",
        "--fuel",
        "--memory-mib",
        "--args",
    ] {
        assert!(call_help.contains(flag), "call --help lacks {flag}");
    }
}

#[test]
fn inspect_prints_tools_with_input_schemas() {
    let out = run(&["inspect", &path("text")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc = out.json();
    let names: Vec<&str> = doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["count-lines", "grep", "read-lines", "tail"]);
    let grep = &doc["tools"][1];
    assert_eq!(grep["inputSchema"]["required"], json!(["path", "pattern"]));
    assert_eq!(
        grep["inputSchema"]["properties"]["max-matches"]["anyOf"][0]["maximum"],
        json!(u32::MAX)
    );
    assert_eq!(doc["command"], false);
    assert!(doc["digest"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn inspect_knows_a_command_component() {
    let doc = run(&["inspect", &path("release-check")]).json();
    assert_eq!(doc["command"], true);
    assert_eq!(doc["tools"], json!([]));
}

fn release_check(project: &std::path::Path, args: &[&str]) -> skillbox_e2e::Run {
    let rc = path("release-check");
    let mut argv = vec![
        "run-script",
        "--component",
        rc.as_str(),
        "--workspace",
        project.to_str().unwrap(),
        "--",
    ];
    argv.extend_from_slice(args);
    run(&argv)
}

#[test]
fn release_check_blocks_on_a_stale_changelog_and_todos() {
    let out = release_check(&repo().join("examples/release-project"), &[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("release-check for version 2.4.0 (from Cargo.toml)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("CHANGELOG.md: the top entry is 2.3.2, but Cargo.toml says 2.4.0"),
        "{}",
        out.stdout
    );
    out.stdout_says(&["src/main.rs:2: TODO"]);
    out.stdout_says(&["RESULT: BLOCKED"]);
    out.stdout_says(&["no list of changed files was given"]);
}

#[test]
fn release_check_passes_a_ready_project_and_reads_changed_files() {
    let ws = workspace(&[
        (
            "package.json",
            r#"{"name": "web", "dependencies": {"x": {"version": "9"}}, "version": "1.2.0"}"#,
        ),
        (
            "CHANGELOG.md",
            "# Changes\n\n## [1.2.0] - 2026-11-20\n\n- Faster.\n",
        ),
        ("src/app.js", "export const ok = true;\n"),
        ("src/old.js", "// TODO: this file did not change\n"),
    ]);
    let out = release_check(ws.path(), &["src/app.js"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    out.stdout_says(&["version 1.2.0 read from package.json"]);
    out.stdout_says(&["top entry is 1.2.0"]);
    assert!(
        out.stdout
            .contains("no TODO or FIXME in the 1 changed files"),
        "{}",
        out.stdout
    );
    out.stdout_says(&["RESULT: READY"]);

    let json_out = release_check(ws.path(), &["--json", "src/app.js"]);
    let report: serde_json::Value = serde_json::from_str(&json_out.stdout).unwrap();
    assert_eq!(report["ready"], true);
    assert_eq!(report["version"], "1.2.0");
}

#[test]
fn release_check_reads_changed_files_from_stdin() {
    let ws = workspace(&[
        (
            "Cargo.toml",
            "[package]\nname = \"x\"\nversion = \"0.3.0\"\n",
        ),
        ("CHANGELOG.md", "## Unreleased\n\n- wip\n"),
        ("src/lib.rs", "// FIXME: unsafe\n"),
    ]);
    let list = ws.path().join("changed.txt");
    std::fs::write(&list, "src/lib.rs\n").unwrap();
    let rc = path("release-check");
    let out: skillbox_e2e::Run = skillbox()
        .args([
            "run-script",
            "--component",
            &rc,
            "--workspace",
            ws.path().to_str().unwrap(),
            "--stdin",
            list.to_str().unwrap(),
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.stdout_says(&["\"Unreleased\"; rename it to 0.3.0"]);
    out.stdout_says(&["src/lib.rs:1: FIXME"]);
}

#[test]
fn release_check_without_a_workspace_fails_and_says_why() {
    let out = run(&["run-script", "--component", &path("release-check")]);
    // WASI 0.2's exit carries success or failure only, so every failing
    // exit code reaches the host as 1.
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    out.stderr_says(&["--workspace"]);
}

#[test]
fn run_script_refuses_a_non_command_component() {
    let out = run(&["run-script", "--component", &path("testbed")]);
    assert_eq!(out.code, 1);
    out.stderr_says(&["not a command component"]);
}
