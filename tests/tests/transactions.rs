//! Every write-granted call is a transaction on the workspace: staged
//! while it runs, committed whole when it succeeds, discarded otherwise,
//! and settled by the next start after a `kill -9` at any point. Real
//! files, the real binary, real signals; tests wait on events (a request
//! arriving at a loopback server the test holds open, a pause point's
//! line on stderr), never on sleeps.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};
use skillbox_e2e::mcp::{Recorder, connect_stdio_as};
use skillbox_e2e::{Run, component, skillbox, workspace};

/// A skill `stager` whose one tool runs the testbed's `stage-steps`.
pub(crate) fn stager() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("stager");
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: stager\ndescription: Transaction fixture for the host's own tests; never for real work.\n---\nUse the tool.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("skillbox.yaml"),
        "tools:\n  - component: tools/testbed.wasm\n    functions:\n      stage-steps:\n        description: Transaction fixture. Not for real work.\n        effect: write\ngrants:\n  workspace: write\n  network: [\"*\"]\nlimits:\n  timeout-ms: 30000\n",
    )
    .unwrap();
    std::fs::copy(component("testbed"), dir.join("tools/testbed.wasm")).unwrap();
    root
}

pub(crate) const TOOL: &str = "stager__stage-steps";

/// Every file and folder under `dir`, with the files' bytes.
pub(crate) fn tree(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel.starts_with(".git") {
                continue;
            }
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                let shown = format!("-> {}", target.display());
                out.insert(rel, Some(shown.into_bytes()));
            } else if kind.is_dir() {
                out.insert(rel, None);
                walk(root, &path, out);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

pub(crate) fn seeded() -> tempfile::TempDir {
    workspace(&[
        ("a.txt", "alpha\n"),
        ("b.txt", "bravo\n"),
        ("c.txt", "charlie\n"),
        ("docs/readme.md", "# docs\n"),
    ])
}

/// `skillbox call stager__stage-steps` with `steps` on `ws`, and `extra`
/// flags.
fn call_steps(kit: &Path, ws: &Path, steps: &[&str], extra: &[&str]) -> Run {
    call_steps_in(kit, ws, steps, extra, &[])
}

/// [`call_steps`] with more environment.
fn call_steps_in(
    kit: &Path,
    ws: &Path,
    steps: &[&str],
    extra: &[&str],
    env: &[(&str, &str)],
) -> Run {
    skillbox()
        .args(["call", TOOL, "--skills"])
        .arg(kit)
        .arg("--workspace")
        .arg(ws)
        .args(["--allow-write", "--args"])
        .arg(json!({ "steps": steps }).to_string())
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap()
        .into()
}

/// Every text block of a tool result.
fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A loopback web server that tells the test when a request arrives and
/// answers it only when the test says so.
struct Gate {
    port: u16,
    arrived: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
}

fn gate() -> Gate {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (arrived_tx, arrived) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = arrived_tx.send(());
            if release_rx.recv().is_err() {
                return;
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    Gate {
        port,
        arrived,
        release,
    }
}

impl Gate {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hold", self.port)
    }

    fn grant(&self) -> String {
        format!("stager:127.0.0.1:{}", self.port)
    }
}

/// `stager` served over stdio on `ws`, writable, allowed to reach the
/// gate, auditing to `audit`.
async fn serve_stager(
    kit: &Path,
    ws: &Path,
    gate: &Gate,
    audit: &Path,
) -> skillbox_e2e::mcp::Client {
    let grant = gate.grant();
    let (client, _) = connect_stdio_as(
        Recorder::default(),
        &[
            "--tools",
            "all",
            "--skills",
            kit.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--allow-write",
            "--allow-net",
            &grant,
            "--audit",
            audit.to_str().unwrap(),
        ],
    )
    .await;
    client
}

/// Reads `child`'s stderr until a line contains `what`.
pub(crate) fn wait_for_line(child: &mut Child, what: &str) {
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains(what) {
            // Keep draining, so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return;
        }
    }
    panic!("the process ended before saying {what:?}");
}

