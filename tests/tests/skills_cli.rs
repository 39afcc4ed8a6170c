//! `skills list`, `skills tokens` and `call SKILL__FUNCTION` through the
//! real binary, with the bundled skills as the system source.

use serde_json::json;
use skillbox_e2e::{Run, examples, repo, skillbox, workspace};

/// `skillbox` with a private HOME and project folder, so the user's own
/// skills never leak into a test.
fn isolated(args: &[&str]) -> Run {
    let home = tempfile::tempdir().unwrap();
    skillbox()
        .args(args)
        .env("HOME", home.path())
        .current_dir(home.path())
        .output()
        .unwrap()
        .into()
}

/// The entry for `name` in a JSON report's `skills` array.
fn skill_named(doc: &serde_json::Value, name: &str) -> serde_json::Value {
    doc["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no skill {name} in {doc}"))
        .clone()
}

#[test]
fn list_shows_the_bundled_skills_as_a_table_and_json() {
    let out = isolated(&["skills", "list"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("TIER-1"),
        "{}",
        out.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("log-inspect") && l.contains("system") && l.contains("trusted"))
    );

    let doc = isolated(&["skills", "list", "--json"]).json();
    let skills = doc["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 5);
    let release = skills
        .iter()
        .find(|s| s["name"] == "release-check")
        .unwrap();
    assert_eq!(release["scripts"], json!(["release-check"]));
    assert!(release["tier1_tokens"].as_u64().unwrap() > 20);
    assert!(release["digest"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn list_with_an_explicit_source_shadows_and_reports_problems() {
    let extra = workspace(&[
        (
            "log-inspect/SKILL.md",
            "---\nname: log-inspect\ndescription: A replacement log skill; use when testing precedence of explicit sources.\n---\nmine\n",
        ),
        ("broken/SKILL.md", "no frontmatter\n"),
    ]);
    let doc = isolated(&[
        "skills",
        "list",
        "--json",
        "--skills",
        extra.path().to_str().unwrap(),
    ])
    .json();
    let logs = skill_named(&doc, "log-inspect");
    assert_eq!(logs["source"], "explicit");
    let rules: Vec<&str> = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"name-collision"), "{rules:?}");
    assert!(rules.contains(&"frontmatter-missing"), "{rules:?}");
}

#[test]
fn tokens_reports_each_tier_per_skill() {
    let out = isolated(&["skills", "tokens", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc = out.json();
    assert_eq!(doc["tokenizer"], "o200k_base");
    let logs = skill_named(&doc, "log-inspect");
    assert_eq!(logs["tools"].as_array().unwrap().len(), 5);
    assert!(logs["body"].as_u64().unwrap() > 200);
    assert!(
        doc["total"]["tier1"].as_u64().unwrap() < 1000,
        "the resident catalog stays small: {doc}"
    );
    assert_eq!(doc["warnings"], json!([]));
    // The resident tool list per mode, as the server sends it: the lazy
    // list is the host tools alone, the full one adds every skill tool.
    let lazy = doc["resident"]["lazy_2025_11_25"].as_u64().unwrap();
    let all = doc["resident"]["all_and_2026_07_28"].as_u64().unwrap();
    assert!(lazy > doc["total"]["tier1"].as_u64().unwrap(), "{doc}");
    assert!(
        all > lazy + doc["total"]["tools"].as_u64().unwrap() / 2,
        "{doc}"
    );

    let table = isolated(&["skills", "tokens"]);
    assert!(
        table.stdout.lines().any(|l| l.starts_with("TOTAL")),
        "{}",
        table.stdout
    );
}

#[test]
fn call_runs_a_skill_tool_with_its_requested_grants() {
    let out = isolated(&[
        "call",
        "log-inspect__count-lines",
        "--workspace",
        &examples(),
        "--args",
        r#"{"path": "logs/app.log"}"#,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["lines"], 1200);
}

#[test]
fn the_user_grants_at_most_what_the_skill_requests() {
    use skillbox_skill::skill::policy::{UserPolicy, grants};
    use skillbox_skill::skill::source::{Source, SourceKind};
    let catalog = skillbox_skill::skill::Catalog::from_sources(&[Source {
        kind: SourceKind::System,
        root: repo().join("skills"),
        trusted: true,
    }]);
    let ws = workspace(&[]);
    let policy = UserPolicy {
        workspace: Some(ws.path().to_path_buf()),
        allow_write: true,
        allow_env: vec!["HOME".parse().unwrap()],
        ..UserPolicy::default()
    };
    // log-inspect requests `workspace: read`: --allow-write does not widen it.
    let resolved = grants(catalog.get("log-inspect").unwrap(), &policy, None);
    let workspace = resolved
        .grants
        .workspace
        .expect("read access was requested and given");
    assert!(!workspace.writable);
    assert!(
        resolved.grants.env.is_empty(),
        "HOME was allowed but never requested"
    );
    let mount = resolved
        .grants
        .skill_dir
        .expect("the skill folder is mounted");
    assert!(mount.still_at(&repo().join("skills/log-inspect")));

    // Without --workspace nothing is mounted, and the note says why.
    let resolved = grants(
        catalog.get("log-inspect").unwrap(),
        &UserPolicy::default(),
        None,
    );
    assert!(resolved.grants.workspace.is_none());
    assert!(
        resolved.notes[0].contains("--workspace"),
        "{:?}",
        resolved.notes
    );
}

#[test]
fn call_without_the_workspace_explains_the_missing_grant() {
    let out = isolated(&[
        "call",
        "log-inspect__count-lines",
        "--args",
        r#"{"path": "logs/app.log"}"#,
    ]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("note: skill `log-inspect` requests the workspace; none was given"),
        "{}",
        out.stderr
    );
    out.stderr_says(&["cannot open `logs/app.log`"]);
}

#[test]
fn call_names_what_exists_when_the_tool_does_not() {
    let out = isolated(&["call", "log-inspect__nope"]);
    assert_eq!(out.code, 2);
    out.stderr_says(&["log-inspect__grep"]);
    let out = isolated(&["call", "nope__grep"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("(loaded skills: data-peek, log-inspect"),
        "{}",
        out.stderr
    );
    let out = isolated(&["call", "grep"]);
    assert_eq!(out.code, 2);
    out.stderr_says(&["SKILL__FUNCTION"]);
}

#[test]
fn manifest_limits_apply_and_flags_override_them() {
    let skills = workspace(&[
        (
            "spinner/SKILL.md",
            "---\nname: spinner\ndescription: Spins forever; use when testing that manifest limits stop a looping tool.\n---\nx\n",
        ),
        (
            "spinner/skillbox.yaml",
            "tools:\n  - component: tools/testbed.wasm\n    functions:\n      spin:\n        description: Loops forever. Use only in tests. Not for real work.\nlimits:\n  timeout-ms: 300\n  fuel: 100000000000000\n",
        ),
    ]);
    std::fs::create_dir_all(skills.path().join("spinner/tools")).unwrap();
    std::fs::copy(
        skillbox_e2e::component("testbed"),
        skills.path().join("spinner/tools/testbed.wasm"),
    )
    .unwrap();
    let dir = skills.path().to_str().unwrap();
    let out = isolated(&["call", "spinner__spin", "--skills", dir]);
    assert_eq!(out.code, 1);
    out.stderr_says(&["stopped after 300 ms"]);
    let out = isolated(&[
        "call",
        "spinner__spin",
        "--skills",
        dir,
        "--timeout-ms",
        "150",
    ]);
    out.stderr_says(&["stopped after 150 ms"]);
}

/// `skillbox compile` fills an empty cache with every bundled component,
/// and a second run finds them all there: no first call waits for a compile.
#[test]
fn compile_fills_the_cache_ahead_of_time() {
    let cache = tempfile::tempdir().unwrap();
    let compile = || -> Run {
        skillbox()
            .args(["compile", "--json", "--cache"])
            .arg(cache.path().join("components"))
            .output()
            .unwrap()
            .into()
    };
    let first = compile();
    assert_eq!(first.code, 0, "{first:?}");
    let doc: serde_json::Value = serde_json::from_str(&first.stdout).unwrap();
    let rows = doc["components"].as_array().unwrap();
    let bundled = ["log-inspect", "data-peek", "report-digest", "release-check"];
    for skill in bundled {
        assert!(
            rows.iter().any(|r| r["skill"] == skill),
            "{skill} missing: {doc}"
        );
    }
    assert!(
        rows.iter().any(|r| r["outcome"] == "compiled"),
        "an empty cache compiles: {doc}"
    );
    assert!(
        first.stderr.contains("compile: ["),
        "progress on stderr: {first:?}"
    );

    let second = compile();
    assert_eq!(second.code, 0, "{second:?}");
    let doc: serde_json::Value = serde_json::from_str(&second.stdout).unwrap();
    let rows = doc["components"].as_array().unwrap();
    assert!(
        rows.iter().all(|r| r["outcome"] == "cached"),
        "everything comes from the cache: {doc}"
    );
}

/// An installed binary (no source checkout around it) finds the bundled
/// skills in the data folder `scripts/install` fills.
#[test]
fn an_installed_binary_finds_the_bundled_skills_in_the_data_folder() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin/skillbox");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(skillbox_e2e::skillbox_bin(), &bin).unwrap();
    let data = home.path().join("data");
    let skill = data.join("skillbox/skills/installed-one");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: installed-one\ndescription: A skill the install put in the data folder. Use in tests only.\n---\nBody.\n",
    )
    .unwrap();
    let list: Run = std::process::Command::new(&bin)
        .args(["skills", "list", "--json"])
        .current_dir(home.path())
        .envs(skillbox_e2e::hermetic_env())
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", &data)
        .env_remove("SKILLBOX_SYSTEM_SKILLS")
        .output()
        .unwrap()
        .into();
    assert_eq!(list.code, 0, "{list:?}");
    let doc: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(
        skill_named(&doc, "installed-one")["source"],
        "system",
        "{doc}"
    );
}
