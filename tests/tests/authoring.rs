//! A newcomer's path, as the README and docs/authoring.md tell it:
//! `skillbox new skill NAME --tool rust`, `skillbox build`, `skills check`,
//! and the new tool answering over MCP.

use std::path::Path;

use serde_json::json;
use skillbox_e2e::mcp::{call, connect_stdio, text};
use skillbox_e2e::{Run, repo, skillbox};

/// Does what `new skill` asks of its author: SKILL.md in their own words.
fn finish_template(skill: &Path) {
    let path = skill.join("SKILL.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let finished = text
        .replace(
            "; replace this with what your skill does, when to use it and when not to.",
            ". Not for letters or long messages.",
        )
        .replace(
            "One paragraph on what this skill is for and what it returns.",
            "Greets one person by name and returns the greeting.",
        );
    assert_ne!(finished, text, "the template changed; update this test");
    std::fs::write(path, finished).unwrap();
}

#[tokio::test]
async fn a_new_skill_builds_checks_and_answers_over_mcp() {
    let parent = tempfile::tempdir().unwrap();
    let created: Run = skillbox()
        .args(["new", "skill", "hello-kit", "--tool", "rust", "--dir"])
        .arg(parent.path())
        .output()
        .unwrap()
        .into();
    assert_eq!(created.code, 0, "{created:?}");
    assert!(created.stdout.contains("skillbox build"), "{created:?}");
    let skill = parent.path().join("hello-kit");

    // Before the build the manifest names a component that is not there.
    let early: Run = skillbox()
        .args(["skills", "check"])
        .arg(&skill)
        .output()
        .unwrap()
        .into();
    assert_ne!(early.code, 0, "a missing component is reported: {early:?}");

    // The guests' target folder holds wit-bindgen already built with the
    // same profile, so the test does not compile it again.
    let built: Run = skillbox()
        .arg("build")
        .arg(&skill)
        .env("CARGO_TARGET_DIR", repo().join("guest-tools/target"))
        .output()
        .unwrap()
        .into();
    assert_eq!(built.code, 0, "{built:?}");
    assert!(built.stdout.contains("tools/hello-kit.wasm"), "{built:?}");
    built.stderr_says(&["natively"]);
    // The build happened elsewhere: the skill folder holds the component
    // and what `new` wrote, no build output.
    for build_output in ["target", "tool/target"] {
        assert!(
            !skill.join(build_output).exists(),
            "{build_output} left in the skill folder"
        );
    }

    // The template's placeholder text is reported until it is replaced.
    let unfinished: Run = skillbox()
        .args(["skills", "check"])
        .arg(&skill)
        .output()
        .unwrap()
        .into();
    assert_eq!(unfinished.code, 1, "{unfinished:?}");
    unfinished.stdout_says(&["template-text"]);
    finish_template(&skill);

    // As a newcomer types it: a relative path, and the folder itself.
    for (cwd, path) in [(parent.path(), "hello-kit"), (skill.as_path(), ".")] {
        let checked: Run = skillbox()
            .args(["skills", "check", path])
            .current_dir(cwd)
            .output()
            .unwrap()
            .into();
        assert_eq!(checked.code, 0, "skills check {path}: {checked:?}");
    }

    let skills = parent.path().to_str().unwrap();
    let (client, _) = connect_stdio(&["--no-audit", "--tools", "all", "--skills", skills]).await;
    let hello = call(&client, "hello-kit__greet", json!({"name": "Ada"})).await;
    assert_ne!(hello.is_error, Some(true), "{hello:?}");
    assert!(text(&hello).contains("Hello, Ada!"), "{hello:?}");
    let refused = call(&client, "hello-kit__greet", json!({"name": " "})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(text(&refused).contains("give a name"), "{refused:?}");
    client.cancel().await.unwrap();
}

#[test]
fn new_refuses_a_bad_name_and_an_existing_folder() {
    let parent = tempfile::tempdir().unwrap();
    let new = |name: &str| -> Run {
        skillbox()
            .args(["new", "skill", name, "--dir"])
            .arg(parent.path())
            .output()
            .unwrap()
            .into()
    };
    let bad = new("Hello_Kit");
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("not a valid skill name"), "{bad:?}");
    assert_eq!(new("plain").code, 0);
    let again = new("plain");
    assert_eq!(again.code, 2, "{again:?}");
    assert!(again.stderr.contains("already exists"), "{again:?}");
    let check = || -> Run {
        skillbox()
            .args(["skills", "check"])
            .arg(parent.path().join("plain"))
            .output()
            .unwrap()
            .into()
    };
    let unfinished = check();
    assert_eq!(unfinished.code, 1, "{unfinished:?}");
    unfinished.stdout_says(&["template-text"]);
    finish_template(&parent.path().join("plain"));
    let finished = check();
    assert_eq!(
        finished.code, 0,
        "an instruction-only skill checks clean: {finished:?}"
    );
}

#[test]
fn build_says_what_is_missing() {
    let parent = tempfile::tempdir().unwrap();
    let created: Run = skillbox()
        .args(["new", "skill", "no-tool", "--dir"])
        .arg(parent.path())
        .output()
        .unwrap()
        .into();
    assert_eq!(created.code, 0);
    let built: Run = skillbox()
        .arg("build")
        .arg(parent.path().join("no-tool"))
        .output()
        .unwrap()
        .into();
    assert_eq!(built.code, 1, "{built:?}");
    assert!(built.stderr.contains("nothing to build"), "{built:?}");
}

/// A skill folder from someone else: its manifest or a symlink in it
/// points outside the folder. `skillbox build` writes nothing there.
#[test]
fn build_writes_only_inside_the_skill_folder() {
    let parent = tempfile::tempdir().unwrap();
    let created: Run = skillbox()
        .args(["new", "skill", "escape-kit", "--tool", "rust", "--dir"])
        .arg(parent.path())
        .output()
        .unwrap()
        .into();
    assert_eq!(created.code, 0, "{created:?}");
    let skill = parent.path().join("escape-kit");
    let outside = parent.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let build = || -> Run {
        skillbox()
            .arg("build")
            .arg(&skill)
            .env("CARGO_TARGET_DIR", repo().join("guest-tools/target"))
            .output()
            .unwrap()
            .into()
    };

    let manifest = skill.join("skillbox.yaml");
    let original = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        original.replace("tools/escape-kit.wasm", "../outside/escape-kit.wasm"),
    )
    .unwrap();
    let dotdot = build();
    assert_eq!(dotdot.code, 1, "{dotdot:?}");
    assert!(
        dotdot
            .stderr
            .contains("must be a path inside the skill folder"),
        "{dotdot:?}"
    );

    std::fs::write(&manifest, original).unwrap();
    std::os::unix::fs::symlink(&outside, skill.join("tools")).unwrap();
    let linked = build();
    assert_eq!(linked.code, 1, "{linked:?}");
    assert!(
        linked
            .stderr
            .contains("cannot write `tools/escape-kit.wasm`"),
        "{linked:?}"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside the skill folder"
    );
}
