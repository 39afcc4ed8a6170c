//! The CI agent script the GitHub Action runs (`scripts/ci-agent`), run as
//! a runner would, against the fake OpenAI-compatible provider on
//! loopback: patch mode leaves the checkout untouched and writes a patch
//! `git apply` takes, write mode changes the checkout, outputs and the job
//! summary are written, and the model's key reaches the provider and no
//! file or log.

use std::path::Path;

use serde_json::json;
use skillbox_e2e::Run;
use skillbox_e2e::fake_model::{FakeModel, openai_answer, openai_calls};

use crate::transactions::{TOOL, seeded, stager, tree};

const KEY: &str = "sk-ci-test-5f1e2d9c";

/// What one run of the script left: its own output, and the files a
/// runner reads afterwards.
struct CiRun {
    run: Run,
    outputs: String,
    summary: String,
    out: tempfile::TempDir,
}

/// The writes of the agent in most tests.
const EDITS: &[&str] = &[
    "write /workspace/a.txt alpha\nedited by the agent\n",
    "write /workspace/notes.md - checked\n",
];

/// Runs `scripts/ci-agent` in `mode` on `ws` with the stager skill, its
/// model answering with one call of `steps` and a final message.
fn ci_agent(ws: &Path, mode: &str, steps: &[&str]) -> Option<(CiRun, FakeModel)> {
    if std::process::Command::new("jq")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("SKILLBOX_REQUIRE_PROGRAMS").is_none(),
            "jq is required (.ci/run installs it)"
        );
        eprintln!("skipped: jq is not installed");
        return None;
    }
    let kit = stager();
    let steps = json!({ "steps": steps }).to_string();
    let model = FakeModel::start(vec![
        openai_calls(&[("c0", "load_skill", r#"{"name": "stager"}"#)], (100, 10)),
        openai_calls(&[("c1", TOOL, &steps)], (120, 12)),
        openai_answer("Edited a.txt and\nwrote notes.md.", (150, 5)),
    ]);
    let out = tempfile::tempdir().unwrap();
    let outputs = out.path().join("github_output");
    let summary = out.path().join("step_summary.md");
    let run: Run = std::process::Command::new(skillbox_e2e::repo().join("scripts/ci-agent"))
        .envs(skillbox_e2e::hermetic_env())
        .env("SKILLBOX_TASK", "Edit the files.")
        .env("SKILLBOX_API_KEY", KEY)
        .env("SKILLBOX_MODEL", "openai:test-model")
        .env("SKILLBOX_BASE_URL", format!("{}/v1", model.base))
        .env("SKILLBOX_MODE", mode)
        .env("SKILLBOX_SKILLS", kit.path())
        .env("SKILLBOX_WORKSPACE", ws)
        .env("SKILLBOX_OUT", out.path().join("run"))
        .env("SKILLBOX_BIN", skillbox_e2e::skillbox_bin())
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_OUTPUT", &outputs)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap()
        .into();
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let ci = CiRun {
        outputs: read(&outputs),
        summary: read(&summary),
        run,
        out,
    };
    Some((ci, model))
}

/// The key went to the provider as the bearer token, and is nowhere else:
/// not in the script's output (past the mask command GitHub needs), not in
/// the outputs, the summary, the trace, the audit or the patch.
fn the_key_reached_only_the_provider(ci: &CiRun, model: &FakeModel) {
    let requests = model.requests.lock().unwrap().clone();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(
            request.headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {KEY}").as_str()),
            "{request:?}"
        );
    }
    let stdout_without_mask = ci.run.stdout.replace(&format!("::add-mask::{KEY}"), "");
    assert!(!stdout_without_mask.contains(KEY), "{}", ci.run.stdout);
    assert!(!ci.run.stderr.contains(KEY), "{}", ci.run.stderr);
    assert!(!ci.outputs.contains(KEY));
    assert!(!ci.summary.contains(KEY));
    for entry in std::fs::read_dir(ci.out.path().join("run")).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert!(!text.contains(KEY), "the key is in {}", path.display());
    }
}

