//! What a newcomer and real clients hit: the files a skill serves, a skill
//! loaded from its own folder, structured results as clients read them,
//! the Skills extension's limits, a first tool list that never waits for a
//! compiler, authoring in three languages, command-line edges and the
//! session `DELETE`.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use rmcp::model::{GetSkillRequestParams, ReadResourceRequestParams, SkillResources};
use serde_json::{Value, json};
use skillbox_e2e::mcp::{Client, call, connect_stdio, serve_http, stateless_request};
use skillbox_e2e::{Run, component, repo, run, skillbox, workspace};

/// What a client that prefers structured content hands its model.
/// fast-agent (`content_helpers.py`) and Claude Code both replace the text
/// with `structuredContent`, serialized compact with sorted keys, whenever
/// a result has one; otherwise the model reads the text blocks.
fn what_the_model_sees(result: &rmcp::model::CallToolResult) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
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
    match &result.structured_content {
        Some(structured) => sorted(structured).to_string(),
        None => result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Whether every non-empty line of `text` reaches the model, as text or
/// inside a JSON string.
fn every_line_reaches(model_view: &str, text: &str) -> Result<(), String> {
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let escaped = serde_json::to_string(line).unwrap();
        let escaped = &escaped[1..escaped.len() - 1];
        if !model_view.contains(line) && !model_view.contains(escaped) {
            return Err(format!("the model never sees {line:?}"));
        }
    }
    Ok(())
}

async fn call_host_tool(client: &Client, name: &str, args: Value) -> rmcp::model::CallToolResult {
    call(client, name, args).await
}

#[tokio::test]
async fn a_client_that_prefers_structured_content_sees_the_instructions_and_the_lines() {
    let skills = repo().join("skills");
    let (client, _) = connect_stdio(&["--no-audit", "--skills", skills.to_str().unwrap()]).await;

    let loaded = call_host_tool(&client, "load_skill", json!({"name": "log-inspect"})).await;
    assert!(loaded.structured_content.is_some(), "{loaded:?}");
    let body = std::fs::read_to_string(skills.join("log-inspect/SKILL.md")).unwrap();
    let body = body.splitn(3, "---").nth(2).unwrap();
    every_line_reaches(&what_the_model_sees(&loaded), body).unwrap();

    let read = call_host_tool(
        &client,
        "read_skill_file",
        json!({"skill": "log-inspect", "path": "references/patterns.md"}),
    )
    .await;
    let reference =
        std::fs::read_to_string(skills.join("log-inspect/references/patterns.md")).unwrap();
    every_line_reaches(&what_the_model_sees(&read), &reference).unwrap();

    // A page of a longer file says where the rest is, structured too.
    let page = call_host_tool(
        &client,
        "read_skill_file",
        json!({"skill": "log-inspect", "path": "SKILL.md", "max_lines": 2}),
    )
    .await;
    assert!(
        what_the_model_sees(&page).contains("start_line=3"),
        "{page:?}"
    );

    let found = call_host_tool(
        &client,
        "find_skills",
        json!({"query": "nothing like this xyzzy"}),
    )
    .await;
    assert!(
        what_the_model_sees(&found).contains("Try other words"),
        "{found:?}"
    );
    client.cancel().await.unwrap();
}

