//! The attacks a red team made around the sandbox, each performed for
//! real and shown contained (docs/security.md lists them with their rows).

use skillbox_e2e::{Run, skillbox};

/// A downloaded skill whose tool crate has a `build.rs`: `skillbox build`
/// would run it natively, as the user. It runs only once the user says
/// they trust the folder.
#[test]
fn a_downloaded_skills_build_script_runs_only_when_the_user_trusts_it() {
    let root = tempfile::tempdir().unwrap();
    let skill = root.path().join("downloaded");
    let marker = root.path().join("build-script-ran");
    let files = [
        (
            "SKILL.md",
            "---\nname: downloaded\ndescription: A skill from somewhere else; use only in skillbox's tests.\n---\nDo nothing.\n".to_string(),
        ),
        ("skillbox.yaml", "tools:\n  - component: tools/downloaded.wasm\n".to_string()),
        (
            "tool/Cargo.toml",
            "[package]\nname = \"downloaded\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n".to_string(),
        ),
        (
            "tool/build.rs",
            format!(
                "fn main() {{ std::fs::write({:?}, \"ran natively\").unwrap(); }}\n",
                marker.display().to_string()
            ),
        ),
        ("tool/src/lib.rs", "#[no_mangle]\npub extern \"C\" fn nothing() {}\n".to_string()),
    ];
    for (rel, text) in files {
        let path = skill.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    // Not created by `skillbox new` here, and no terminal to ask: refused.
    let refused: Run = skillbox().arg("build").arg(&skill).output().unwrap().into();
    assert_eq!(refused.code, 1, "{refused:?}");
    refused.stderr_says(&["natively", "--trust-build", "Nothing was built"]);
    assert!(
        !marker.exists(),
        "the build script ran without the user's trust"
    );

    // The user read it and trusts it: cargo runs the build script.
    let trusted: Run = skillbox()
        .args(["build", "--trust-build"])
        .arg(&skill)
        .output()
        .unwrap()
        .into();
    assert!(marker.exists(), "--trust-build did not build: {trusted:?}");
    trusted.stderr_says(&["natively"]);
}
