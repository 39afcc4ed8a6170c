//! The bundled guest tools against real files, through the real binary.

use serde_json::json;
use skillbox_e2e::{call, examples, workspace};

#[test]
fn count_lines_counts_a_final_line_without_newline() {
    let ws = workspace(&[("a.txt", "one\ntwo\nthree")]);
    let out = call(
        "text",
        "count-lines",
        &json!({"path": "a.txt"}),
        &["--workspace", ws.path().to_str().unwrap()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.json(),
        json!({"path": "a.txt", "lines": 3, "bytes": 13})
    );
}

#[test]
fn read_lines_pages_and_says_how_to_continue() {
    let out = call(
        "text",
        "read-lines",
        &json!({"path": "logs/app.log", "start": 10, "count": 3}),
        &["--workspace", &examples()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let page = out.json();
    let numbers: Vec<u64> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![10, 11, 12]);
    assert_eq!(page["total-lines"], 1200);
    assert_eq!(page["next-start"], 13);
    assert!(
        page["note"].as_str().unwrap().contains("start=13"),
        "{page}"
    );
}

#[test]
fn read_lines_past_the_end_says_how_long_the_file_is() {
    let ws = workspace(&[("a.txt", "x\ny\n")]);
    let out = call(
        "text",
        "read-lines",
        &json!({"path": "a.txt", "start": 50}),
        &["--workspace", ws.path().to_str().unwrap()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["lines"], json!([]));
    assert!(
        out.json()["note"]
            .as_str()
            .unwrap()
            .contains("only 2 lines")
    );
}

#[test]
fn grep_finds_matches_with_context_and_counts_all() {
    let out = call(
        "text",
        "grep",
        &json!({"path": "logs/app.log", "pattern": "error", "ignore-case": true, "max-matches": 2, "context": 1}),
        &["--workspace", &examples()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let result = out.json();
    assert_eq!(result["total-matches"], 5);
    assert_eq!(result["truncated"], true);
    let first = &result["matches"][0];
    assert_eq!(first["line"], 311);
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .contains("db pool exhausted")
    );
    assert_eq!(first["before"][0]["number"], 310);
    assert_eq!(first["after"][0]["number"], 312);
    assert!(result["note"].as_str().unwrap().contains("5 lines match"));
}

#[test]
fn grep_rejects_a_bad_pattern_clearly() {
    let out = call(
        "text",
        "grep",
        &json!({"path": "logs/app.log", "pattern": "(unclosed"}),
        &["--workspace", &examples()],
    );
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("`pattern` is not a valid regular expression"),
        "{}",
        out.stderr
    );
}

#[test]
fn tail_returns_the_last_lines_and_survives_invalid_utf8() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("bin.log"), b"ok\n\xff\xfe broken\nlast\n").unwrap();
    let out = call(
        "text",
        "tail",
        &json!({"path": "bin.log", "lines": 2}),
        &["--workspace", ws.path().to_str().unwrap()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = &out.json()["lines"];
    assert_eq!(lines[0]["number"], 2);
    assert!(lines[0]["text"].as_str().unwrap().contains("broken"));
    assert_eq!(lines[1]["text"], "last");
}

#[test]
fn a_missing_file_is_a_tool_error_that_says_where_to_look() {
    let out = call(
        "text",
        "count-lines",
        &json!({"path": "nope.log"}),
        &["--workspace", &examples()],
    );
    assert_eq!(out.code, 1);
    out.stderr_says(&["cannot open `nope.log`"]);
    out.stderr_says(&["relative paths are inside /workspace"]);
    assert!(
        !out.stderr.contains(&examples()),
        "host path leaked: {}",
        out.stderr
    );
}

#[test]
fn list_filters_by_glob_depth_and_count() {
    let ws = workspace(&[
        ("a.log", "1"),
        ("b.txt", "2"),
        ("sub/c.log", "3"),
        ("sub/deeper/d.log", "4"),
    ]);
    let dir = ws.path().to_str().unwrap();
    let out = call(
        "files",
        "list",
        &json!({"glob": "*.log"}),
        &["--workspace", dir],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let paths: Vec<String> = out.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["a.log", "sub/c.log", "sub/deeper/d.log"]);

    let shallow = call(
        "files",
        "list",
        &json!({"glob": "*.log", "max-depth": 1}),
        &["--workspace", dir],
    )
    .json();
    assert_eq!(shallow["entries"].as_array().unwrap().len(), 1);

    let capped = call(
        "files",
        "list",
        &json!({"max-entries": 2}),
        &["--workspace", dir],
    )
    .json();
    assert_eq!(capped["entries"].as_array().unwrap().len(), 2);
    assert_eq!(capped["truncated"], true);
    assert!(capped["total-matched"].as_u64().unwrap() > 2);
    assert!(capped["note"].as_str().unwrap().contains("max-entries"));
}

#[test]
fn list_filters_by_modification_time_and_reports_size() {
    let ws = workspace(&[("old.txt", "old"), ("new.txt", "newer")]);
    let old = std::fs::File::options()
        .write(true)
        .open(ws.path().join("old.txt"))
        .unwrap();
    old.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000))
        .unwrap();
    let out = call(
        "files",
        "list",
        &json!({"modified-after": "2025-01-01"}),
        &["--workspace", ws.path().to_str().unwrap()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let entries = out.json()["entries"].clone();
    assert_eq!(entries.as_array().unwrap().len(), 1, "{entries}");
    assert_eq!(entries[0]["path"], "new.txt");
    assert_eq!(entries[0]["size"], 5);
    assert_eq!(entries[0]["kind"], "file");

    let bad = call(
        "files",
        "list",
        &json!({"modified-after": "last week"}),
        &["--workspace", ws.path().to_str().unwrap()],
    );
    assert_eq!(bad.code, 1);
    bad.stderr_says(&["RFC 3339"]);
}

#[test]
fn list_reports_symlinks_without_following_them() {
    let ws = workspace(&[("real/x.txt", "x")]);
    std::os::unix::fs::symlink("/etc", ws.path().join("etc-link")).unwrap();
    let out = call(
        "files",
        "list",
        &json!({}),
        &["--workspace", ws.path().to_str().unwrap()],
    );
    let entries = out.json()["entries"].clone();
    let link = entries
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "etc-link")
        .unwrap()
        .clone();
    assert_eq!(link["kind"], "symlink");
    assert!(!entries.to_string().contains("passwd"));
}

#[test]
fn query_runs_jq_filters_on_files_and_strings() {
    let out = call(
        "json",
        "query",
        &json!({"filter": "[.deploys[] | select(.status == \"rolled_back\") | .version]", "path": "data/deploys.json"}),
        &["--workspace", &examples()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["results"], json!(["[\"2.3.1\"]"]));

    let inline = call(
        "json",
        "query",
        &json!({"filter": ".[]", "input": "[1,2,3,4]", "max-results": 2}),
        &[],
    );
    let result = inline.json();
    assert_eq!(result["results"], json!(["1", "2"]));
    assert_eq!(result["total"], 4);
    assert_eq!(result["truncated"], true);
}

#[test]
fn query_explains_bad_filters_and_inputs() {
    let bad_filter = call(
        "json",
        "query",
        &json!({"filter": ".[", "input": "[]"}),
        &[],
    );
    assert_eq!(bad_filter.code, 1);
    assert!(
        bad_filter
            .stderr
            .contains("`filter` is not a valid jq filter"),
        "{}",
        bad_filter.stderr
    );
    let bad_input = call(
        "json",
        "query",
        &json!({"filter": ".", "input": "{nope"}),
        &[],
    );
    bad_input.stderr_says(&["not valid JSON"]);
    let both = call(
        "json",
        "query",
        &json!({"filter": ".", "input": "1", "path": "x.json"}),
        &[],
    );
    both.stderr_says(&["exactly one of `path`"]);
}

#[test]
fn summarize_infers_types_nulls_and_ranges() {
    let out = call(
        "csv",
        "summarize",
        &json!({"path": "data/orders.csv"}),
        &["--workspace", &examples()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let summary = out.json();
    assert_eq!(summary["rows-scanned"], 200);
    let column = |name: &str| {
        summary["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(column("order_id")["inferred-type"], "integer");
    assert_eq!(column("order_id")["min"], "1001");
    assert_eq!(column("order_id")["max"], "1200");
    assert_eq!(column("order_id")["distinct"], 200);
    assert_eq!(column("amount_eur")["inferred-type"], "float");
    assert_eq!(column("amount_eur")["nulls"], 4);
    assert_eq!(column("region")["inferred-type"], "text");
    assert_eq!(column("region")["distinct"], 4);
    assert_eq!(column("paid")["inferred-type"], "boolean");
    assert!(column("items")["mean"].as_f64().unwrap() > 1.0);
}

#[test]
fn summarize_bounds_the_rows_it_scans() {
    let out = call(
        "csv",
        "summarize",
        &json!({"path": "data/orders.csv", "max-rows": 10}),
        &["--workspace", &examples()],
    );
    let summary = out.json();
    assert_eq!(summary["rows-scanned"], 10);
    assert_eq!(summary["truncated"], true);
    assert!(summary["note"].as_str().unwrap().contains("max-rows"));
}
