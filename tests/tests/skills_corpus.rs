//! A corpus of valid and invalid skills, each with the exact diagnostics
//! `skillbox skills check` must give, and its verdict compared with the
//! public reference validator (skills-ref) where the two mean to agree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use skillbox_e2e::{Run, component, run};

/// How skills-ref's verdict relates to ours for a case.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reference {
    /// Same verdict expected.
    Agrees,
    /// A documented, deliberate difference (see docs/skills-check.md).
    Differs,
    /// skills-ref does not read skillbox.yaml.
    NotApplicable,
}

struct Case {
    folder: &'static str,
    files: Vec<(&'static str, Vec<u8>)>,
    /// Expected `(severity, rule, line)` of every diagnostic.
    expected: Vec<(&'static str, &'static str, Option<u64>)>,
    reference: Reference,
}

fn skill_md(front: &str, body: &str) -> Vec<u8> {
    format!("---\n{front}---\n{body}").into_bytes()
}

fn case(
    folder: &'static str,
    front: &str,
    expected: Vec<(&'static str, &'static str, Option<u64>)>,
    reference: Reference,
) -> Case {
    Case {
        folder,
        files: vec![("SKILL.md", skill_md(front, "# Steps\n1. Do it.\n"))],
        expected,
        reference,
    }
}

const DESC: &str = "description: Summarize CSV files and answer questions about their columns; use when a user asks what is in a data file.\n";

fn err(rule: &'static str, line: Option<u64>) -> (&'static str, &'static str, Option<u64>) {
    ("error", rule, line)
}

fn warn(rule: &'static str, line: Option<u64>) -> (&'static str, &'static str, Option<u64>) {
    ("warning", rule, line)
}

fn corpus() -> Vec<Case> {
    use Reference::*;
    let long_desc = format!("description: {}\n", "d".repeat(1024));
    let too_long_desc = format!("description: Use when asked. {}\n", "d".repeat(1020));
    let name64 = "a".repeat(64);
    let name65 = "a".repeat(65);
    let text_wasm = std::fs::read(component("text")).expect("text.wasm is built");
    let mut cases = vec![
        case("minimal", &format!("name: minimal\n{DESC}"), vec![], Agrees),
        case(
            "full",
            &format!(
                "name: full\n{DESC}license: Apache-2.0\ncompatibility: Needs a workspace.\nmetadata:\n  version: \"1.0\"\n  author: me\nallowed-tools: Read Grep\n"
            ),
            vec![],
            Agrees,
        ),
        Case {
            folder: "bom-crlf",
            files: vec![(
                "SKILL.md",
                format!(
                    "\u{feff}---\r\nname: bom-crlf\r\n{}---\r\nBody\r\n",
                    DESC.replace('\n', "\r\n")
                )
                .into_bytes(),
            )],
            expected: vec![],
            reference: Differs,
        },
        case(
            "host-fields",
            &format!(
                "name: host-fields\n{DESC}argument-hint: \"[file]\"\nuser-invocable: true\ndisable-model-invocation: false\n"
            ),
            vec![],
            Differs,
        ),
        case(
            "unknown-key",
            &format!("name: unknown-key\n{DESC}colour: blue\n"),
            vec![warn("unknown-field", Some(4))],
            Differs,
        ),
        case(
            "long-description",
            &format!("name: long-description\n{long_desc}"),
            vec![],
            Agrees,
        ),
        Case {
            folder: Box::leak(name64.clone().into_boxed_str()),
            files: vec![(
                "SKILL.md",
                skill_md(&format!("name: {name64}\n{DESC}"), "x\n"),
            )],
            expected: vec![],
            reference: Agrees,
        },
        Case {
            folder: "no-frontmatter",
            files: vec![("SKILL.md", b"# Just markdown\n".to_vec())],
            expected: vec![err("frontmatter-missing", Some(1))],
            reference: Agrees,
        },
        Case {
            folder: "unterminated",
            files: vec![(
                "SKILL.md",
                format!("---\nname: unterminated\n{DESC}# Body\n").into_bytes(),
            )],
            expected: vec![err("frontmatter-unterminated", Some(1))],
            reference: Agrees,
        },
        case(
            "not-mapping",
            "- name\n- description\n",
            vec![err("frontmatter-not-mapping", Some(2))],
            Agrees,
        ),
        case(
            "empty-frontmatter",
            "",
            vec![err("frontmatter-not-mapping", Some(2))],
            Agrees,
        ),
        case(
            "duplicate-key",
            &format!("name: duplicate-key\n{DESC}name: duplicate-key\n"),
            vec![err("yaml-duplicate-key", Some(4))],
            Agrees,
        ),
        case(
            "yaml-syntax",
            "name: yaml-syntax\ndescription: [unclosed\n",
            vec![err("yaml-syntax", Some(4))],
            Agrees,
        ),
        case(
            "alias-bomb",
            &alias_bomb(),
            vec![err("yaml-alias-bomb", None)],
            Agrees,
        ),
        case(
            "name-missing",
            DESC,
            vec![err("name-missing", Some(2))],
            Agrees,
        ),
        case(
            "description-missing",
            "name: description-missing\n",
            vec![err("description-missing", Some(2))],
            Agrees,
        ),
        case(
            "Upper",
            &format!("name: Upper\n{DESC}"),
            vec![err("name-format", Some(2))],
            Agrees,
        ),
        case(
            "-leading",
            &format!("name: -leading\n{DESC}"),
            vec![err("name-format", Some(2))],
            Agrees,
        ),
        case(
            "double--hyphen",
            &format!("name: double--hyphen\n{DESC}"),
            vec![err("name-format", Some(2))],
            Agrees,
        ),
        case(
            "under_score",
            &format!("name: under_score\n{DESC}"),
            vec![err("name-format", Some(2))],
            Agrees,
        ),
        case(
            "café",
            &format!("name: café\n{DESC}"),
            vec![err("name-format", Some(2))],
            Differs,
        ),
        case(
            "folder-a",
            &format!("name: folder-b\n{DESC}"),
            vec![err("name-folder-mismatch", Some(2))],
            Agrees,
        ),
        Case {
            folder: Box::leak(name65.clone().into_boxed_str()),
            files: vec![(
                "SKILL.md",
                skill_md(&format!("name: {name65}\n{DESC}"), "x\n"),
            )],
            expected: vec![err("name-length", Some(2))],
            reference: Agrees,
        },
        case(
            "description-long",
            &format!("name: description-long\n{too_long_desc}"),
            vec![err("description-length", Some(3))],
            Agrees,
        ),
        case(
            "description-blank",
            "name: description-blank\ndescription: \"   \"\n",
            vec![err("description-empty", Some(3))],
            Agrees,
        ),
        case(
            "compat-long",
            &format!(
                "name: compat-long\n{DESC}compatibility: {}\n",
                "c".repeat(501)
            ),
            vec![err("compatibility-length", Some(4))],
            Agrees,
        ),
        case(
            "name-list",
            &format!("name: [name-list]\n{DESC}"),
            vec![err("field-type", Some(2))],
            Agrees,
        ),
        case(
            "123",
            &format!("name: 123\n{DESC}"),
            vec![err("field-type", Some(2))],
            Differs,
        ),
        case(
            "metadata-nested",
            &format!("name: metadata-nested\n{DESC}metadata:\n  a:\n    b: c\n"),
            vec![err("metadata-type", Some(4))],
            Differs,
        ),
        case(
            "bool-typed",
            &format!("name: bool-typed\n{DESC}user-invocable: \"yes\"\n"),
            vec![err("field-type", Some(4))],
            Agrees,
        ),
        Case {
            folder: "oversize",
            files: vec![(
                "SKILL.md",
                skill_md(&format!("name: oversize\n{DESC}"), &"x".repeat(300 * 1024)),
            )],
            expected: vec![err("file-too-large", None)],
            reference: Differs,
        },
        Case {
            folder: "bad-utf8",
            files: vec![(
                "SKILL.md",
                [
                    b"---\nname: bad-utf8\n".as_slice(),
                    DESC.as_bytes(),
                    b"---\nbad \xff\xfe here\n",
                ]
                .concat(),
            )],
            expected: vec![err("encoding", Some(5))],
            reference: Agrees,
        },
        case(
            "short-desc",
            "name: short-desc\ndescription: Does stuff.\n",
            vec![warn("description-quality", None)],
            Agrees,
        ),
    ];
    // skillbox.yaml cases: skills-ref does not read the manifest.
    let manifest_case =
        |folder: &'static str, manifest: &str, extra: Vec<(&'static str, Vec<u8>)>, expected| {
            let mut files = vec![
                (
                    "SKILL.md",
                    skill_md(&format!("name: {folder}\n{DESC}"), "x\n"),
                ),
                ("skillbox.yaml", manifest.as_bytes().to_vec()),
            ];
            files.extend(extra);
            Case {
                folder,
                files,
                expected,
                reference: NotApplicable,
            }
        };
    let tool = |name: &str| {
        format!(
            "tools:\n  - component: tools/text.wasm\n    functions:\n      {name}:\n        description: Count lines of a file. Use before reading it. Not for folders.\n"
        )
    };
    cases.extend([
        manifest_case("manifest-ok", &tool("count-lines"), vec![("tools/text.wasm", text_wasm.clone())], vec![]),
        manifest_case("manifest-unknown-key", "tool: []\n", vec![], vec![err("manifest-schema", Some(1))]),
        manifest_case("manifest-missing", &tool("count-lines"), vec![], vec![err("manifest-component-missing", Some(2))]),
        manifest_case("manifest-escape", "tools:\n  - component: ../text.wasm\n", vec![], vec![err("manifest-path", Some(2))]),
        manifest_case("manifest-not-wasm", &tool("count-lines"), vec![("tools/text.wasm", b"not wasm".to_vec())], vec![err("manifest-not-component", Some(2))]),
        manifest_case("manifest-unknown-function", &tool("frobnicate"), vec![("tools/text.wasm", text_wasm.clone())], vec![err("tool-unknown-function", None)]),
        manifest_case(
            "manifest-unknown-param",
            "tools:\n  - component: tools/text.wasm\n    functions:\n      tail:\n        description: Last lines of a file. Use for recent events. Not for search.\n        params:\n          file: wrong name\n",
            vec![("tools/text.wasm", text_wasm.clone())],
            vec![err("tool-unknown-param", None)],
        ),
        manifest_case(
            "manifest-script-not-command",
            "scripts:\n  - component: tools/text.wasm\n    usage: text [FILE]\n",
            vec![("tools/text.wasm", text_wasm.clone())],
            vec![err("script-not-command", None)],
        ),
        manifest_case("manifest-bad-env", "grants:\n  env: [github_token]\n", vec![], vec![err("manifest-grant", Some(2))]),
        manifest_case(
            "manifest-all-exports",
            "tools:\n  - component: tools/text.wasm\n",
            vec![("tools/text.wasm", text_wasm)],
            vec![warn("tool-description", None); 4],
        ),
    ]);
    cases
}

