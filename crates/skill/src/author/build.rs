//! `skillbox build [SKILL_DIR]`: build a skill's tool into a WebAssembly
//! component and put it where `skillbox.yaml` says.
//!
//! The tool's language is told by its folder (`tool/`):
//! - `Cargo.toml`: Rust, `cargo build --release --target wasm32-wasip2`;
//! - `app.py`: Python, componentize-py;
//! - `app.js`: JavaScript, componentize-js.
//!
//! Everything a build writes besides the component goes to a folder of its
//! own under the user's cache (`build/<skill>-<hash>`), so the skill folder
//! holds the skill, not its build. Which file goes where comes from the
//! manifest: a built `greet_kit.wasm` goes to the component path whose
//! file is `greet-kit.wasm` or `greet_kit.wasm`. cargo reports what it
//! built (`--message-format json`), so nothing guesses at target folders.
//!
//! A Rust build runs the crate's build scripts and procedural macros
//! natively, as the user. So `build` refuses a folder that `skillbox new`
//! did not create on this machine unless the user trusts it
//! ([`NativeCode::Trusted`]).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::trust;
use crate::skill::files::{SkillDir, checked_relative};
use crate::skill::manifest;

/// The crate `skillbox build` compiles, relative to the skill folder.
pub const TOOL_CRATE: &str = "tool/Cargo.toml";
const TARGET: &str = "wasm32-wasip2";
/// The Python and JavaScript tools' entry points and WIT folder.
const PYTHON_APP: &str = "tool/app.py";
const JS_APP: &str = "tool/app.js";
const TOOL_WIT: &str = "tool/wit";
/// The toolchain versions the docs and the templates are tested with.
pub(super) const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
pub(super) const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.19.3";

/// The language of a skill's tool, as its `tool/` folder tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolLanguage {
    Rust,
    Python,
    JavaScript,
}

impl ToolLanguage {
    /// What the build runs, for the line printed before it.
    pub fn toolchain(self) -> &'static str {
        match self {
            ToolLanguage::Rust => "cargo build --release --target wasm32-wasip2",
            ToolLanguage::Python => "componentize-py",
            ToolLanguage::JavaScript => "componentize-js",
        }
    }
}

/// Whether a Rust build may run the crate's native code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeCode {
    /// Only for a folder `skillbox new` created on this machine.
    CreatedHere,
    /// The user accepted that this crate's build scripts and procedural
    /// macros run as them (`--trust-build`, or a yes at the prompt).
    Trusted,
}

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
        "nothing to build: the skill folder has no tool/Cargo.toml (Rust), tool/app.py (Python) \
         or tool/app.js (JavaScript). `skillbox new skill NAME --tool rust|python|js` creates one; \
         see docs/authoring.md"
    )]
    NoTool,
    #[error(
        "this folder was not created by `skillbox new` on this machine, and building its Rust \
         tool runs the crate's build scripts and procedural macros natively, as you, outside the \
         sandbox: they can read and change your files and use your network. Read tool/ first \
         (build.rs, and the crates it depends on); if you trust it, build again with \
         --trust-build. Nothing was built"
    )]
    Untrusted,
    #[error(
        "the {TARGET} target is not installed for this Rust toolchain; run `rustup target add \
         {TARGET}` and build again"
    )]
    NoTarget,
    #[error("cannot run cargo ({0}); install Rust with rustup and make sure cargo is on PATH")]
    NoCargo(String),
    #[error("cargo build failed (exit code {0}); its messages are above")]
    Cargo(i32),
    #[error("{tool} is not installed (it builds {language} tools); install it with: {install}")]
    MissingToolchain {
        tool: &'static str,
        language: &'static str,
        install: String,
    },
    #[error("{tool} failed (exit code {code}); its messages are above")]
    Toolchain { tool: &'static str, code: i32 },
    #[error("{TOOL_WIT}: {0}")]
    World(String),
    #[error("skillbox.yaml: {0}")]
    Manifest(String),
    #[error(
        "cargo built `{artifact}`, but skillbox.yaml names no component file `{artifact}`; add \
         `- component: tools/{artifact}` under `tools:`"
    )]
    Unplaced { artifact: String },
    #[error("cannot write `{component}`: {reason}")]
    Write { component: String, reason: String },
    #[error("no cache folder to build in: set SKILLBOX_CACHE_DIR or HOME")]
    NoBuildFolder,
}