#[test]
fn a_guest_sees_its_own_writes_and_a_success_commits_all_of_them() {
    let kit = stager();
    let ws = seeded();
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "write /workspace/new.txt fresh",
            "append /workspace/a.txt more",
            "read /workspace/a.txt",
            "mkdir /workspace/out",
            "rename /workspace/new.txt /workspace/out/moved.txt",
            "remove /workspace/b.txt",
            "list /workspace",
            "list /workspace/out",
            "read /workspace/out/moved.txt",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let said = run.json();
    assert_eq!(said[2], "alpha\nmore", "the guest reads its own append");
    assert_eq!(
        said[6], "a.txt,c.txt,docs,out",
        "the listing is merged: {said}"
    );
    assert_eq!(said[7], "moved.txt");
    assert_eq!(said[8], "fresh");
    run.stderr_says(&[
        "workspace: committed",
        "+ added out/moved.txt (5 B)",
        "- deleted b.txt",
    ]);
    let after = tree(ws.path());
    assert_eq!(after["a.txt"], Some(b"alpha\nmore".to_vec()));
    assert_eq!(after["out/moved.txt"], Some(b"fresh".to_vec()));
    assert!(!after.contains_key("b.txt") && !after.contains_key("new.txt"));
    assert_eq!(after["c.txt"], Some(b"charlie\n".to_vec()));
}

