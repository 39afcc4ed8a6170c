//! The host around the sandbox, attacked for real: skill folders, caches,
//! manifests, components, FIFOs and clients written for the purpose. Each
//! test performs one attack, asserts that it is contained with a useful
//! error, and that the host keeps serving afterwards.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};
use skillbox_e2e::mcp::{assert_tool_error, call, connect_stdio, text};
use skillbox_e2e::{Run, component, run, skillbox, workspace};
use skillbox_sandbox::{
    CompileOrigin, DiskCache, EngineOptions, Grants, Limits, MIB, Sandbox, SandboxError,
};

/// A skill folder `name` under `root` whose tools are the testbed's, with
/// the given `functions` block and `extra` manifest lines.
fn testbed_skill(root: &Path, name: &str, frontmatter: &str, functions: &str, extra: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: Attack fixture for the host's boundary tests; never for real work.\n{frontmatter}---\nUse the tools.\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("skillbox.yaml"),
        format!("tools:\n  - component: tools/testbed.wasm\n{functions}{extra}"),
    )
    .unwrap();
    std::fs::copy(component("testbed"), dir.join("tools/testbed.wasm")).unwrap();
}

const LIST_DIR: &str = "    functions:\n      list-dir:\n        description: Lists a folder. Test fixture only.\n      read-file:\n        description: Reads a file. Test fixture only.\n";

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn call_args(tool: &str, args: Value, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "call".into(),
        tool.into(),
        "--args".into(),
        args.to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_owned(args: &[String]) -> Run {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs)
}

/// A server (all tools listed, no reload) over one skill, `victim`.
async fn serve_victim() -> (tempfile::TempDir, skillbox_e2e::mcp::Client) {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(skills.path(), "victim", "", LIST_DIR, "");
    let (client, _) = connect_stdio(&[
        "--no-audit",
        "--tools",
        "all",
        "--reload-ms",
        "0",
        "--skills",
        arg(skills.path()),
    ])
    .await;
    (skills, client)
}

// Row 1: a skill folder swapped for a symlink to `/` while the server runs.
#[tokio::test]
async fn a_swapped_skill_folder_is_refused_and_never_followed() {
    let (skills, client) = serve_victim().await;
    let before = call(&client, "victim__list-dir", json!({"path": "/skill"})).await;
    assert_ne!(before.is_error, Some(true), "{}", text(&before));
    assert!(text(&before).contains("SKILL.md"));

    // The attack: move the folder away and put a link to the root in its place.
    let victim = skills.path().join("victim");
    std::fs::rename(&victim, skills.path().join(".moved")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../..", &victim).unwrap();

    let after = call(&client, "victim__list-dir", json!({"path": "/skill"})).await;
    assert_eq!(after.is_error, Some(true));
    let message = text(&after);
    assert!(message.contains("moved or replaced"), "{message}");
    assert!(
        !message.contains("etc") && !message.contains("/tmp/"),
        "{message}"
    );

    // And the host keeps serving.
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "load_skill"));
    client.cancel().await.unwrap();
}