#[test]
fn patch_mode_leaves_the_checkout_and_writes_a_patch_outputs_and_a_summary() {
    let ws = seeded();
    let before = tree(ws.path());
    let Some((ci, model)) = ci_agent(ws.path(), "patch", EDITS) else {
        return;
    };
    assert_eq!(ci.run.code, 0, "{:?}", ci.run);
    assert_eq!(tree(ws.path()), before, "patch mode touched the checkout");

    let patch = ci.out.path().join("run/changes.patch");
    for line in [
        "answer<<skillbox-",
        "Edited a.txt and\nwrote notes.md.\n",
        &format!("patch={}", patch.display()),
        "exit-code=0",
        "outcome=done",
    ] {
        assert!(ci.outputs.contains(line), "lacks {line:?}: {}", ci.outputs);
    }
    // A checkout as git has it takes the patch.
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    git(&["apply", patch.to_str().unwrap()]);
    let applied = tree(ws.path());
    assert_eq!(
        applied["a.txt"],
        Some(b"alpha\nedited by the agent\n".to_vec())
    );
    assert_eq!(applied["notes.md"], Some(b"- checked\n".to_vec()));

    for part in [
        "### skillbox agent: done",
        "| patch | 3 | 2 | 370 (0) | 27 | 0 |",
        &format!("- `{TOOL}` ×1 (ok)"),
        "- `load_skill` ×1",
        "a.txt",
        "notes.md",
        "The checkout is untouched",
        "> Edited a.txt and\n> wrote notes.md.",
    ] {
        assert!(ci.summary.contains(part), "lacks {part:?}: {}", ci.summary);
    }
    the_key_reached_only_the_provider(&ci, &model);
}

#[test]
fn write_mode_changes_the_checkout() {
    let ws = seeded();
    let Some((ci, model)) = ci_agent(ws.path(), "write", EDITS) else {
        return;
    };
    assert_eq!(ci.run.code, 0, "{:?}", ci.run);
    let after = tree(ws.path());
    assert_eq!(
        after["a.txt"],
        Some(b"alpha\nedited by the agent\n".to_vec())
    );
    assert_eq!(after["notes.md"], Some(b"- checked\n".to_vec()));
    assert!(ci.summary.contains("| write | 3 | 2 |"), "{}", ci.summary);
    assert!(
        ci.summary.contains("Applied to the checkout."),
        "{}",
        ci.summary
    );
    the_key_reached_only_the_provider(&ci, &model);
}

/// A hook or a config under `.git` would run outside the sandbox at the
/// next commit: write mode lands nothing when the agent wrote there, not
/// even its other changes.
#[test]
fn write_mode_lands_nothing_when_the_agent_wrote_under_dot_git() {
    let ws = seeded();
    std::fs::create_dir_all(ws.path().join(".git")).unwrap();
    std::fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
    let before = tree(ws.path());
    let steps = [
        "write /workspace/a.txt alpha\nedited by the agent\n",
        "write /workspace/.git/config [core]\n\tfsmonitor = touch /tmp/owned\n",
    ];
    let Some((ci, _model)) = ci_agent(ws.path(), "write", &steps) else {
        return;
    };
    assert_eq!(ci.run.code, 10, "{:?}", ci.run);
    assert_eq!(tree(ws.path()), before, "write mode changed the checkout");
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(ci.outputs.contains("exit-code=10"), "{}", ci.outputs);
    assert!(
        ci.summary.contains("**Not applied to the checkout.**"),
        "{}",
        ci.summary
    );
    assert!(
        ci.run
            .stdout
            .contains("::error title=skillbox agent::its changes did not apply"),
        "{:?}",
        ci.run
    );
}

#[test]
fn a_bad_input_is_an_annotated_error_before_anything_runs() {
    let ws = seeded();
    let out: Run = std::process::Command::new(skillbox_e2e::repo().join("scripts/ci-agent"))
        .envs(skillbox_e2e::hermetic_env())
        .env("SKILLBOX_TASK", "Edit the files.")
        .env("SKILLBOX_MODE", "yolo")
        .env("SKILLBOX_WORKSPACE", ws.path())
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stdout
            .contains("::error title=skillbox agent::mode 'yolo' is not one of: patch"),
        "{out:?}"
    );
}