/// The language of the tool in `skill_dir`, if it has one.
pub fn tool_language(skill_dir: &Path) -> Result<ToolLanguage, BuildError> {
    if skill_dir.join(TOOL_CRATE).is_file() {
        Ok(ToolLanguage::Rust)
    } else if skill_dir.join(PYTHON_APP).is_file() {
        Ok(ToolLanguage::Python)
    } else if skill_dir.join(JS_APP).is_file() {
        Ok(ToolLanguage::JavaScript)
    } else {
        Err(BuildError::NoTool)
    }
}

/// Builds the tool of the skill in `skill_dir`; the toolchain's progress
/// goes to `progress` (the terminal for the CLI).
pub fn build(
    skill_dir: &Path,
    native_code: NativeCode,
    progress: Stdio,
) -> Result<Vec<Built>, BuildError> {
    // Absolute, since the toolchains run in the build folder.
    let absolute = std::path::absolute(skill_dir).unwrap_or_else(|_| skill_dir.to_path_buf());
    let skill_dir = absolute.as_path();
    let language = tool_language(skill_dir)?;
    let components = manifest_components(skill_dir)?;
    let work = build_folder(skill_dir)?;
    match language {
        ToolLanguage::Rust => {
            if native_code == NativeCode::CreatedHere && !trust::created_here(skill_dir) {
                return Err(BuildError::Untrusted);
            }
            build_rust(skill_dir, &work, &components, progress)
        }
        ToolLanguage::Python | ToolLanguage::JavaScript => {
            let dest = single_component(skill_dir, &components)?;
            // The toolchains run the app to pre-initialise it, and that
            // writes (Python's bytecode caches): they work on a copy.
            let copy = work.join("src");
            let _ = std::fs::remove_dir_all(&copy);
            copy_tool(&skill_dir.join("tool"), &copy).map_err(|e| BuildError::Write {
                component: "the build folder".into(),
                reason: crate::sandbox::io_reason(&e),
            })?;
            let output = work.join("component.wasm");
            componentize(language, &copy, &output, progress)?;
            place_file(skill_dir, &output, dest).map(|built| vec![built])
        }
    }
}

/// Where the build of `skill_dir` writes: cargo's target folder, the
/// componentizers' output. Keyed by the folder's path, so two skills of
/// one name do not share it.
fn build_folder(skill_dir: &Path) -> Result<PathBuf, BuildError> {
    let canonical = std::fs::canonicalize(skill_dir).unwrap_or_else(|_| skill_dir.to_path_buf());
    let name = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "skill".into());
    let key = crate::sandbox::sha256_hex(canonical.as_os_str().as_encoded_bytes());
    let dir = crate::dirs::cache_dir()
        .ok_or(BuildError::NoBuildFolder)?
        .join("build")
        .join(format!("{name}-{}", &key[..12]));
    std::fs::create_dir_all(&dir).map_err(|e| BuildError::Write {
        component: "the build folder".into(),
        reason: crate::sandbox::io_reason(&e),
    })?;
    Ok(dir)
}

fn build_rust(
    skill_dir: &Path,
    work: &Path,
    components: &[String],
    progress: Stdio,
) -> Result<Vec<Built>, BuildError> {
    check_target()?;
    // A shared target folder the user chose (CARGO_TARGET_DIR) is kept;
    // otherwise the build's own, outside the skill.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| work.join("target"));
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release", "--target", TARGET])
        .args([
            "--message-format",
            "json-render-diagnostics",
            "--target-dir",
        ])
        .arg(&target_dir)
        .arg("--manifest-path")
        .arg(skill_dir.join(TOOL_CRATE))
        .stdout(Stdio::piped())
        .stderr(progress)
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
        .map(|artifact| place(skill_dir, artifact, components))
        .collect()
}

