//! Builds the guest components the end-to-end tests run, once, before any
//! test does: the Rust guests (`scripts/build-guests`, which also installs
//! them into the bundled skills) and the Python and JavaScript ones
//! (`scripts/build-foreign`). cargo's own fingerprints decide when this runs
//! again: only when a guest's sources, a WIT package or a build script
//! change, or when a placed component is missing.
//!
//! The tests read the folders this prints as `SKILLBOX_E2E_GUESTS` and
//! `SKILLBOX_E2E_FOREIGN` (empty when a foreign toolchain is missing and
//! `SKILLBOX_REQUIRE_FOREIGN` is unset). Writing into `skills/` is the one
//! output outside `OUT_DIR`: the bundled skills are served from the
//! checkout, so their components must sit in it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf();
    watch_sources(&repo);

    run(&repo, "scripts/build-guests").unwrap_or_else(|why| fail(&why));
    println!(
        "cargo:rustc-env=SKILLBOX_E2E_GUESTS={}",
        repo.join("guest-tools/target/wasm32-wasip2/release")
            .display()
    );
    for placed in placed_components(&repo) {
        println!("cargo:rerun-if-changed={}", placed.display());
    }

    println!("cargo:rerun-if-env-changed=SKILLBOX_REQUIRE_FOREIGN");
    let foreign = optional(
        &repo,
        "scripts/build-foreign",
        "target/foreign",
        "the Python and JavaScript component tests",
    );
    println!("cargo:rustc-env=SKILLBOX_E2E_FOREIGN={foreign}");
    let runtimes = optional(
        &repo,
        "scripts/build-runtimes",
        "target/runtimes",
        "the Python script tests",
    );
    println!("cargo:rustc-env=SKILLBOX_E2E_RUNTIMES={runtimes}");
    let full = optional(
        &repo,
        "scripts/build-python-full",
        "target/runtimes/python-full",
        "the compiled-package tests",
    );
    println!("cargo:rustc-env=SKILLBOX_E2E_PYTHON_FULL={full}");
}

/// Runs a build that needs a toolchain the machine may lack: its output
/// folder, or empty (the tests that need it skip) when the toolchain is
/// missing and `SKILLBOX_REQUIRE_FOREIGN` is unset.
fn optional(repo: &Path, script: &'static str, out: &str, tests: &str) -> String {
    match run(repo, script) {
        Ok(()) => repo.join(out).display().to_string(),
        Err(why)
            if why.code == Some(3) && std::env::var_os("SKILLBOX_REQUIRE_FOREIGN").is_none() =>
        {
            println!("cargo:warning={tests} will skip: {}", why.stderr.trim());
            // Run again on the next build, so installing the toolchain is
            // noticed without touching a source.
            println!(
                "cargo:rerun-if-changed={}",
                repo.join(out).join(".missing-toolchain").display()
            );
            String::new()
        }
        Err(why) => fail(&why),
    }
}

/// The inputs of both guest builds.
fn watch_sources(repo: &Path) {
    for script in [
        "scripts/build-guests",
        "scripts/build-foreign",
        "scripts/build-runtimes",
        "scripts/build-python-full",
    ] {
        println!("cargo:rerun-if-changed={}", repo.join(script).display());
    }
    println!("cargo:rerun-if-changed={}", repo.join("wit").display());
    println!("cargo:rerun-if-changed={}", repo.join("runtimes").display());
    let guests = repo.join("guest-tools");
    let entries = std::fs::read_dir(&guests).expect("guest-tools/ is readable");
    for entry in entries.flatten() {
        // The guests' own target folder changes with every build.
        if entry.file_name() != "target" {
            println!("cargo:rerun-if-changed={}", entry.path().display());
        }
    }
}

/// The components `scripts/build-guests` placed in the bundled skills: a
/// deleted one makes this run again.
fn placed_components(repo: &Path) -> Vec<PathBuf> {
    let mut placed = Vec::new();
    let Ok(skills) = std::fs::read_dir(repo.join("skills")) else {
        return placed;
    };
    for skill in skills.flatten() {
        for kind in ["tools", "scripts"] {
            let Ok(files) = std::fs::read_dir(skill.path().join(kind)) else {
                continue;
            };
            placed.extend(
                files
                    .flatten()
                    .map(|f| f.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "wasm")),
            );
        }
    }
    placed
}

struct Failed {
    script: &'static str,
    code: Option<i32>,
    stderr: String,
}

/// Runs a build script of the repository. The environment cargo gives a
/// build script describes this crate's build, not the guests': a lint
/// wrapper, flags, a target or its features would rebuild every guest (or
/// confuse their build scripts), so only the jobserver and the user's own
/// environment go through.
fn run(repo: &Path, script: &'static str) -> Result<(), Failed> {
    let mut command = Command::new(repo.join(script));
    command.current_dir(repo);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if is_cargo_build_env(&key) {
            command.env_remove(key.as_ref());
        }
    }
    let out = command.output().map_err(|e| Failed {
        script,
        code: None,
        stderr: format!("cannot run it: {e}"),
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(Failed {
        script,
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Whether cargo set `key` for this build script (or for the build that
/// runs it), rather than the user.
fn is_cargo_build_env(key: &str) -> bool {
    const SET_FOR_BUILD_SCRIPTS: &[&str] = &[
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_LINKER",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "TARGET",
        "HOST",
        "OUT_DIR",
        "OPT_LEVEL",
        "DEBUG",
        "PROFILE",
        "NUM_JOBS",
    ];
    const PREFIXES: &[&str] = &[
        "CARGO_FEATURE_",
        "CARGO_CFG_",
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_PROFILE_",
    ];
    SET_FOR_BUILD_SCRIPTS.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

fn fail(why: &Failed) -> ! {
    eprintln!("{}", why.stderr);
    panic!(
        "{} failed ({}); the end-to-end tests need its components",
        why.script,
        why.code
            .map_or("no exit code".into(), |c| format!("exit code {c}"))
    );
}