// Row 1, the mount itself: a call that started from the pinned folder sees
// that folder even after its path is swapped.
#[tokio::test]
async fn the_skill_mount_is_the_pinned_folder_not_its_path() {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(skills.path(), "pinned", "", LIST_DIR, "");
    let catalog = skillbox_skill::skill::Catalog::from_sources(&[skillbox_skill::skill::Source {
        kind: skillbox_skill::skill::SourceKind::Explicit,
        root: skills.path().to_path_buf(),
        trusted: true,
    }]);
    let skill = catalog.get("pinned").expect("loaded").clone();
    let dir = skills.path().join("pinned");
    std::fs::rename(&dir, skills.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink("/", &dir).unwrap();
    assert!(!skill.is_in_place());

    let sandbox = Sandbox::with_options(&EngineOptions::default(), None).unwrap();
    let loaded = sandbox.load_file(&component("testbed")).unwrap();
    let grants = Grants {
        skill_dir: Some(skill.mount()),
        ..Grants::default()
    };
    let out = sandbox
        .call(
            &loaded,
            "list-dir",
            &json!({"path": "/skill"}),
            &grants,
            &Limits::default(),
        )
        .await
        .unwrap();
    let listed = out.value.to_string();
    assert!(
        listed.contains("SKILL.md") && !listed.contains("etc"),
        "{listed}"
    );
}

// Rows 1-3: a write grant over skill sources, the cache, the audit log or
// the state folder is refused before anything runs.
#[test]
fn write_grants_never_cover_the_hosts_own_state() {
    let ws = tempfile::tempdir().unwrap();
    testbed_skill(&ws.path().join("skills"), "victim", "", LIST_DIR, "");
    let skills = ws.path().join("skills");
    let r = run(&[
        "serve",
        "--skills",
        arg(&skills),
        "--workspace",
        arg(ws.path()),
        "--allow-write",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    r.stderr_says(&["write access refused (--allow-write"]);
    r.stderr_says(&["skills folder"]);

    // The user's home holds the compiled-code cache and the state folder.
    let home = skillbox_e2e::hermetic_env()
        .into_iter()
        .find(|(k, _)| *k == "HOME")
        .unwrap()
        .1;
    let r = skillbox()
        .args([
            "call",
            "log-inspect__count-lines",
            "--args",
            "{}",
            "--workspace",
        ])
        .arg(&home)
        .arg("--allow-write")
        .output()
        .unwrap();
    let r: Run = r.into();
    assert_eq!(r.code, 2, "{r:?}");

    let cache_parent = skillbox_e2e::test_cache();
    let r = run(&[
        "call",
        "log-inspect__count-lines",
        "--args",
        "{}",
        "--workspace",
        arg(cache_parent.parent().unwrap()),
        "--allow-write",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    r.stderr_says(&["compiled-code cache"]);

    // Read-only workspaces that contain skills are fine.
    let r = run(&["skills", "list", "--skills", arg(&skills)]);
    assert_eq!(r.code, 0, "{r:?}");
}

// Row 2: a cached compiled file copied over another's name, or written by
// hand, is discarded and the right component is compiled again.
#[tokio::test]
async fn a_forged_cache_file_is_never_deserialized() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = || DiskCache::new(cache_dir.path().join("components"));
    let text_wasm = component("text");
    let testbed_wasm = component("testbed");
    {
        let sandbox = Sandbox::with_options(&EngineOptions::default(), Some(cache())).unwrap();
        sandbox.load_file(&text_wasm).unwrap();
        sandbox.load_file(&testbed_wasm).unwrap();
    }
    let files: Vec<PathBuf> = std::fs::read_dir(cache_dir.path().join("components"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(files.len(), 2);
    let sandbox = Sandbox::with_options(&EngineOptions::default(), Some(cache())).unwrap();
    let text_digest = sandbox.load_file(&text_wasm).unwrap().digest.clone();
    let hex = text_digest.trim_start_matches("sha256:");
    let (text_file, other) = if files[0].to_string_lossy().contains(hex) {
        (&files[0], &files[1])
    } else {
        (&files[1], &files[0])
    };
    // The attack: the testbed's compiled code under text.wasm's name.
    std::fs::copy(other, text_file).unwrap();
    let fresh = Sandbox::with_options(&EngineOptions::default(), Some(cache())).unwrap();
    let loaded = fresh.load_file(&text_wasm).unwrap();
    assert_eq!(
        loaded.origin,
        CompileOrigin::Compiled,
        "the forged file was used"
    );
    assert!(loaded.exports.function("count-lines").is_some());

    // A hand-written file, and a cache folder others may write to.
    std::fs::write(text_file, b"SKBXCW02 not compiled code").unwrap();
    let fresh = Sandbox::with_options(&EngineOptions::default(), Some(cache())).unwrap();
    assert_eq!(
        fresh.load_file(&text_wasm).unwrap().origin,
        CompileOrigin::Compiled
    );
    std::fs::set_permissions(
        cache_dir.path().join("components"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let fresh = Sandbox::with_options(&EngineOptions::default(), Some(cache())).unwrap();
    assert_eq!(
        fresh.load_file(&text_wasm).unwrap().origin,
        CompileOrigin::Compiled
    );
}

// Row 3: a component changed under a loaded skill does not run with that
// skill's grants until a reload checks it again.
#[tokio::test]
async fn a_component_changed_after_loading_does_not_run() {
    let (skills, client) = serve_victim().await;
    // The attack: another component's code in the victim's tool file.
    std::fs::copy(
        component("text"),
        skills.path().join("victim/tools/testbed.wasm"),
    )
    .unwrap();
    let result = call(&client, "victim__list-dir", json!({"path": "/skill"})).await;
    assert_tool_error(&result, &["changed since skill `victim` was loaded"]);
    client.cancel().await.unwrap();
}

// Rows 4 and 5: limits a manifest asks for are clamped to the user's
// ceilings; absurd values are findings, never panics.
#[test]
fn manifest_limits_are_clamped_and_checked() {
    let skills = tempfile::tempdir().unwrap();
    let greedy = "    functions:\n      spin:\n        description: Spins. Test fixture only.\n      flood-stdout:\n        description: Floods. Test fixture only.\n";
    testbed_skill(
        skills.path(),
        "greedy",
        "",
        greedy,
        "limits:\n  timeout-ms: 3600000\n  fuel: 18446744073709551615\n  output-bytes: 100000000000\n",
    );
    let r = run(&["skills", "check", arg(&skills.path().join("greedy"))]);
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout_says(&["manifest-limit"]);
    r.stdout_says(&["clamped to the ceiling 60000 ms"]);

    // The spin stops at the ceiling the user set, not the skill's hour.
    let started = std::time::Instant::now();
    let r = run_owned(&call_args(
        "greedy__spin",
        json!({}),
        &[
            "--skills",
            arg(skills.path()),
            "--ceiling-timeout-ms",
            "400",
        ],
    ));
    assert_eq!(r.code, 1, "{r:?}");
    r.stderr_says(&["timeout"]);
    r.stderr_says(&["clamped"]);
    assert!(started.elapsed() < Duration::from_secs(30));

    // A 20 MiB flood stops at the default 8 MiB ceiling.
    let r = run_owned(&call_args(
        "greedy__flood-stdout",
        json!({"bytes": 20 * MIB}),
        &["--skills", arg(skills.path())],
    ));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("more than {} bytes of stdout", 8 * MIB)),
        "{}",
        r.stderr
    );

    // Row 5: a memory request whose byte count overflows.
    let bad = tempfile::tempdir().unwrap();
    testbed_skill(
        bad.path(),
        "overflow",
        "",
        LIST_DIR,
        "limits:\n  memory-mib: 17592186044416\n",
    );
    let r = run(&["skills", "check", arg(&bad.path().join("overflow"))]);
    assert_eq!(r.code, 1, "{r:?}");
    r.stdout_says(&["manifest-limit"]);
    r.stdout_says(&["memory-mib"]);
    let r = run(&["skills", "list", "--skills", arg(bad.path())]);
    assert_eq!(r.code, 0, "the listing survives: {r:?}");
}

/// A component with eight core memories; `touch(pages)` grows each by
/// `pages` and writes to every byte it added.
const EIGHT_MEMORIES: &str = r#"
(component
  (core module $m
    (memory $a 1) (memory $b 1) (memory $c 1) (memory $d 1)
    (memory $e 1) (memory $f 1) (memory $g 1) (memory $h 1)
    (func (export "touch") (param $p i32) (result i32)
      (local $n i32)
      (local.set $n (i32.mul (local.get $p) (i32.const 65536)))
      (drop (memory.grow $a (local.get $p))) (memory.fill $a (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $b (local.get $p))) (memory.fill $b (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $c (local.get $p))) (memory.fill $c (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $d (local.get $p))) (memory.fill $d (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $e (local.get $p))) (memory.fill $e (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $f (local.get $p))) (memory.fill $f (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $g (local.get $p))) (memory.fill $g (i32.const 65536) (i32.const 1) (local.get $n))
      (drop (memory.grow $h (local.get $p))) (memory.fill $h (i32.const 65536) (i32.const 1) (local.get $n))
      (i32.const 8)))
  (core instance $i (instantiate $m))
  (func (export "touch") (param "pages" u32) (result u32) (canon lift (core func $i "touch")))
)
"#;

/// A component whose one parameter is a list of a tuple nested 18 deep,
/// each level holding the one below twice: tiny as a graph, 2^18 nodes
/// as a tree.
fn deep_tuple_component() -> String {
    let mut types = String::from("  (type $t0 (tuple u8 u8))\n");
    for i in 1..18 {
        types.push_str(&format!("  (type $t{i} (tuple $t{} $t{}))\n", i - 1, i - 1));
    }
    format!(
        r#"(component
{types}  (core module $m
    (memory (export "mem") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 0))
    (func (export "f") (param i32 i32)))
  (core instance $i (instantiate $m))
  (alias core export $i "mem" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (alias core export $i "f" (core func $f))
  (func (export "deep") (param "x" (list $t17)) (canon lift (core func $f) (memory $mem) (realloc $realloc)))
)"#
    )
}

fn fixture(dir: &Path, name: &str, wat_text: &str) -> PathBuf {
    let bytes = wat::parse_str(wat_text).expect("the fixture is valid WAT");
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

// Row 6: the memory cap counts every memory of the call together.
#[test]
fn memory_is_capped_per_call_not_per_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "eight.wasm", EIGHT_MEMORIES);
    let call = |pages: u32| -> Run {
        skillbox()
            .args(["call", "--component"])
            .arg(&path)
            .args([
                "touch",
                "--args",
                &json!({"pages": pages}).to_string(),
                "--memory-mib",
                "64",
            ])
            .output()
            .unwrap()
            .into()
    };
    let small = call(100);
    assert_eq!(small.code, 0, "8 x 6.25 MiB fits in 64 MiB: {small:?}");
    let big = call(1000);
    assert_eq!(big.code, 1, "{big:?}");
    big.stderr_says(&["memory limit"]);
    big.stderr_says(&["64 MiB"]);
}

// Row 12: a component with an exponentially large type is refused quickly,
// naming the function.
#[test]
fn an_exponential_type_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "deep.wasm", &deep_tuple_component());
    assert!(std::fs::metadata(&path).unwrap().len() < 4096);
    let started = std::time::Instant::now();
    let r: Run = skillbox()
        .arg("inspect")
        .arg(&path)
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 1, "{r:?}");
    r.stderr_says(&["function `deep`"]);
    r.stderr_says(&["larger than this host accepts"]);
    // Generous: the unbounded version took many seconds and a gigabyte.
    assert!(started.elapsed() < Duration::from_secs(20));
}

// Row 7: a call's /tmp and writable workspace have byte and entry quotas,
// enforced while the guest writes.
#[tokio::test]
async fn scratch_and_workspace_quotas_stop_the_guest_while_it_writes() {
    let sandbox = Sandbox::with_options(&EngineOptions::default(), None).unwrap();
    let testbed = sandbox.load_file(&component("testbed")).unwrap();
    let limits = Limits {
        memory_bytes: 64 * MIB,
        ..Limits::default()
    };
    // 3 GiB asked; the default 64 MiB quota stops it.
    let err = sandbox
        .call(
            &testbed,
            "write-bytes",
            &json!({"path": "/tmp/big", "bytes": 3u64 << 30}),
            &Grants::default(),
            &limits,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Quota { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("scratch quota") && message.contains("/tmp"),
        "{message}"
    );
    assert!(
        !message.contains("skillbox-call-"),
        "no host path: {message}"
    );

    // 200,000 files asked; the entry quota stops it.
    let few = Limits {
        scratch_entries: 500,
        ..limits.clone()
    };
    let err = sandbox
        .call(
            &testbed,
            "create-files",
            &json!({"dir": "/tmp/many", "count": 200_000}),
            &Grants::default(),
            &few,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Quota { .. }), "{err}");
    assert!(err.to_string().contains("more than 500 files"), "{err}");

    // Under the quotas the same functions succeed, and the sandbox serves on.
    let ok = sandbox
        .call(
            &testbed,
            "write-bytes",
            &json!({"path": "/tmp/small", "bytes": 1u64 << 20}),
            &Grants::default(),
            &limits,
        )
        .await
        .unwrap();
    assert_eq!(ok.value, json!(1u64 << 20));

    // A writable workspace has its own byte quota.
    let ws = workspace(&[]);
    let grants = Grants {
        workspace: Some(skillbox_sandbox::WorkspaceGrant {
            host_dir: ws.path().to_path_buf(),
            writable: true,
        }),
        ..Grants::default()
    };
    let tight = Limits {
        workspace_bytes: 4 * MIB as u64,
        ..limits.clone()
    };
    let err = sandbox
        .call(
            &testbed,
            "write-bytes",
            &json!({"path": "/workspace/out", "bytes": 16 * MIB}),
            &grants,
            &tight,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("workspace quota"), "{err}");
    // The call failed, so none of what it wrote reached the workspace.
    assert!(
        !ws.path().join("out").exists(),
        "a call stopped by its quota left a file behind"
    );
}

// Row 8: FIFOs where the host expects files never block it.
#[tokio::test]
async fn fifos_in_a_skill_never_block_the_host() {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(skills.path(), "piped", "", LIST_DIR, "");
    std::fs::create_dir_all(skills.path().join("piped/references")).unwrap();
    let fifo = skills.path().join("piped/references/x.md");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let (client, _) = connect_stdio(&["--no-audit", "--skills", arg(skills.path())]).await;
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        call(
            &client,
            "read_skill_file",
            json!({"skill": "piped", "path": "references/x.md"}),
        ),
    )
    .await
    .expect("read_skill_file answered");
    assert_tool_error(&result, &["FIFO"]);
    let resource = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "skill://piped/references/x.md",
        ))
        .await;
    assert!(resource.is_err());
    client.peer().list_all_tools().await.expect("still serving");
    client.cancel().await.unwrap();

    // A FIFO named skillbox.yaml: `skills check` answers, without hanging.
    let other = tempfile::tempdir().unwrap();
    testbed_skill(other.path(), "fifo-manifest", "", LIST_DIR, "");
    let manifest = other.path().join("fifo-manifest/skillbox.yaml");
    std::fs::remove_file(&manifest).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&manifest)
            .status()
            .unwrap()
            .success()
    );
    let child = skillbox()
        .args(["skills", "check"])
        .arg(other.path().join("fifo-manifest"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = skillbox_e2e::exit_within(child, Duration::from_secs(30), "skills check on a FIFO");
    assert_eq!(r.code, 1, "{r:?}");
    r.stdout_says(&["FIFO"]);
}

// Row 9: substitution is bounded.
#[tokio::test]
async fn prompt_substitution_is_bounded() {
    let skills = workspace(&[(
        "dollars/SKILL.md",
        &format!(
            "---\nname: dollars\ndescription: Attack fixture whose body repeats a placeholder; never for real work.\n---\n{}\n",
            "$1".repeat(80_000)
        ),
    )]);
    let (client, _) = connect_stdio(&["--no-audit", "--skills", arg(skills.path())]).await;
    let mut params = GetPromptRequestParams::new("dollars");
    let mut args = serde_json::Map::new();
    args.insert("arguments".into(), Value::from("x".repeat(50_000)));
    params.arguments = Some(args);
    let err = tokio::time::timeout(Duration::from_secs(20), client.peer().get_prompt(params))
        .await
        .expect("answered")
        .expect_err("refused");
    assert!(err.to_string().contains("exceed"), "{err}");
    let ok = call(
        &client,
        "load_skill",
        json!({"name": "dollars", "arguments": "a"}),
    )
    .await;
    assert_ne!(ok.is_error, Some(true), "{}", text(&ok));
    client.cancel().await.unwrap();
}

// Row 10: invocation policy at call time.
#[tokio::test]
async fn user_only_and_unloaded_skills_do_not_run_for_the_model() {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(
        skills.path(),
        "hidden",
        "disable-model-invocation: true\n",
        LIST_DIR,
        "",
    );
    testbed_skill(skills.path(), "shown", "", LIST_DIR, "");
    let (client, _) = connect_stdio(&["--no-audit", "--skills", arg(skills.path())]).await;
    let hidden = call(&client, "hidden__list-dir", json!({"path": "/skill"})).await;
    assert_tool_error(&hidden, &["can only be invoked by the user"]);
    let unloaded = call(&client, "shown__list-dir", json!({"path": "/skill"})).await;
    assert_tool_error(&unloaded, &["load_skill"]);

    // Once loaded (or invoked by the user), the tools run.
    let load = call(&client, "load_skill", json!({"name": "shown"})).await;
    assert_ne!(load.is_error, Some(true));
    let loaded = call(&client, "shown__list-dir", json!({"path": "/skill"})).await;
    assert_ne!(loaded.is_error, Some(true), "{}", text(&loaded));
    client
        .peer()
        .get_prompt(GetPromptRequestParams::new("hidden"))
        .await
        .expect("the user invokes the hidden skill");
    let invoked = call(&client, "hidden__list-dir", json!({"path": "/skill"})).await;
    assert_ne!(invoked.is_error, Some(true), "{}", text(&invoked));
    client.cancel().await.unwrap();
}

// Row 11: environment grants are per skill.
#[test]
fn environment_grants_are_per_skill() {
    let skills = tempfile::tempdir().unwrap();
    let env_fn = "    functions:\n      env-vars:\n        description: Lists the environment. Test fixture only.\n";
    testbed_skill(
        skills.path(),
        "one",
        "",
        env_fn,
        "grants:\n  env: [TOKEN]\n",
    );
    testbed_skill(
        skills.path(),
        "two",
        "",
        env_fn,
        "grants:\n  env: [TOKEN]\n",
    );
    let env_of = |tool: &str, grant: &str| -> Run {
        skillbox()
            .env("TOKEN", "s3cret-value")
            .args(["call", tool, "--skills"])
            .arg(skills.path())
            .args(["--allow-env", grant])
            .output()
            .unwrap()
            .into()
    };
    let bare = env_of("one__env-vars", "TOKEN");
    assert_eq!(bare.code, 2, "{bare:?}");
    bare.stderr_says(&["one, two"]);
    let one = env_of("one__env-vars", "one:TOKEN");
    assert_eq!(one.code, 0, "{one:?}");
    // The value arrived, and is redacted on the way out.
    one.stdout_says(&["[redacted:TOKEN]"]);
    assert!(!one.stdout.contains("s3cret"), "{}", one.stdout);
    let two = env_of("two__env-vars", "one:TOKEN");
    assert_eq!(two.code, 0, "{two:?}");
    assert!(!two.stdout.contains("s3cret"), "{}", two.stdout);
    two.stderr_says(&["--allow-env two:TOKEN"]);
}

// Row 13: an undescribed function is not advertised as read-only, and a
// function declared `read` cannot write even in a write-granted skill.
#[tokio::test]
async fn effects_fail_closed_and_are_enforced() {
    let skills = tempfile::tempdir().unwrap();
    let dir = skills.path().join("writer");
    testbed_skill(
        skills.path(),
        "writer",
        "",
        "    functions:\n      write-file:\n        description: Claims to only read. Test fixture only.\n        effect: read\n",
        "  - component: tools/other.wasm\ngrants:\n  workspace: write\n",
    );
    std::fs::copy(component("testbed"), dir.join("tools/other.wasm")).unwrap();
    let ws = workspace(&[]);
    let (client, _) = connect_stdio(&[
        "--no-audit",
        "--tools",
        "all",
        "--skills",
        arg(skills.path()),
        "--workspace",
        arg(ws.path()),
        "--allow-write",
    ])
    .await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let undescribed = tools
        .iter()
        .find(|t| t.name == "writer__noop")
        .expect("undescribed functions are served");
    let annotations = undescribed.annotations.as_ref().unwrap();
    assert_eq!(annotations.read_only_hint, Some(false));
    let declared_read = call(
        &client,
        "writer__write-file",
        json!({"path": "/workspace/x", "contents": "y"}),
    )
    .await;
    assert_eq!(declared_read.is_error, Some(true), "a read tool wrote");
    assert!(!ws.path().join("x").exists());
    client.cancel().await.unwrap();
}

// Row 14: a client that cancels a call and closes stdin ends the server.
#[tokio::test]
async fn serve_exits_after_a_cancelled_call_and_closed_stdin() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let skills = skillbox_e2e::testkit_skills();
    let mut child = tokio::process::Command::new(skillbox_e2e::skillbox_bin())
        .args(["serve", "--no-audit", "--tools", "all", "--skills"])
        .arg(skills.path())
        .envs(skillbox_e2e::hermetic_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |line: Value| {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    };
    send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).await;
    send(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    // With a progress token the server reports progress while the guest
    // runs: the first report says the call is under way, so the cancel
    // reaches a running guest.
    send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testkit__spin","arguments":{},"_meta":{"progressToken":"spin"}}})).await;
    let running = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            if line.contains("notifications/progress") {
                return;
            }
        }
        panic!("serve closed stdout before reporting progress");
    });
    running
        .await
        .expect("a progress report while the guest spins");
    send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}})).await;
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("serve exited after stdin closed")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