/// A skill folder with the testbed's tools, as an author's working folder
/// looks: build outputs, a VCS folder, an ignored log, a binary.
fn working_folder(root: &Path) -> std::path::PathBuf {
    let skill = root.join("worker");
    let files: &[(&str, &[u8])] = &[
        (
            "SKILL.md",
            b"---\nname: worker\ndescription: Test skill for the files a skill serves; use only in skillbox's tests.\n---\nCall worker__noop.\n",
        ),
        (
            "skillbox.yaml",
            b"tools:\n  - component: tools/testbed.wasm\n    functions:\n      noop:\n        description: Returns 42. Use to test. Not for real work.\n        effect: read\n",
        ),
        ("references/guide.md", b"# Guide\n"),
        (".gitignore", b"*.log\n/scratch/\n"),
        ("debug.log", b"secret build log\n"),
        ("scratch/notes.md", b"private notes\n"),
        ("target/debug/worker", b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\xff\xfe"),
        ("tool/target/release/libworker.rlib", b"!<arch>\n"),
        ("node_modules/left-pad/index.js", b"module.exports = 1;\n"),
        (".git/config", b"[core]\n"),
    ];
    for (rel, bytes) in files {
        let path = skill.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    std::fs::create_dir_all(skill.join("tools")).unwrap();
    std::fs::copy(component("testbed"), skill.join("tools/testbed.wasm")).unwrap();
    skill
}

#[tokio::test]
async fn a_skill_serves_its_files_not_its_build_or_what_git_ignores() {
    let root = tempfile::tempdir().unwrap();
    working_folder(root.path());
    let (client, _) =
        connect_stdio(&["--no-audit", "--skills", root.path().to_str().unwrap()]).await;
    let entry = client
        .peer()
        .get_skill(GetSkillRequestParams::new("skill://worker/SKILL.md"))
        .await
        .unwrap()
        .skill;
    let SkillResources::Files(files) = &entry.resources else {
        panic!("a static manifest")
    };
    let mut served: Vec<&str> = files.iter().map(|f| f.uri.as_str()).collect();
    served.sort();
    assert_eq!(
        served,
        [
            "skill://worker/SKILL.md",
            "skill://worker/references/guide.md",
            "skill://worker/skillbox.yaml",
        ]
    );
    for hidden in [
        "target/debug/worker",
        "tool/target/release/libworker.rlib",
        "node_modules/left-pad/index.js",
        "debug.log",
        "scratch/notes.md",
        ".git/config",
    ] {
        let read = client
            .peer()
            .read_resource(ReadResourceRequestParams::new(format!(
                "skill://worker/{hidden}"
            )))
            .await
            .expect_err(hidden);
        assert!(
            read.to_string().contains("not one of the skill's files"),
            "{hidden}: {read}"
        );
        let tool = call(
            &client,
            "read_skill_file",
            json!({"skill": "worker", "path": hidden}),
        )
        .await;
        assert_eq!(tool.is_error, Some(true), "{hidden}: {tool:?}");
    }
    let listing = client
        .peer()
        .read_resource_directory(rmcp::model::ReadResourceDirectoryRequestParams::new(
            "skill://worker/",
        ))
        .await
        .unwrap();
    let names: Vec<&str> = listing.resources.iter().map(|r| r.name.as_str()).collect();
    // `tools/` holds the component alone, which is not served.
    for hidden in [
        "target",
        "node_modules",
        "debug.log",
        "scratch",
        ".git",
        "tools",
    ] {
        assert!(!names.contains(&hidden), "{hidden} listed: {names:?}");
    }
    client.cancel().await.unwrap();
}

#[test]
fn skills_dot_inside_a_skill_folder_names_the_skill_by_its_folder() {
    let kit = skillbox_e2e::testkit_skills();
    let inside = kit.path().join("testkit");
    let listed: Run = skillbox()
        .args(["skills", "list", "--json", "--skills", "."])
        .current_dir(&inside)
        .output()
        .unwrap()
        .into();
    assert_eq!(listed.code, 0, "{listed:?}");
    let names: Vec<String> = listed.json()["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "explicit")
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["testkit"]);
    let called: Run = skillbox()
        .args(["call", "--skills", ".", "testkit__noop", "--args", "{}"])
        .current_dir(&inside)
        .output()
        .unwrap()
        .into();
    assert_eq!(called.code, 0, "{called:?}");
    assert_eq!(called.stdout.trim(), "42", "{called:?}");
}

/// A skill whose tool is the componentize-py component (about 18 MB).
fn python_tool_skill(root: &Path) -> Option<()> {
    let wasm = skillbox_e2e::foreign_components()?.join("wordcount.wasm");
    let skill = root.join("words");
    std::fs::create_dir_all(skill.join("tools")).unwrap();
    std::fs::copy(wasm, skill.join("tools/wordcount.wasm")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: words\ndescription: Counts words in a text; use when asked how long a text is. Not for files.\n---\nCall words__count-words with the text.\n",
    )
    .unwrap();
    std::fs::write(
        skill.join("skillbox.yaml"),
        "tools:\n  - component: tools/wordcount.wasm\n    functions:\n      count-words:\n        description: Count the words of a text. Use for lengths. Not for files.\n        effect: read\n",
    )
    .unwrap();
    Some(())
}

/// The clients' own rules: fast-agent refuses a file over 16 MiB, a skill
/// over 50 MiB or over 10,000 files; the Inspector's `--verify` warns past
/// 16 MiB or 512 files in all, as the Skills extension recommends.
fn within_client_limits(files: &[rmcp::model::SkillResource]) -> Result<(), String> {
    const MIB: u64 = 1024 * 1024;
    let total: u64 = files.iter().map(|f| f.size).sum();
    if let Some(big) = files.iter().find(|f| f.size > 16 * MIB) {
        return Err(format!(
            "fast-agent: {} exceeds the per-file limit",
            big.uri
        ));
    }
    if total > 16 * MIB || files.len() > 512 {
        return Err(format!(
            "inspector --verify: {} files, {total} bytes",
            files.len()
        ));
    }
    Ok(())
}

#[tokio::test]
async fn a_skill_with_a_python_tool_stays_within_the_extensions_limits() {
    let root = tempfile::tempdir().unwrap();
    if python_tool_skill(root.path()).is_none() {
        eprintln!("skipping: no componentize-py component was built");
        return;
    }
    let checked = run(&[
        "skills",
        "check",
        root.path().join("words").to_str().unwrap(),
    ]);
    assert_eq!(checked.code, 0, "{checked:?}");
    assert!(!checked.stdout.contains("interop-limit"), "{checked:?}");
    let (client, _) =
        connect_stdio(&["--no-audit", "--skills", root.path().to_str().unwrap()]).await;
    let entry = client
        .peer()
        .get_skill(GetSkillRequestParams::new("skill://words/SKILL.md"))
        .await
        .unwrap()
        .skill;
    let SkillResources::Files(files) = &entry.resources else {
        panic!("a static manifest")
    };
    within_client_limits(files).unwrap();
    client.cancel().await.unwrap();

    // A skill that really is too big for them is reported.
    let big = workspace(&[(
        "bulky/SKILL.md",
        "---\nname: bulky\ndescription: A skill with a large reference; use only in skillbox's tests.\n---\nRead the reference.\n",
    )]);
    let reference = big.path().join("bulky/references/atlas.txt");
    std::fs::create_dir_all(reference.parent().unwrap()).unwrap();
    std::fs::write(&reference, vec![b'x'; 17 * 1024 * 1024]).unwrap();
    let checked = run(&[
        "skills",
        "check",
        big.path().join("bulky").to_str().unwrap(),
    ]);
    checked.stdout_says(&["interop-limit", "fast-agent"]);
}

#[tokio::test]
async fn the_first_tool_list_never_waits_for_a_compiler() {
    let root = tempfile::tempdir().unwrap();
    if python_tool_skill(root.path()).is_none() {
        eprintln!("skipping: no componentize-py component was built");
        return;
    }
    // An empty compiled-code cache: compiling the Python tool takes tens of
    // seconds here.
    let cache = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        cache.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let (_server, url) = skillbox_e2e::mcp::serve_http_with_env(
        &["--skills", root.path().to_str().unwrap(), "--tools", "all"],
        &[("SKILLBOX_CACHE_DIR", cache_dir)],
    );
    let http = reqwest::Client::new();
    let listed: Value = stateless_request(&http, &url, "tools/list", json!({}), json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"words__count-words"), "{listed}");
    // The list came back while the component was still compiling.
    let ready: Value = reqwest::get(format!("{}/readyz", skillbox_e2e::mcp::base_url(&url)))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ready["status"], "warming",
        "the list waited for the compile: {ready}"
    );
    // A call waits for its own component, and answers.
    let counted = skillbox_e2e::mcp::stateless_call(
        &http,
        &url,
        "words__count-words",
        json!({"text": "one two three", "min-length": null}),
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(counted["structuredContent"]["words"], 3, "{counted}");
}

/// The tool name a template's function gets, for a skill named `name`.
fn greet(name: &str) -> String {
    format!("{name}__greet")
}

/// `new skill --tool LANGUAGE`, the template finished, built with the real
/// toolchain, then called: once well, once with the error path.
async fn new_build_and_call(language: &str, name: &str) {
    let parent = tempfile::tempdir().unwrap();
    let created = run(&[
        "new",
        "skill",
        name,
        "--tool",
        language,
        "--dir",
        parent.path().to_str().unwrap(),
    ]);
    assert_eq!(created.code, 0, "{created:?}");
    let skill = parent.path().join(name);
    let md = skill.join("SKILL.md");
    let text = std::fs::read_to_string(&md).unwrap();
    std::fs::write(
        &md,
        text.replace(
            "; replace this with what your skill does, when to use it and when not to.",
            ". Not for letters.",
        )
        .replace(
            "One paragraph on what this skill is for and what it returns.",
            "Greets one person.",
        ),
    )
    .unwrap();
    let js_bin = repo().join("target/toolchains/js/node_modules/.bin");
    let path = format!("{}:{}", js_bin.display(), std::env::var("PATH").unwrap());
    let built: Run = skillbox()
        .arg("build")
        .arg(&skill)
        .env("PATH", path)
        .output()
        .unwrap()
        .into();
    assert_eq!(built.code, 0, "{built:?}");
    assert!(
        !skill.join("tool/__pycache__").exists(),
        "a build output in the skill"
    );
    let checked = run(&["skills", "check", skill.to_str().unwrap()]);
    assert_eq!(checked.code, 0, "{checked:?}");
    let (client, _) = connect_stdio(&[
        "--no-audit",
        "--tools",
        "all",
        "--skills",
        parent.path().to_str().unwrap(),
    ])
    .await;
    let hello = call(&client, &greet(name), json!({"name": "Ada"})).await;
    assert_ne!(hello.is_error, Some(true), "{hello:?}");
    assert!(
        what_the_model_sees(&hello).contains("Hello, Ada!"),
        "{hello:?}"
    );
    let refused = call(&client, &greet(name), json!({"name": " "})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        what_the_model_sees(&refused).contains("give a name"),
        "{refused:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_new_python_tool_builds_and_answers() {
    if skillbox_e2e::foreign_components().is_none() {
        eprintln!("skipping: componentize-py is not installed");
        return;
    }
    new_build_and_call("python", "hello-py").await;
}

#[tokio::test]
async fn a_new_javascript_tool_builds_and_answers() {
    if skillbox_e2e::foreign_components().is_none() {
        eprintln!("skipping: componentize-js is not installed");
        return;
    }
    new_build_and_call("js", "hello-js").await;
}

#[test]
fn a_missing_toolchain_is_named_with_its_install_command() {
    let parent = tempfile::tempdir().unwrap();
    assert_eq!(
        run(&[
            "new",
            "skill",
            "no-py",
            "--tool",
            "python",
            "--dir",
            parent.path().to_str().unwrap()
        ])
        .code,
        0
    );
    let built: Run = skillbox()
        .arg("build")
        .arg(parent.path().join("no-py"))
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
        .into();
    assert_eq!(built.code, 1, "{built:?}");
    built.stderr_says(&[
        "componentize-py is not installed",
        "pip install componentize-py==",
    ]);
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    // Nobody will read: the first write meets a closed pipe.
    drop(reader);
    let out = skillbox()
        .args(["skills", "list", "--json"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}

#[test]
fn run_script_reads_piped_stdin_and_stdin_dash() {
    let ws = workspace(&[
        (
            "Cargo.toml",
            "[package]\nname = \"x\"\nversion = \"0.3.0\"\n",
        ),
        ("CHANGELOG.md", "## 0.3.0\n\n- done\n"),
        ("src/lib.rs", "// FIXME: unsafe\n"),
    ]);
    let rc = component("release-check");
    for stdin_flag in [None, Some("-")] {
        let mut cmd = skillbox();
        cmd.args(["run-script", "--component"])
            .arg(&rc)
            .args(["--workspace", ws.path().to_str().unwrap()]);
        if let Some(flag) = stdin_flag {
            cmd.args(["--stdin", flag]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"src/lib.rs\n")
            .unwrap();
        let out: Run = child.wait_with_output().unwrap().into();
        out.stdout_says(&["src/lib.rs:1: FIXME"]);
    }
}

#[test]
fn call_suggests_skills_when_a_skill_folder_is_here() {
    let kit = skillbox_e2e::testkit_skills();
    let out: Run = skillbox()
        .args(["call", "testkit__noop", "--args", "{}"])
        .current_dir(kit.path().join("testkit"))
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{out:?}");
    out.stderr_says(&["--skills ."]);
}

#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    // A skill that does not load is a warning in the log.
    let broken = workspace(&[("broken/SKILL.md", "no frontmatter\n")]);
    let log = tempfile::NamedTempFile::new().unwrap();
    let status = skillbox()
        .args([
            "call",
            "--skills",
            broken.path().to_str().unwrap(),
            "x__y",
            "--args",
            "{}",
        ])
        .env("SKILLBOX_LOG", "debug")
        .stderr(log.reopen().unwrap())
        .status()
        .unwrap();
    assert!(!status.success());
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(!text.is_empty());
    assert!(!text.contains('\u{1b}'), "colour codes in a file: {text:?}");
}

#[test]
fn skills_list_shows_each_skills_folder() {
    let out = run(&[
        "skills",
        "list",
        "--skills",
        repo().join("skills").to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let header = out.stdout.lines().next().unwrap();
    assert!(header.contains("FOLDER"), "{header}");
    out.stdout_says(&[repo().join("skills/log-inspect").to_str().unwrap()]);
}

#[tokio::test]
async fn a_client_leaving_mid_call_is_not_logged_as_an_error() {
    use tokio::io::AsyncWriteExt;
    let kit = skillbox_e2e::testkit_skills();
    let mut child = tokio::process::Command::new(skillbox_e2e::skillbox_bin())
        .args(["serve", "--no-audit", "--tools", "all", "--skills"])
        .arg(kit.path())
        .envs(skillbox_e2e::hermetic_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testkit__sleep-ms","arguments":{"ms":500}}}),
    ] {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    // The client goes away with a reply still owed.
    drop(child.stdout.take());
    drop(stdin);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("serve exits when its client is gone")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ERROR"), "{stderr}");
}

#[tokio::test]
async fn ending_a_session_is_answered_200_as_the_sdks_expect() {
    let (_server, url) = serve_http(&[]);
    let http = reqwest::Client::new();
    let init = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
        .send()
        .await
        .unwrap();
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let ended = http
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    let again = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_ne!(again.status(), 200, "the session outlived its DELETE");
}

#[test]
fn completions_and_the_man_page_come_from_the_flags() {
    let bash = run(&["completions", "bash"]);
    assert_eq!(bash.code, 0, "{bash:?}");
    for flag in ["--allow-net", "--trust-build", "--cache-max-mib"] {
        assert!(bash.stdout.contains(flag), "{flag} missing");
    }
    let mut checked = std::process::Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    checked
        .stdin
        .take()
        .unwrap()
        .write_all(bash.stdout.as_bytes())
        .unwrap();
    assert!(
        checked.wait().unwrap().success(),
        "the bash script does not parse"
    );

    let man = run(&["man"]);
    assert_eq!(man.code, 0, "{man:?}");
    assert!(
        man.stdout.starts_with(".ie") || man.stdout.contains(".TH"),
        "{}",
        &man.stdout[..200.min(man.stdout.len())]
    );
    // groff renders it without a warning.
    let mut groff = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    groff
        .stdin
        .take()
        .unwrap()
        .write_all(man.stdout.as_bytes())
        .unwrap();
    let rendered = groff.wait_with_output().unwrap();
    assert!(rendered.status.success());
    assert_eq!(String::from_utf8_lossy(&rendered.stderr), "");
}
