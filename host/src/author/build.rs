//! `skillbox build [SKILL_DIR]`: compile a skill's Rust tool to
//! `wasm32-wasip2` and put each component where `skillbox.yaml` says.
//!
//! Which file goes where comes from the manifest: a built `greet_kit.wasm`
//! goes to the component path whose file is `greet-kit.wasm` or
//! `greet_kit.wasm`. cargo reports what it built (`--message-format json`),
//! so nothing guesses at target folders.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::skill::files::{SkillDir, checked_relative};
use crate::skill::manifest;

/// The crate `skillbox build` compiles, relative to the skill folder.
pub const TOOL_CRATE: &str = "tool/Cargo.toml";
const TARGET: &str = "wasm32-wasip2";

/// One component put in place.
#[derive(Debug, Clone)]
pub struct Built {
    /// Its path in the skill, as the manifest names it.
    pub component: String,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "nothing to build: there is no {TOOL_CRATE} in the skill folder. `skillbox build` builds \
         the Rust tool crate that `skillbox new skill NAME --tool rust` creates; for other \
         languages see docs/authoring.md"
    )]
    NoToolCrate,
    #[error(
        "the {TARGET} target is not installed for this Rust toolchain; run `rustup target add \
         {TARGET}` and build again"
    )]
    NoTarget,
    #[error("cannot run cargo ({0}); install Rust with rustup and make sure cargo is on PATH")]
    NoCargo(String),
    #[error("cargo build failed (exit code {0}); its messages are above")]
    Cargo(i32),
    #[error("skillbox.yaml: {0}")]
    Manifest(String),
    #[error(
        "cargo built `{artifact}`, but skillbox.yaml names no component file `{artifact}`; add \
         `- component: tools/{artifact}` under `tools:`"
    )]
    Unplaced { artifact: String },
    #[error("cannot write `{component}`: {reason}")]
    Write { component: String, reason: String },
}

/// Builds the tool crate of the skill in `skill_dir`; cargo's progress
/// goes to `cargo_stderr` (the terminal for the CLI).
pub fn build(skill_dir: &Path, cargo_stderr: Stdio) -> Result<Vec<Built>, BuildError> {
    let crate_manifest = skill_dir.join(TOOL_CRATE);
    if !crate_manifest.is_file() {
        return Err(BuildError::NoToolCrate);
    }
    let components = manifest_components(skill_dir)?;
    check_target()?;
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release", "--target", TARGET])
        .args([
            "--message-format",
            "json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&crate_manifest)
        .stdout(Stdio::piped())
        .stderr(cargo_stderr)
        .spawn()
        .map_err(|e| BuildError::NoCargo(crate::sandbox::io_reason(&e)))?;
    let mut artifacts = Vec::new();
    if let Some(stdout) = cargo.stdout.take() {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            artifacts.extend(wasm_artifacts(&line));
        }
    }
    let status = cargo
        .wait()
        .map_err(|e| BuildError::NoCargo(crate::sandbox::io_reason(&e)))?;
    if !status.success() {
        return Err(BuildError::Cargo(status.code().unwrap_or(-1)));
    }
    artifacts
        .iter()
        .map(|artifact| place(skill_dir, artifact, &components))
        .collect()
}

/// The component paths the manifest names.
fn manifest_components(skill_dir: &Path) -> Result<Vec<String>, BuildError> {
    let dir = SkillDir::open(skill_dir)
        .map_err(|_| BuildError::Manifest("the skill folder cannot be opened".into()))?;
    match manifest::parse(&dir) {
        Ok(Some((m, _))) => m
            .component_paths()
            .map(|path| match checked_relative(path) {
                Ok(_) => Ok(path.to_string()),
                Err(_) => Err(BuildError::Manifest(format!(
                    "component `{path}` must be a path inside the skill folder (no `..`, not \
                     absolute); nothing was built"
                ))),
            })
            .collect(),
        Ok(None) => Err(BuildError::Manifest(
            "there is none; list the tool's component under `tools:` (docs/skillbox-yaml.md)"
                .into(),
        )),
        Err(problems) => Err(BuildError::Manifest(
            problems
                .iter()
                .map(|p| p.message.clone())
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

/// Fails early, with the command that fixes it, when rustup says the
/// target is missing. Without rustup, cargo's own error has to do.
fn check_target() -> Result<(), BuildError> {
    let Ok(out) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
    else {
        return Ok(());
    };
    let installed = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && !installed.lines().any(|l| l.trim() == TARGET) {
        return Err(BuildError::NoTarget);
    }
    Ok(())
}

/// The `.wasm` files one line of cargo's JSON output reports as built.
fn wasm_artifacts(line: &str) -> Vec<PathBuf> {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
        return Vec::new();
    };
    if message["reason"] != "compiler-artifact" {
        return Vec::new();
    }
    message["filenames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .filter(|f| f.ends_with(".wasm"))
        .map(PathBuf::from)
        .collect()
}

fn place(skill_dir: &Path, artifact: &Path, components: &[String]) -> Result<Built, BuildError> {
    let file = artifact
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let same = |component: &&String| {
        Path::new(component.as_str())
            .file_name()
            .is_some_and(|f| f.to_string_lossy().replace('-', "_") == file.replace('-', "_"))
    };
    let component = components
        .iter()
        .find(same)
        .ok_or_else(|| BuildError::Unplaced {
            artifact: file.clone(),
        })?;
    let failed = |e: std::io::Error| BuildError::Write {
        component: component.clone(),
        reason: crate::sandbox::io_reason(&e),
    };
    // Through a handle on the skill folder: a path or a symlink in the
    // skill that leads out of it is refused, never written through.
    let dir = cap_std::fs::Dir::open_ambient_dir(skill_dir, cap_std::ambient_authority())
        .map_err(failed)?;
    let dest = Path::new(component.as_str());
    if let Some(folder) = dest.parent().filter(|f| !f.as_os_str().is_empty()) {
        dir.create_dir_all(folder).map_err(failed)?;
    }
    // Written beside and renamed, so a server never loads half a file.
    let code = std::fs::read(artifact).map_err(failed)?;
    let tmp = dest.with_extension("wasm.building");
    dir.write(&tmp, &code).map_err(failed)?;
    dir.rename(&tmp, &dir, dest).map_err(failed)?;
    Ok(Built {
        component: component.clone(),
        bytes: code.len() as u64,
    })
}