fn alias_bomb() -> String {
    let mut yaml =
        String::from("name: alias-bomb\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        yaml.push_str(&format!(
            "x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    yaml.push_str(DESC);
    yaml
}

fn write_corpus(root: &Path) -> Vec<(PathBuf, Case)> {
    corpus()
        .into_iter()
        .map(|case| {
            let dir = root.join(case.folder);
            for (rel, bytes) in &case.files {
                let path = dir.join(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, bytes).unwrap();
            }
            (dir, case)
        })
        .collect()
}

#[test]
fn every_case_gets_exactly_its_diagnostics() {
    let root = tempfile::tempdir().unwrap();
    let cases = write_corpus(root.path());
    let mut argv = vec![
        "skills".to_string(),
        "check".to_string(),
        "--json".to_string(),
    ];
    argv.extend(cases.iter().map(|(d, _)| d.to_string_lossy().into_owned()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = run(&argv);
    assert_eq!(out.code, 1, "some cases are invalid: {}", out.stderr);
    let report = out.json();

    let mut found: BTreeMap<String, Vec<(String, String, Option<u64>)>> = BTreeMap::new();
    for d in report["diagnostics"].as_array().unwrap() {
        let path = PathBuf::from(d["path"].as_str().unwrap());
        let folder = path
            .strip_prefix(root.path())
            .unwrap()
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        found.entry(folder).or_default().push((
            d["severity"].as_str().unwrap().to_string(),
            d["rule"].as_str().unwrap().to_string(),
            d["line"].as_u64(),
        ));
    }
    let mut failures = Vec::new();
    for (_, case) in &cases {
        let mut want: Vec<(String, String, Option<u64>)> = case
            .expected
            .iter()
            .map(|(s, r, l)| (s.to_string(), r.to_string(), *l))
            .collect();
        let mut got = found.remove(case.folder).unwrap_or_default();
        want.sort();
        got.sort();
        if want != got {
            failures.push(format!("{}: expected {want:?}, got {got:?}", case.folder));
        }
        let valid = report["skills"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["path"].as_str().unwrap().ends_with(case.folder))
            .map(|s| s["valid"].as_bool().unwrap());
        let expect_valid = !case.expected.iter().any(|(s, _, _)| *s == "error");
        if valid != Some(expect_valid) {
            failures.push(format!(
                "{}: verdict {valid:?}, expected {expect_valid}",
                case.folder
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    // Messages say what to do; none carries a stack trace.
    for d in report["diagnostics"].as_array().unwrap() {
        let message = d["message"].as_str().unwrap();
        assert!(
            !message.contains("panicked") && message.len() > 10,
            "{message}"
        );
    }
}

#[test]
fn check_lines_read_path_line_severity_rule_message() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("folder-a");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        skill_md(&format!("name: folder-b\n{DESC}"), "x\n"),
    )
    .unwrap();
    let out = run(&["skills", "check", dir.to_str().unwrap()]);
    assert_eq!(out.code, 1);
    let expected = format!(
        "{}:2: error: name-folder-mismatch: `name` is \"folder-b\" but the folder is \"folder-a\"; they must be equal (rename one)",
        dir.join("SKILL.md").display()
    );
    assert_eq!(out.stdout.trim(), expected);
}

#[test]
fn check_exits_zero_for_the_bundled_skills_and_two_for_usage() {
    let bundled = skillbox_e2e::repo().join("skills");
    let out = run(&["skills", "check", bundled.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "", "the bundled skills have no findings");
    assert!(
        out.stderr
            .contains("checked 5 skill(s): 5 valid, 0 invalid"),
        "{}",
        out.stderr
    );
    assert_eq!(run(&["skills", "check", "/no/such/folder"]).code, 2);
    // Without a path it checks the current folder, as `build` builds it.
    let here: Run = skillbox_e2e::skillbox()
        .args(["skills", "check"])
        .current_dir(bundled.join("log-inspect"))
        .output()
        .unwrap()
        .into();
    assert_eq!(here.code, 0, "{here:?}");
    here.stderr_says(&["checked 1 skill(s): 1 valid"]);
}

/// `python3 -m skills_ref.cli validate DIR`, if skills-ref is installed.
fn skills_ref(dir: &Path) -> Option<bool> {
    let out = Command::new("python3")
        .args(["-m", "skills_ref.cli", "validate"])
        .arg(dir)
        .output()
        .ok()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named") {
        return None;
    }
    Some(out.status.success())
}

#[test]
fn verdicts_agree_with_the_reference_validator() {
    let root = tempfile::tempdir().unwrap();
    let cases = write_corpus(root.path());
    if skills_ref(&cases[0].0).is_none() {
        assert!(
            std::env::var_os("SKILLBOX_REQUIRE_SKILLS_REF").is_none(),
            "skills-ref is required here (pip install skills-ref)"
        );
        eprintln!("skills-ref is not installed; skipping the comparison (pip install skills-ref)");
        return;
    }
    let mut disagreements = Vec::new();
    let mut differences = Vec::new();
    for (dir, case) in &cases {
        if case.reference == Reference::NotApplicable {
            continue;
        }
        let ours = !case.expected.iter().any(|(s, _, _)| *s == "error");
        let theirs = skills_ref(dir).unwrap();
        match case.reference {
            Reference::Agrees if ours != theirs => disagreements.push(format!(
                "{}: skillbox valid={ours}, skills-ref valid={theirs}",
                case.folder
            )),
            Reference::Differs if ours == theirs => differences.push(format!(
                "{}: marked as a deliberate difference, but both say valid={ours}",
                case.folder
            )),
            _ => {}
        }
    }
    assert!(disagreements.is_empty(), "\n{}", disagreements.join("\n"));
    assert!(differences.is_empty(), "\n{}", differences.join("\n"));
    // The bundled skills are valid for the reference validator too.
    for skill in ["log-inspect", "data-peek", "report-digest", "release-check"] {
        let dir = skillbox_e2e::repo().join("skills").join(skill);
        assert_eq!(skills_ref(&dir), Some(true), "{skill}");
    }
}