// Row 15: a symlink in a skill folder does not reveal the size of what it
// points to outside.
#[tokio::test]
async fn resource_sizes_never_follow_a_link_out_of_the_skill() {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(skills.path(), "linky", "", LIST_DIR, "");
    std::fs::create_dir_all(skills.path().join("linky/references")).unwrap();
    let outside = skills.path().join("outside.bin");
    std::fs::write(&outside, vec![7u8; 123_457]).unwrap();
    std::os::unix::fs::symlink(&outside, skills.path().join("linky/references/leak.md")).unwrap();
    let (client, _) = connect_stdio(&["--no-audit", "--skills", arg(skills.path())]).await;
    let resources = client.peer().list_all_resources().await.unwrap();
    for r in &resources {
        assert_ne!(
            r.size,
            Some(123_457),
            "{} reports the outside file's size",
            r.uri
        );
    }
    let leak = client
        .peer()
        .call_tool(
            CallToolRequestParams::new("read_skill_file").with_arguments(
                json!({"skill": "linky", "path": "references/leak.md"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(leak.is_error, Some(true));
    client.cancel().await.unwrap();
}

/// The audit log in `state`, as text and as records.
fn audit_records(state: &Path) -> (String, Vec<Value>) {
    let audit = std::fs::read_to_string(state.join("audit.jsonl")).unwrap();
    let records = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (audit, records)
}

// The one call path: the command line's script runs and tool calls are
// audited like any other call.
#[test]
fn command_line_calls_go_through_the_audited_call_path() {
    let state = tempfile::tempdir().unwrap();
    let project = skillbox_e2e::repo().join("examples/release-project");
    let release_check = |source: &[&std::ffi::OsStr]| {
        let r: Run = skillbox()
            .env("SKILLBOX_STATE_DIR", state.path())
            .arg("run-script")
            .args(source)
            .arg("--workspace")
            .arg(&project)
            .args(["--", "src/main.rs"])
            .output()
            .unwrap()
            .into();
        assert_eq!(
            r.code, 1,
            "release-check reports the example as blocked: {r:?}"
        );
        assert!(!r.stdout.is_empty(), "{r:?}");
    };
    release_check(&["--script".as_ref(), "release-check/release-check".as_ref()]);
    let r: Run = skillbox()
        .env("SKILLBOX_STATE_DIR", state.path())
        .args([
            "call",
            "log-inspect__count-lines",
            "--args",
            r#"{"path": "logs/app.log"}"#,
        ])
        .args(["--workspace", &skillbox_e2e::examples()])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "{r:?}");
    let (audit, records) = audit_records(state.path());
    assert_eq!(records.len(), 2, "{audit}");
    assert_eq!(records[0]["tool"], "run_script");
    assert_eq!(records[0]["skill"], "release-check");
    // A script that ran and exited 1 is not a success.
    assert_eq!(records[0]["outcome"], "nonzero_exit", "{audit}");
    assert_eq!(records[0]["exit_code"], 1, "{audit}");
    assert_eq!(records[1]["tool"], "log-inspect__count-lines");
    assert_eq!(records[1]["outcome"], "ok");
    assert!(records[1].get("exit_code").is_none(), "{audit}");

    // A component file named on the command line takes the same path: it
    // is audited, and a granted secret is redacted from what it returns.
    let r: Run = skillbox()
        .env("SKILLBOX_STATE_DIR", state.path())
        .env("CLI_SECRET", "hunter2-cli-secret")
        .args(["call", "--component"])
        .arg(component("testbed"))
        .args(["env-vars", "--allow-env", "CLI_SECRET"])
        // With --component, a network grant's skill is not checked.
        .args(["--allow-net", "any:example.com"])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("[redacted:CLI_SECRET]"), "{r:?}");
    assert!(!r.stdout.contains("hunter2"), "{r:?}");
    let file = component("release-check");
    release_check(&["--component".as_ref(), file.as_os_str()]);
    let (audit, records) = audit_records(state.path());
    assert_eq!(records.len(), 4, "{audit}");
    assert_eq!(records[2]["tool"], "env-vars");
    assert_eq!(records[2]["outcome"], "ok");
    assert!(records[2]["skill"].is_null(), "{audit}");
    assert!(
        records[2]["component"]
            .as_str()
            .unwrap()
            .ends_with("testbed.wasm"),
        "{audit}"
    );
    assert_eq!(records[3]["tool"], "run_script");
    assert_eq!(records[3]["exit_code"], 1, "{audit}");
    assert!(
        records[3]["component_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{audit}"
    );
    let mode = std::fs::metadata(state.path().join("audit.jsonl"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the audit log is private");
}

// Row 4, as a model sees it: load_skill says which requests were clamped.
#[tokio::test]
async fn load_skill_reports_clamped_limits() {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(
        skills.path(),
        "greedy",
        "",
        LIST_DIR,
        "limits:\n  timeout-ms: 3600000\n",
    );
    let (client, _) = connect_stdio(&["--no-audit", "--skills", arg(skills.path())]).await;
    let loaded = call(&client, "load_skill", json!({"name": "greedy"})).await;
    let body = text(&loaded);
    assert!(body.contains("## Host notes"), "{body}");
    assert!(body.contains("clamped to the ceiling 60000 ms"), "{body}");
    client.cancel().await.unwrap();
}

// The Skills extension's directory listing stays inside the skill: `..`
// and a symlinked folder leading out are refused.
#[tokio::test]
async fn directory_reads_never_leave_the_skill() {
    let skills = tempfile::tempdir().unwrap();
    testbed_skill(skills.path(), "lister", "", LIST_DIR, "");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "no").unwrap();
    std::os::unix::fs::symlink(outside.path(), skills.path().join("lister/linked")).unwrap();
    let (client, _) = connect_stdio(&["--no-audit", "--skills", arg(skills.path())]).await;
    for uri in [
        "skill://lister/..",
        "skill://lister/../..",
        "skill://lister/linked",
    ] {
        let listed = client
            .peer()
            .read_resource_directory(rmcp::model::ReadResourceDirectoryRequestParams::new(uri))
            .await;
        assert!(listed.is_err(), "{uri} was listed: {listed:?}");
    }
    let root = client
        .peer()
        .read_resource_directory(rmcp::model::ReadResourceDirectoryRequestParams::new(
            "skill://lister/",
        ))
        .await
        .unwrap();
    let names: Vec<&str> = root.resources.iter().map(|r| r.name.as_str()).collect();
    assert!(
        names.contains(&"SKILL.md") && !names.contains(&"secret.txt"),
        "{names:?}"
    );
    client.cancel().await.unwrap();
}

// Read-only mode refuses a write tool even when called by name.
#[tokio::test]
async fn read_only_mode_refuses_write_tools() {
    let kit = skillbox_e2e::testkit_skills();
    let ws = workspace(&[]);
    let (client, _) = connect_stdio(&[
        "--no-audit",
        "--tools",
        "all",
        "--read-only",
        "--skills",
        arg(kit.path()),
        "--workspace",
        arg(ws.path()),
    ])
    .await;
    let listed = client.peer().list_all_tools().await.unwrap();
    assert!(!listed.iter().any(|t| t.name == "testkit__write-file"));
    let write = call(
        &client,
        "testkit__write-file",
        json!({"path": "/workspace/x", "contents": "y"}),
    )
    .await;
    assert_tool_error(&write, &["--read-only"]);
    assert!(!ws.path().join("x").exists());
    client.cancel().await.unwrap();
}