#[test]
fn every_failure_after_partial_writes_leaves_the_workspace_unchanged() {
    let kit = stager();
    let ws = seeded();
    std::fs::write(ws.path().join("big.bin"), vec![7u8; 2 << 20]).unwrap();
    let before = tree(ws.path());
    let partial = [
        "write /workspace/a.txt overwritten",
        "remove /workspace/b.txt",
        "write /workspace/docs/new.md new",
    ];
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("err", &["fail on purpose"], &[]),
        ("trap", &["trap"], &[]),
        ("timeout", &["spin"], &["--timeout-ms", "1000"]),
        (
            "quota",
            &[
                "write /workspace/4 x",
                "write /workspace/5 x",
                "write /workspace/6 x",
            ],
            &["--workspace-quota-entries", "3"],
        ),
        // Changing a file copies it first: the copy is paid before it is
        // made, so a 2 MiB file cannot be staged under a 1 MiB quota.
        (
            "quota on a copy",
            &["append /workspace/big.bin x"],
            &["--workspace-quota-mib", "1"],
        ),
    ];
    for (what, last, flags) in cases {
        let steps: Vec<&str> = partial.iter().chain(last).copied().collect();
        let run = call_steps(kit.path(), ws.path(), &steps, flags);
        assert_ne!(run.code, 0, "{what}: {run:?}");
        assert_eq!(
            tree(ws.path()),
            before,
            "{what} left changes behind: {run:?}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_call_leaves_the_workspace_unchanged() {
    let kit = stager();
    let ws = seeded();
    let before = tree(ws.path());
    let gate = gate();
    let skillbox = skillbox::Skillbox::builder()
        .skills_dir(kit.path())
        .writable_workspace(ws.path())
        .allow_net(gate.grant().parse().unwrap())
        .build()
        .unwrap();
    let cancel = skillbox::CancellationToken::new();
    let steps = json!({"steps": ["write /workspace/a.txt changed", "remove /workspace/c.txt", format!("fetch {}", gate.url())]});
    let call = skillbox.call_tool_until(TOOL, steps, &cancel);
    let arrived = async {
        let arrived = tokio::task::spawn_blocking(move || gate.arrived.recv().is_ok());
        assert!(arrived.await.unwrap(), "the guest never sent its request");
        cancel.cancel();
        std::future::pending::<()>().await
    };
    let outcome = tokio::select! {
        outcome = call => outcome,
        () = arrived => unreachable!(),
    };
    let error = outcome.unwrap_err().to_string();
    assert!(error.contains("cancel"), "{error}");
    assert_eq!(tree(ws.path()), before);
}

/// `skillbox serve` on `ws` with the stager, spoken to in JSON-RPC lines.
fn serve_raw(kit: &Path, ws: &Path, gate: &Gate, env: &[(&str, &str)]) -> Child {
    let mut child = skillbox()
        .args(["serve", "--tools", "all", "--skills"])
        .arg(kit)
        .arg("--workspace")
        .arg(ws)
        .args(["--allow-write", "--allow-net", &gate.grant()])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.as_mut().unwrap();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "transactions-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    child
}

fn send_call(child: &mut Child, steps: &[String]) {
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": TOOL, "arguments": {"steps": steps}}});
    writeln!(child.stdin.as_mut().unwrap(), "{call}").unwrap();
}

pub(crate) fn stages_left(state: &Path) -> usize {
    let Ok(txns) = std::fs::read_dir(state.join("transactions")) else {
        return 0;
    };
    txns.flatten()
        .filter_map(|t| std::fs::read_dir(t.path().join("stages")).ok())
        .map(|s| s.count())
        .sum()
}

#[test]
fn kill_9_mid_call_leaves_the_workspace_byte_for_byte_as_it_was() {
    let kit = stager();
    let ws = workspace(&[
        ("1.txt", "one\n"),
        ("2.txt", "two\n"),
        ("3.txt", "three\n"),
        ("4.txt", "four\n"),
        ("5.txt", "five\n"),
    ]);
    let state = tempfile::tempdir().unwrap();
    let state_env = [("SKILLBOX_STATE_DIR", state.path().to_str().unwrap())];
    let before = tree(ws.path());
    let gate = gate();
    let mut serve = serve_raw(kit.path(), ws.path(), &gate, &state_env);
    // Three of five files written, then the guest waits on the test.
    let mut steps: Vec<String> = (1..=3)
        .map(|n| format!("write /workspace/{n}.txt new"))
        .collect();
    steps.push(format!("fetch {}", gate.url()));
    steps.extend((4..=5).map(|n| format!("write /workspace/{n}.txt new")));
    send_call(&mut serve, &steps);
    gate.arrived
        .recv()
        .expect("the guest never reached its request");
    assert_eq!(
        tree(ws.path()),
        before,
        "a staged write reached the workspace"
    );
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert_eq!(
        stages_left(state.path()),
        1,
        "the dead call's stage is left"
    );

    let restart = call_steps_in(
        kit.path(),
        ws.path(),
        &["read /workspace/1.txt"],
        &[],
        &state_env,
    );
    assert_eq!(restart.code, 0, "{restart:?}");
    restart.stderr_says(&["discarded the staged changes of a call that did not finish"]);
    assert_eq!(restart.json()[0], "one\n");
    assert_eq!(tree(ws.path()), before);
    assert_eq!(stages_left(state.path()), 0);
}

#[test]
fn kill_9_mid_commit_is_finished_by_the_next_start() {
    let kit = stager();
    for pause in ["commit-after-journal", "commit-mid"] {
        let ws = seeded();
        let state = tempfile::tempdir().unwrap();
        let steps = json!({"steps": [
            "remove /workspace/b.txt",
            "write /workspace/a.txt changed",
            "mkdir /workspace/new",
            "write /workspace/new/file.txt made",
        ]});
        let mut child = skillbox()
            .args(["call", TOOL, "--skills"])
            .arg(kit.path())
            .arg("--workspace")
            .arg(ws.path())
            .args(["--allow-write", "--args", &steps.to_string()])
            .env("SKILLBOX_STATE_DIR", state.path())
            .env("SKILLBOX_TEST_PAUSE_AT", pause)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_line(&mut child, &format!("paused at {pause}"));
        child.kill().unwrap();
        child.wait().unwrap();
        let mid = tree(ws.path());
        if pause == "commit-mid" {
            assert!(!mid.contains_key("b.txt"), "the first change was applied");
            assert_eq!(mid["a.txt"], Some(b"alpha\n".to_vec()), "the rest was not");
        }

        let state_env = [("SKILLBOX_STATE_DIR", state.path().to_str().unwrap())];
        let restart = call_steps_in(kit.path(), ws.path(), &["list /workspace"], &[], &state_env);
        assert_eq!(restart.code, 0, "{restart:?}");
        restart.stderr_says(&["finished a workspace commit that was interrupted (4 changes)"]);
        let after = tree(ws.path());
        assert!(!after.contains_key("b.txt"), "{pause}");
        assert_eq!(after["a.txt"], Some(b"changed".to_vec()), "{pause}");
        assert_eq!(after["new/file.txt"], Some(b"made".to_vec()), "{pause}");
        assert_eq!(restart.json()[0], "a.txt,c.txt,docs,new", "{pause}");
        let leftovers: Vec<_> = after
            .keys()
            .filter(|k| k.contains(".skillbox-commit"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        assert_eq!(stages_left(state.path()), 0);
    }
}

#[tokio::test]
async fn a_file_changed_while_the_call_ran_is_a_conflict_and_nothing_is_written() {
    let kit = stager();
    let ws = seeded();
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    let gate = gate();
    let client = serve_stager(kit.path(), ws.path(), &gate, &audit).await;
    let (arrived, release) = (gate.arrived, gate.release);
    let arrived = std::sync::Arc::new(std::sync::Mutex::new(arrived));
    let url = format!("http://127.0.0.1:{}/hold", gate.port);

    // The call reads c.txt and changes a.txt; the test edits c.txt while
    // it waits.
    for (edited, conflicts) in [("c.txt", true), ("docs/readme.md", false)] {
        let steps = json!({"steps": ["read /workspace/c.txt", "write /workspace/a.txt from the call", format!("fetch {url}")]});
        let call = skillbox_e2e::mcp::call(&client, TOOL, steps);
        let edit = {
            let (arrived, release, ws) =
                (arrived.clone(), release.clone(), ws.path().to_path_buf());
            tokio::task::spawn_blocking(move || {
                arrived.lock().unwrap().recv().unwrap();
                std::fs::write(ws.join(edited), "the user's edit\n").unwrap();
                release.send(()).unwrap();
            })
        };
        let (result, edited_ok) = tokio::join!(call, edit);
        edited_ok.unwrap();
        let said = text(&result);
        let after = tree(ws.path());
        assert_eq!(
            after[edited],
            Some(b"the user's edit\n".to_vec()),
            "the user's edit survives"
        );
        if conflicts {
            assert_eq!(result.is_error, Some(true), "{said}");
            assert!(
                said.contains(
                    "`c.txt` changed while the call ran; nothing was written; run it again"
                ),
                "{said}"
            );
            assert_eq!(
                after["a.txt"],
                Some(b"alpha\n".to_vec()),
                "nothing was written"
            );
        } else {
            assert_ne!(result.is_error, Some(true), "{said}");
            assert_eq!(after["a.txt"], Some(b"from the call".to_vec()));
        }
    }
    client.cancel().await.unwrap();
    let outcomes: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["workspace"].clone())
        .collect();
    assert_eq!(outcomes[0]["outcome"], "conflicted", "{outcomes:?}");
    assert_eq!(outcomes[1]["outcome"], "committed", "{outcomes:?}");
    assert_eq!(outcomes[1]["files"], 1);
}

#[tokio::test]
async fn a_dry_run_never_writes_and_later_calls_see_earlier_ones() {
    let kit = stager();
    let ws = seeded();
    let before = tree(ws.path());
    let (client, _) = connect_stdio_as(
        Recorder::default(),
        &[
            "--tools",
            "all",
            "--skills",
            kit.path().to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--dry-run",
        ],
    )
    .await;
    let first = skillbox_e2e::mcp::call(
        &client,
        TOOL,
        json!({"steps": ["write /workspace/plan.txt step one", "remove /workspace/b.txt"]}),
    )
    .await;
    let said = text(&first);
    assert!(
        said.contains("dry run: nothing is written to the workspace"),
        "{said}"
    );
    assert!(
        said.contains("+ added plan.txt (8 B)") && said.contains("- deleted b.txt"),
        "{said}"
    );
    let second = skillbox_e2e::mcp::call(
        &client,
        TOOL,
        json!({"steps": ["read /workspace/plan.txt", "list /workspace"]}),
    )
    .await;
    let said = text(&second);
    assert!(
        said.contains("step one") && said.contains("a.txt,c.txt,docs,plan.txt"),
        "{said}"
    );
    // A failed call leaves the dry run as it was.
    let failed = skillbox_e2e::mcp::call(
        &client,
        TOOL,
        json!({"steps": ["write /workspace/junk.txt x", "fail now"]}),
    )
    .await;
    assert_eq!(failed.is_error, Some(true));
    let third = skillbox_e2e::mcp::call(&client, TOOL, json!({"steps": ["list /workspace"]})).await;
    assert!(
        text(&third).contains("a.txt,c.txt,docs,plan.txt"),
        "{}",
        text(&third)
    );
    client.cancel().await.unwrap();
    assert_eq!(tree(ws.path()), before);
}

#[test]
fn a_dry_run_call_from_the_command_line_writes_nothing() {
    let kit = stager();
    let ws = seeded();
    let before = tree(ws.path());
    let run = call_steps(
        kit.path(),
        ws.path(),
        &["write /workspace/a.txt x"],
        &["--dry-run"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    run.stderr_says(&[
        "dry run: nothing is written",
        "~ changed a.txt (6 B -> 1 B)",
    ]);
    assert_eq!(tree(ws.path()), before);
}

#[test]
fn an_agent_dry_run_writes_a_patch_that_git_applies_to_the_tree_the_run_would_make() {
    use skillbox_e2e::fake_model::{FakeModel, openai_answer, openai_calls};
    let kit = stager();
    let ws = seeded();
    let before = tree(ws.path());
    let steps = json!({"steps": [
        "write /workspace/a.txt alpha\nedited\n",
        "remove /workspace/b.txt",
        "mkdir /workspace/notes",
        "write /workspace/notes/todo.md - ship it\n",
    ]})
    .to_string();
    let model = FakeModel::start(vec![
        openai_calls(&[("c0", "load_skill", r#"{"name": "stager"}"#)], (100, 10)),
        openai_calls(&[("c1", TOOL, &steps)], (100, 10)),
        openai_answer("Done.", (150, 5)),
    ]);
    let out = tempfile::tempdir().unwrap();
    let patch = out.path().join("run.patch");
    let mut cmd = skillbox();
    cmd.args(["agent", "Edit the files.", "--skills"])
        .arg(kit.path())
        .arg("--workspace")
        .arg(ws.path())
        .args(["--dry-run", "--patch"])
        .arg(&patch)
        .env("OPENAI_BASE_URL", format!("{}/v1", model.base))
        .env("OPENAI_API_KEY", "test-key")
        .env_remove("ANTHROPIC_API_KEY");
    let run: Run = cmd.output().unwrap().into();
    assert_eq!(run.code, 0, "{run:?}");
    run.stderr_says(&["dry run: the workspace is untouched"]);
    assert_eq!(tree(ws.path()), before, "the checkout is untouched");

    // A clean copy of the checkout, as git knows it, takes the patch.
    let copy = tempfile::tempdir().unwrap();
    for (path, bytes) in &before {
        match bytes {
            Some(bytes) => std::fs::write(copy.path().join(path), bytes).unwrap(),
            None => std::fs::create_dir_all(copy.path().join(path)).unwrap(),
        }
    }
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(copy.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["apply", "--check", patch.to_str().unwrap()]);
    git(&["apply", patch.to_str().unwrap()]);
    let applied = tree(copy.path());
    assert_eq!(applied["a.txt"], Some(b"alpha\nedited\n".to_vec()));
    assert_eq!(applied["notes/todo.md"], Some(b"- ship it\n".to_vec()));
    assert!(!applied.contains_key("b.txt"));
    assert_eq!(applied["c.txt"], before["c.txt"]);
    let mut patch_text = String::new();
    std::fs::File::open(&patch)
        .unwrap()
        .read_to_string(&mut patch_text)
        .unwrap();
    assert!(
        patch_text.contains("diff --git a/b.txt b/b.txt\ndeleted file mode"),
        "{patch_text}"
    );
}

/// The stager's tool declared destructive, so the default policy asks.
fn destructive_stager() -> tempfile::TempDir {
    let kit = stager();
    let manifest = kit.path().join("stager/skillbox.yaml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("effect: write", "effect: destructive")
        .replace("  network: [\"*\"]\n", "");
    std::fs::write(manifest, text).unwrap();
    kit
}

#[test]
fn the_question_shows_the_staged_diff_and_only_an_approval_commits() {
    if !skillbox_e2e::python_sdk() {
        return;
    }
    let kit = destructive_stager();
    let ws = seeded();
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    let before = tree(ws.path());
    let steps =
        json!({"steps": ["write /workspace/a.txt alpha\nbeta\n", "remove /workspace/c.txt"]});
    let ask = |answer: &str| -> Value {
        let out = std::process::Command::new("python3")
            .arg(skillbox_e2e::repo().join("tests/support/python/confirm_client.py"))
            .args([answer, TOOL, &steps.to_string()])
            .arg(skillbox_e2e::skillbox_bin())
            .args(["--tools", "all", "--skills"])
            .arg(kit.path())
            .arg("--workspace")
            .arg(ws.path())
            .args(["--allow-write", "--audit"])
            .arg(&audit)
            .current_dir(skillbox_e2e::repo())
            .envs(skillbox_e2e::hermetic_env())
            .env("SKILLBOX_STATE_DIR", state.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let declined = ask("decline");
    let question = declined["asked"][0].as_str().unwrap();
    for part in [
        "It would change:",
        "~ changed a.txt (6 B -> 11 B)",
        "- deleted c.txt (8 B)",
        "+beta",
    ] {
        assert!(
            question.contains(part),
            "{part:?} is not in the question: {question}"
        );
    }
    assert_eq!(declined["is_error"], true, "{declined}");
    assert_eq!(tree(ws.path()), before, "a decline wrote something");

    let approved = ask("accept");
    assert_eq!(approved["asked"].as_array().unwrap().len(), 1, "{approved}");
    assert_eq!(approved["is_error"], false, "{approved}");
    let after = tree(ws.path());
    assert_eq!(after["a.txt"], Some(b"alpha\nbeta\n".to_vec()));
    assert!(!after.contains_key("c.txt"));

    let outcomes: Vec<String> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some(format!(
                "{}/{}",
                v["outcome"].as_str()?,
                v["workspace"]["outcome"].as_str()?
            ))
        })
        .collect();
    assert_eq!(
        outcomes,
        ["ok/held", "declined/declined", "ok/held", "ok/committed"],
        "{outcomes:?}"
    );
}

/// What a hostile guest tried against the staged view (found by the red
/// team), each answered as the workspace itself would, or refused.
#[test]
fn staged_paths_behave_as_the_workspace_would_and_links_stay_inside() {
    use std::os::unix::fs::symlink;
    let kit = stager();
    let ws = workspace(&[
        ("sub/y", "y\n"),
        ("sub/z", "z\n"),
        ("a.txt", "A\n"),
        ("t/x", "old\n"),
    ]);
    std::fs::create_dir(ws.path().join("sub/inner")).unwrap();
    symlink("sub", ws.path().join("l")).unwrap();
    symlink("..", ws.path().join("sub/up")).unwrap();

    // A folder made where a link was holds nothing of what the link led to.
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "remove /workspace/l",
            "mkdir /workspace/l",
            "list /workspace/l",
            "write /workspace/l/new x",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()[2], "");
    let after = tree(ws.path());
    for kept in ["sub/y", "sub/z", "sub/inner", "l/new"] {
        assert!(after.contains_key(kept), "{kept} is gone: {after:?}");
    }

    // A link moved, or made, must still lead inside the workspace and not
    // into a project skill folder.
    let run = call_steps(
        kit.path(),
        ws.path(),
        &["rename /workspace/sub/up /workspace/esc"],
        &[],
    );
    assert_ne!(run.code, 0, "{run:?}");
    run.stderr_says(&["must point inside it"]);
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "mkdir /workspace/.claude",
            "symlink skills /workspace/.claude/x",
        ],
        &[],
    );
    assert_ne!(run.code, 0, "{run:?}");
    assert!(!ws.path().join(".claude/x").exists());

    // Writing through a link writes its target; the change set says so.
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "symlink a.txt /workspace/la",
            "write /workspace/la through",
            "read /workspace/a.txt",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()[2], "through");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "through"
    );

    // A folder made in the call moved onto one whose files it deleted.
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "remove /workspace/t/x",
            "mkdir /workspace/n",
            "write /workspace/n/x new",
            "rename /workspace/n /workspace/t",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("t/x")).unwrap(),
        "new"
    );

    // Descriptors of /tmp and of the workspace never mix, and asking for
    // the preopens again leaves the workspace readable.
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "mkdir /tmp/d",
            "write /tmp/d/tmpfile x",
            "mkdir /workspace/m",
            "write /workspace/m/f x",
            "symlink a.txt /workspace/c",
            "list /workspace/m",
            "list /tmp/d",
            "read /workspace/m/f",
        ],
        &["--dry-run"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let said = run.json();
    assert_eq!(
        (said[5].as_str(), said[6].as_str(), said[7].as_str()),
        (Some("f"), Some("tmpfile"), Some("x"))
    );
}

#[test]
fn a_state_folder_inside_the_workspace_is_never_used() {
    let ws = seeded();
    let before = tree(ws.path());
    let run: Run = skillbox()
        .args(["call", "--component"])
        .arg(component("testbed"))
        .arg("stage-steps")
        .arg("--workspace")
        .arg(ws.path())
        .args([
            "--allow-write",
            "--args",
            r#"{"steps": ["write /workspace/a.txt x"]}"#,
        ])
        .env("SKILLBOX_STATE_DIR", ws.path().join(".state"))
        .output()
        .unwrap()
        .into();
    assert_ne!(run.code, 0, "{run:?}");
    run.stderr_says(&[
        "the workspace contains the state folder",
        "SKILLBOX_STATE_DIR",
    ]);
    let after = tree(ws.path());
    assert_eq!(after.get("a.txt"), before.get("a.txt"));
}

#[test]
fn a_commit_finished_after_a_crash_keeps_what_the_user_added_meanwhile() {
    let kit = stager();
    let ws = workspace(&[("d/old", "old\n")]);
    let state = tempfile::tempdir().unwrap();
    let steps = json!({"steps": ["remove /workspace/d/old", "rmdir /workspace/d"]});
    let mut child = skillbox()
        .args(["call", TOOL, "--skills"])
        .arg(kit.path())
        .arg("--workspace")
        .arg(ws.path())
        .args(["--allow-write", "--args", &steps.to_string()])
        .env("SKILLBOX_STATE_DIR", state.path())
        .env("SKILLBOX_TEST_PAUSE_AT", "commit-after-journal")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(&mut child, "paused at commit-after-journal");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::write(ws.path().join("d/mine"), "the user's\n").unwrap();

    let state_env = [("SKILLBOX_STATE_DIR", state.path().to_str().unwrap())];
    let restart = call_steps_in(
        kit.path(),
        ws.path(),
        &["list /workspace/d"],
        &[],
        &state_env,
    );
    assert_eq!(restart.code, 0, "{restart:?}");
    restart.stderr_says(&["finished a workspace commit that was interrupted"]);
    assert_eq!(restart.json()[0], "mine");
    assert_eq!(stages_left(state.path()), 0);
}

#[tokio::test]
async fn the_embedding_api_and_the_metrics_report_what_a_call_changed() {
    let kit = stager();
    let ws = seeded();
    let skillbox = skillbox::Skillbox::builder()
        .skills_dir(kit.path())
        .writable_workspace(ws.path())
        .build()
        .unwrap();
    let steps = json!({"steps": ["write /workspace/new.txt hello", "remove /workspace/b.txt"]});
    let out = skillbox.call_tool(TOOL, steps).await.unwrap();
    let workspace = out
        .workspace
        .expect("a write-granted call reports its changes");
    assert_eq!(workspace.status, skillbox::WorkspaceStatus::Committed);
    assert_eq!(
        workspace.changes.lines(),
        ["- deleted b.txt (6 B)", "+ added new.txt (5 B)"]
    );
    let failed = skillbox
        .call_tool(TOOL, json!({"steps": ["write /workspace/x y", "fail now"]}))
        .await;
    assert!(failed.is_err());
    let metrics = skillbox.metrics();
    for line in [
        r#"skillbox_workspace_transactions_total{outcome="committed"} 1"#,
        r#"skillbox_workspace_transactions_total{outcome="discarded"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} is not in:\n{metrics}");
    }
}

/// The red team's race (docs/security.md): call B stages below a folder
/// and waits; meanwhile that folder becomes a link, so that B's commit,
/// writing by path, would land in `.claude/skills` or leave a link that
/// leads out of the workspace. Each round: B is held at the gate, the
/// swap is made (by call A, as the red team did, and where A is refused,
/// by a process outside the sandbox), then B is released.
#[tokio::test]
async fn a_commit_never_writes_through_a_folder_that_became_a_link() {
    let kit = stager();
    let ws = seeded();
    std::fs::create_dir_all(ws.path().join(".claude/l")).unwrap();
    std::fs::create_dir_all(ws.path().join("a/b/c/d")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    let gate = gate();
    let url = gate.url();
    let client = serve_stager(kit.path(), ws.path(), &gate, &audit).await;
    let (arrived, release) = (
        std::sync::Arc::new(std::sync::Mutex::new(gate.arrived)),
        gate.release,
    );
    let rounds: [(&[&str], &[&str], &str, &str); 2] = [
        (
            &[
                "mkdir /workspace/.claude/l/skills/evil",
                "write /workspace/.claude/l/skills/evil/SKILL.md ---\nname: evil\ndescription: planted\n---\nx\n",
            ],
            &[
                "rmdir /workspace/.claude/l",
                "symlink . /workspace/.claude/l",
            ],
            ".claude/l",
            ".",
        ),
        (
            &[
                "mkdir /workspace/a/b/c/d/x/y/z",
                "symlink ../../../../../../../etc/passwd /workspace/a/b/c/d/x/y/z/esc",
            ],
            &[
                "rmdir /workspace/a/b/c/d",
                "symlink ../../.. /workspace/a/b/c/d",
            ],
            "a/b/c/d",
            "../../..",
        ),
    ];
    for (b_steps, a_steps, swapped, link_to) in rounds {
        let mut steps: Vec<String> = b_steps.iter().map(|s| s.to_string()).collect();
        steps.push(format!("fetch {url}"));
        let call_b = skillbox_e2e::mcp::call(&client, TOOL, json!({ "steps": steps }));
        let swap = {
            let (arrived, release, kit, ws) = (
                arrived.clone(),
                release.clone(),
                kit.path().to_path_buf(),
                ws.path().to_path_buf(),
            );
            tokio::task::spawn_blocking(move || {
                arrived.lock().unwrap().recv().unwrap();
                let a = call_steps(&kit, &ws, a_steps, &[]);
                if a.code != 0 {
                    // Call A may not make such a link any more; the
                    // workspace can still change under B by other means.
                    assert!(a.stderr.contains("refused to link"), "{a:?}");
                    std::fs::remove_dir(ws.join(swapped)).unwrap();
                    std::os::unix::fs::symlink(link_to, ws.join(swapped)).unwrap();
                }
                assert!(
                    std::fs::symlink_metadata(ws.join(swapped))
                        .unwrap()
                        .is_symlink()
                );
                release.send(()).unwrap();
            })
        };
        let (result, swapped_ok) = tokio::join!(call_b, swap);
        swapped_ok.unwrap();
        let said = text(&result);
        assert_eq!(result.is_error, Some(true), "{said}");
        assert!(
            said.contains(&format!(
                "`{swapped}` was moved or replaced by another call"
            )) && said.contains("nothing was written"),
            "{said}"
        );
    }
    client.cancel().await.unwrap();

    assert!(
        !ws.path().join(".claude/skills").exists(),
        "a skill was planted"
    );
    let listed = skillbox()
        .args(["skills", "list", "--trust-project", "--json"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains("\"evil\""),
        "{listed:?}"
    );
    // No link in the workspace leads out of it.
    let root = std::fs::canonicalize(ws.path()).unwrap();
    for (path, content) in tree(ws.path()) {
        if content.as_ref().is_some_and(|c| c.starts_with(b"-> "))
            && let Ok(real) = std::fs::canonicalize(ws.path().join(&path))
        {
            assert!(
                real.starts_with(&root),
                "{path} leads to {}",
                real.display()
            );
        }
    }
    assert!(std::fs::symlink_metadata(ws.path().join("x")).is_err());
    let outcomes: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["workspace"].clone())
        .collect();
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| o["outcome"] == "conflicted"),
        "{outcomes:?}"
    );
}

/// Red team, second round: one call makes `a/b/m -> ../..` (inside) and
/// then `passwd -> a/b/m/../../../etc/passwd`, which is inside by name
/// but, since the file system follows `m` before `..`, leads to
/// `/etc/passwd`. Refused when staged; nothing is written.
#[test]
fn a_link_that_climbs_out_of_another_link_is_refused() {
    let kit = stager();
    let ws = seeded();
    let before = tree(ws.path());
    let run = call_steps(
        kit.path(),
        ws.path(),
        &[
            "mkdir /workspace/a/b",
            "symlink ../.. /workspace/a/b/m",
            "symlink a/b/m/../../../etc/passwd /workspace/passwd",
        ],
        &[],
    );
    assert_ne!(run.code, 0, "{run:?}");
    run.stderr_says(&["climbs (`..`) out of a link"]);
    assert_eq!(tree(ws.path()), before, "nothing was written");
}