/// Runs componentize-py or componentize-js on a copy of the tool folder
/// (its app and WIT world), writing the component to `output`.
fn componentize(
    language: ToolLanguage,
    tool: &Path,
    output: &Path,
    progress: Stdio,
) -> Result<(), BuildError> {
    let wit = tool.join("wit");
    let world = world_name(&wit)?;
    let (tool, language_name, install, mut command) = match language {
        ToolLanguage::Python => {
            let mut c = Command::new("componentize-py");
            c.arg("-d")
                .arg(&wit)
                .args(["-w", &world, "componentize", "-p"])
                .arg(tool)
                .arg("app")
                .arg("-o")
                .arg(output)
                // Run from the build folder: componentize-py writes its
                // bindings beside where it runs, never into the skill.
                .current_dir(output.parent().unwrap_or(Path::new(".")));
            (
                "componentize-py",
                "Python",
                format!("python3 -m pip install {COMPONENTIZE_PY}"),
                c,
            )
        }
        _ => {
            let mut c = Command::new("componentize-js");
            c.arg(tool.join("app.js"))
                .arg("--wit")
                .arg(&wit)
                .args(["-n", &world, "-o"])
                .arg(output);
            (
                "componentize-js",
                "JavaScript",
                format!("npm install -g {COMPONENTIZE_JS}"),
                c,
            )
        }
    };
    let status = command
        .stdout(Stdio::null())
        .stderr(progress)
        .status()
        .map_err(|_| BuildError::MissingToolchain {
            tool,
            language: language_name,
            install,
        })?;
    if !status.success() {
        return Err(BuildError::Toolchain {
            tool,
            code: status.code().unwrap_or(-1),
        });
    }
    Ok(())
}

/// Copies the tool folder, without what its toolchains left in it.
fn copy_tool(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let kind = entry.file_type()?;
        if crate::skill::fileset::BUILD_OUTPUTS.contains(&name.to_string_lossy().as_ref()) {
            continue;
        }
        if kind.is_dir() {
            copy_tool(&entry.path(), &to.join(&name))?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), to.join(&name))?;
        }
    }
    Ok(())
}

/// The world the tool's WIT folder declares (`world NAME {`): the one,
/// or the one named `tool` when there are several.
fn world_name(wit: &Path) -> Result<String, BuildError> {
    let entries = std::fs::read_dir(wit)
        .map_err(|_| BuildError::World("it is missing; the tool's WIT world goes there".into()))?;
    let mut worlds = Vec::new();
    for entry in entries.flatten() {
        if entry.path().extension().is_none_or(|e| e != "wit") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        worlds.extend(text.lines().filter_map(|line| {
            let rest = line.trim_start().strip_prefix("world ")?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then_some(name)
        }));
    }
    match worlds.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(BuildError::World(
            "no `world NAME { … }` is declared".into(),
        )),
        many if many.iter().any(|w| w == "tool") => Ok("tool".into()),
        many => Err(BuildError::World(format!(
            "it declares several worlds ({}); name the tool's world `tool`",
            many.join(", ")
        ))),
    }
}

/// The one tool component the manifest names, for a Python or JavaScript
/// tool (which builds one component).
fn single_component<'a>(skill_dir: &Path, components: &'a [String]) -> Result<&'a str, BuildError> {
    let name = skill_dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let named = components.iter().find(|c| {
        Path::new(c.as_str())
            .file_stem()
            .is_some_and(|s| *s == *name)
    });
    match (named, components) {
        (Some(c), _) => Ok(c),
        (None, [only]) => Ok(only),
        _ => Err(BuildError::Manifest(format!(
            "it names {} components and none is `tools/{name}.wasm`; a Python or JavaScript tool \
             builds one component, so name it `tools/{name}.wasm`",
            components.len()
        ))),
    }
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
    place_file(skill_dir, artifact, component)
}

/// Copies the built `artifact` to `component` inside the skill folder.
fn place_file(skill_dir: &Path, artifact: &Path, component: &str) -> Result<Built, BuildError> {
    let failed = |e: std::io::Error| BuildError::Write {
        component: component.to_string(),
        reason: crate::sandbox::io_reason(&e),
    };
    // Through a handle on the skill folder: a path or a symlink in the
    // skill that leads out of it is refused, never written through.
    let dir = cap_std::fs::Dir::open_ambient_dir(skill_dir, cap_std::ambient_authority())
        .map_err(failed)?;
    let dest = Path::new(component);
    if let Some(folder) = dest.parent().filter(|f| !f.as_os_str().is_empty()) {
        dir.create_dir_all(folder).map_err(failed)?;
    }
    // Written beside and renamed, so a server never loads half a file.
    let code = std::fs::read(artifact).map_err(failed)?;
    let tmp = dest.with_extension("wasm.building");
    dir.write(&tmp, &code).map_err(failed)?;
    dir.rename(&tmp, &dir, dest).map_err(failed)?;
    Ok(Built {
        component: component.to_string(),
        bytes: code.len() as u64,
    })
}
