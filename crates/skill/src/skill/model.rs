//! A loaded skill, and loading one folder into it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::diagnostic::Diagnostic;
use super::files::{MAX_SKILL_FILE_BYTES, ReadError, SkillDir};
use super::frontmatter::{self, Problem, Strictness};
use super::imports::top_level_imports;
use super::manifest::{self, MANIFEST_FILE, Manifest};
use super::meta::{self, SkillMeta};
use super::source::{Source, SourceKind};
use crate::sandbox::DigestMemo;
use crate::sandbox::PinnedDir;

pub const SKILL_FILE: &str = "SKILL.md";
/// Reference files listed per skill.
const MAX_REFERENCES: usize = 200;

/// A skill that passed every check. Never built half-valid.
#[derive(Debug, Clone)]
pub struct Skill {
    pub meta: SkillMeta,
    /// The Markdown instructions (tier 2).
    pub body: String,
    pub body_line: usize,
    /// Where the folder was when the catalog was built (for messages and
    /// the moved-folder check; reads go through `files`).
    pub dir: PathBuf,
    /// The folder, opened once when the catalog was built. Every read and
    /// every call's `/skill` mount use this handle, never the path.
    pub files: SkillDir,
    pub source: SourceKind,
    pub trusted: bool,
    /// `sha256:…` of SKILL.md.
    pub digest: String,
    pub manifest: Option<Manifest>,
    /// `(path in the skill, sha256:…)` of each component the manifest names.
    pub components: Vec<(String, String)>,
    /// Files under `references/` (tier 3), relative to the skill folder.
    pub references: Vec<String>,
    /// The frontmatter as written (every key), as JSON.
    pub frontmatter: serde_json::Value,
    /// Where an installed skill came from, from its source's lock; `None`
    /// for a folder no `skillbox add` installed.
    pub provenance: Option<Arc<super::lock::Provenance>>,
    /// Every file the skill serves, with its digest: computed on first use
    /// (it reads every file) and kept with this catalog's skill.
    served_files: Arc<OnceLock<Arc<Vec<SkillFile>>>>,
    /// The top-level modules the skill's Python files import: computed on
    /// first use, like `served_files`.
    python_imports: Arc<OnceLock<Arc<PythonImports>>>,
}

/// The top-level modules each Python file of a skill imports, by its path.
pub type PythonImports = BTreeMap<String, BTreeSet<String>>;

/// One file of a skill, as the Skills extension lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// Relative to the skill folder, `/`-separated.
    pub path: String,
    /// `sha256:<hex>` of the bytes served.
    pub digest: String,
    pub size: u64,
}

/// The most module names read from one skill's Python files, over all of
/// them: the walk that chooses a runtime costs no more than this.
const MAX_SKILL_IMPORTS: usize = 20_000;

/// The largest Python file whose imports are read; a larger one is data,
/// not a module a person wrote.
const MAX_PYTHON_SOURCE_BYTES: u64 = 4 * 1024 * 1024;

/// Files listed in one skill's manifest at most.
pub const MAX_MANIFEST_FILES: usize = 1000;
/// The largest file served (components included); larger files are left
/// out of the manifest.
pub const MAX_SERVED_FILE_BYTES: u64 = 64 * 1024 * 1024;

impl Skill {
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    pub fn model_invocable(&self) -> bool {
        !self.meta.disable_model_invocation
    }

    pub fn user_invocable(&self) -> bool {
        self.meta.user_invocable
    }

    pub fn script_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .manifest
            .as_ref()
            .map(|m| m.scripts.iter().map(|s| s.name()).collect())
            .unwrap_or_default();
        names.extend(self.source_scripts());
        names
    }

    /// The Python and shell scripts under `scripts/` the skill serves, by
    /// path: they run without a manifest (see [`is_runnable_script`]).
    pub fn source_scripts(&self) -> Vec<String> {
        self.files
            .list_files("scripts", MAX_MANIFEST_FILES)
            .into_iter()
            .filter(|path| {
                is_runnable_script(path)
                    && (path.to_ascii_lowercase().ends_with(".py")
                        || super::programs::is_shell_script(path))
            })
            .collect()
    }

    /// The shell a shell script of the skill asks for (`programs.rs`);
    /// `Err` names what its `#!` line asks for when that is no shell.
    pub fn shell_of(&self, rel: &str) -> Result<super::programs::Interpreter, String> {
        let head = self.read_served(rel, 4096).unwrap_or_default();
        let text = String::from_utf8_lossy(&head);
        super::programs::shell_interpreter(rel, text.lines().next().unwrap_or_default())
    }

    /// Whether `rel` is a file the skill serves (not hidden, ignored or a
    /// build output).
    pub fn serves_file(&self, rel: &str) -> bool {
        self.files.serves_file(rel)
    }

    /// Whether `rel` is one of the skill's runnable scripts: by its path
    /// ([`is_runnable_script`]), served, and a regular file reached through
    /// no link (a link named like a script could lead to a module or a
    /// reference, and the listing, which shows regular files, would not
    /// show it).
    pub fn runs_script(&self, rel: &str) -> bool {
        is_runnable_script(rel) && self.serves_file(rel) && self.files.has_no_link(rel)
    }

    /// The folder as the sandbox mounts it at `/skill`.
    pub fn mount(&self) -> PinnedDir {
        self.files.pinned(&self.dir)
    }

    /// Whether the skill's path still leads to the folder that was loaded.
    /// A folder renamed or swapped for a symlink since then does not.
    pub fn is_in_place(&self) -> bool {
        self.files.still_at(&self.dir)
    }

    /// Whether `rel` is a component the manifest names. Components run as
    /// this server's tools and scripts; no other client can run them, so
    /// they are not served as files (the Skills extension's manifest,
    /// resources and `read_skill_file` leave them out) and a skill with a
    /// large componentize-py tool stays within the extension's limits.
    /// Publishing ships them.
    pub fn is_component(&self, rel: &str) -> bool {
        let rel = rel.trim_start_matches("./");
        self.components.iter().any(|(path, _)| path == rel)
    }

    /// Reads one of the files the skill serves, whole, refusing files over
    /// `limit` bytes, build outputs, hidden and ignored files
    /// (`fileset.rs`), and components.
    pub fn read_served(&self, rel: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        if self.is_component(rel) {
            return Err(ReadError::Component);
        }
        self.files.read_served(rel, limit)
    }

    /// Every file the skill serves with its digest and size, read through
    /// the pinned folder. Reads every file the first time: call it off the
    /// async runtime.
    pub fn served_files(&self) -> Arc<Vec<SkillFile>> {
        self.served_files
            .get_or_init(|| {
                let files = self
                    .files
                    .list_all_files(MAX_MANIFEST_FILES)
                    .into_iter()
                    .filter(|path| !self.is_component(path))
                    .filter_map(|path| {
                        let bytes = self.read_served(&path, MAX_SERVED_FILE_BYTES).ok()?;
                        Some(SkillFile {
                            digest: digest(&bytes),
                            size: bytes.len() as u64,
                            path,
                        })
                    })
                    .collect();
                Arc::new(files)
            })
            .clone()
    }

    /// The top-level modules each of the skill's `.py` files imports, by
    /// the file's path, read from their import lines. Reads every Python
    /// file the first time: call it off the async runtime.
    pub fn python_imports(&self) -> Arc<PythonImports> {
        self.python_imports
            .get_or_init(|| {
                let mut by_file = PythonImports::new();
                let mut read = 0;
                for path in self.files.list_all_files(MAX_MANIFEST_FILES) {
                    if !path.ends_with(".py") {
                        continue;
                    }
                    if read >= MAX_SKILL_IMPORTS {
                        tracing::warn!(
                            skill = self.name(),
                            "its Python files import more than {MAX_SKILL_IMPORTS} modules; \
                             the rest are not read when choosing a Python runtime"
                        );
                        break;
                    }
                    if let Ok(bytes) = self.read_served(&path, MAX_PYTHON_SOURCE_BYTES) {
                        let mut found = BTreeSet::new();
                        top_level_imports(&String::from_utf8_lossy(&bytes), &mut found);
                        read += found.len();
                        by_file.insert(path, found);
                    }
                }
                Arc::new(by_file)
            })
            .clone()
    }

    /// The host programs the skill's scripts start: those its Python
    /// files name (`skill/programs.rs`), and the shell each shell script
    /// asks for. Reads every Python file: call it off the async runtime.
    pub fn programs_named(&self) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for path in self.files.list_all_files(MAX_MANIFEST_FILES) {
            if path.ends_with(".py")
                && let Ok(bytes) = self.read_served(&path, MAX_PYTHON_SOURCE_BYTES)
            {
                super::programs::programs_named(&String::from_utf8_lossy(&bytes), &mut found);
            }
        }
        for script in self.source_scripts() {
            if super::programs::is_shell_script(&script)
                && let Ok(interpreter) = self.shell_of(&script)
            {
                found.insert(interpreter.shell);
            }
        }
        found
    }

    /// The top-level modules the skill's Python file `rel` imports, read
    /// now: for a file [`Skill::python_imports`] left unread because the
    /// skill's files import too many.
    pub fn python_imports_of(&self, rel: &str) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        if let Ok(bytes) = self.read_served(rel, MAX_PYTHON_SOURCE_BYTES) {
            top_level_imports(&String::from_utf8_lossy(&bytes), &mut found);
        }
        found
    }

    pub fn component_digest(&self, rel: &str) -> Option<&str> {
        self.components
            .iter()
            .find(|(p, _)| p == rel)
            .map(|(_, d)| d.as_str())
    }
}

/// Loads the skill in `dir`. Returns the skill only when there is no error;
/// warnings come back either way.
pub fn load(
    dir: &Path,
    source: &Source,
    strictness: Strictness,
) -> (Option<Skill>, Vec<Diagnostic>) {
    load_with_digests(dir, source, strictness, Known::default())
}

/// What is known of a skill's files before it is loaded: an installed
/// skill's digests, from the lock its files were just checked against,
/// and the digests remembered from earlier starts.
#[derive(Clone, Copy)]
pub(crate) struct Known<'a> {
    pub digests: &'a BTreeMap<String, String>,
    pub memo: Option<&'a DigestMemo>,
}

impl Default for Known<'_> {
    fn default() -> Self {
        Known {
            digests: const { &BTreeMap::new() },
            memo: None,
        }
    }
}

/// [`load`], taking a component's digest from what is `known` (an
/// installed skill's lock, whose files were just checked against it; the
/// digest memo) instead of reading and hashing it again: those SHA-256s
/// were most of a start's CPU. Code read to be compiled is still checked
/// against the digest; code compiled already runs only under its own.
pub(crate) fn load_with_digests(
    dir: &Path,
    source: &Source,
    strictness: Strictness,
    known: Known<'_>,
) -> (Option<Skill>, Vec<Diagnostic>) {
    let skill_md = dir.join(SKILL_FILE);
    let mut diagnostics = Vec::new();
    let to_diag = |file: &Path, p: Problem, warning: bool| {
        let d = if warning {
            Diagnostic::warning(file, p.rule, p.message)
        } else {
            Diagnostic::error(file, p.rule, p.message)
        };
        d.at_line(p.line)
    };

    if let Some(problem) = leaves_source(dir, &source.root) {
        diagnostics.push(Diagnostic::error(dir, "skill-path", problem));
        return (None, diagnostics);
    }
    let handle = match SkillDir::open(dir) {
        Ok(h) => h,
        Err(e) => {
            diagnostics.push(Diagnostic::error(
                dir,
                "skill-read",
                format!("cannot open the skill folder: {e}"),
            ));
            return (None, diagnostics);
        }
    };
    let bytes = match handle.read_bounded(SKILL_FILE, MAX_SKILL_FILE_BYTES) {
        Ok(b) => b,
        Err(ReadError::TooLarge { limit }) => {
            diagnostics.push(Diagnostic::error(
                &skill_md,
                "file-too-large",
                format!("SKILL.md is larger than {} KiB; move detail into references/ and keep the body short", limit / 1024),
            ));
            return (None, diagnostics);
        }
        Err(e) => {
            diagnostics.push(Diagnostic::error(
                &skill_md,
                "skill-read",
                format!("cannot read SKILL.md: {e}"),
            ));
            return (None, diagnostics);
        }
    };
    let fm = match frontmatter::split_with(&bytes, strictness) {
        Ok((fm, relaxed)) => {
            diagnostics.extend(relaxed.map(|p| to_diag(&skill_md, p, true)));
            fm
        }
        Err(p) => {
            diagnostics.push(to_diag(&skill_md, p, false));
            return (None, diagnostics);
        }
    };
    let folder_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let checked = meta::check(&fm, &folder_name, strictness);
    diagnostics.extend(
        checked
            .errors
            .into_iter()
            .map(|p| to_diag(&skill_md, p, false)),
    );
    diagnostics.extend(
        checked
            .warnings
            .into_iter()
            .map(|p| to_diag(&skill_md, p, true)),
    );

    let manifest_path = dir.join(MANIFEST_FILE);
    let manifest = match manifest::load(&handle) {
        Ok(m) => m,
        Err(problems) => {
            diagnostics.extend(
                problems
                    .into_iter()
                    .map(|p| to_diag(&manifest_path, p, false)),
            );
            None
        }
    };
    let Some(meta) = checked.meta else {
        return (None, diagnostics);
    };
    if diagnostics.iter().any(Diagnostic::is_error) {
        return (None, diagnostics);
    }
    let components = manifest
        .iter()
        .flat_map(Manifest::component_paths)
        .filter_map(|rel| {
            if let Some(digest) = known.digests.get(rel) {
                return Some((rel.to_string(), digest.clone()));
            }
            let mut file = handle.open_regular(rel).ok()?;
            let limit = crate::sandbox::MAX_COMPONENT_BYTES;
            let digest = crate::digest::of_open_file(&mut file, limit, known.memo).ok()?;
            Some((rel.to_string(), digest))
        })
        .collect();
    let skill = Skill {
        meta,
        body: fm.body,
        body_line: fm.body_line,
        dir: dir.to_path_buf(),
        files: handle.clone(),
        source: source.kind,
        trusted: source.trusted,
        digest: digest(&bytes),
        manifest,
        components,
        references: handle.list_files("references", MAX_REFERENCES),
        frontmatter: serde_json::to_value(&fm.mapping).unwrap_or_default(),
        provenance: None,
        served_files: Arc::default(),
        python_imports: Arc::default(),
    };
    (Some(skill), diagnostics)
}

/// Why `dir` is not a real folder inside `root`, if it is not: a symlink
/// on its path may lead out of the source, and the folder must then not be
/// pinned at all.
fn leaves_source(dir: &Path, root: &Path) -> Option<String> {
    let (Ok(dir_real), Ok(root_real)) = (std::fs::canonicalize(dir), std::fs::canonicalize(root))
    else {
        return Some("the skill folder cannot be resolved".into());
    };
    if !dir_real.starts_with(&root_real) {
        return Some(
            "the skill folder's path leads outside its skills folder (through a symlink); it is not loaded".into(),
        );
    }
    if !dir_real.is_dir() {
        return Some("the skill folder is not a folder".into());
    }
    None
}

/// `sha256:<hex>` of a skill file's bytes.
pub use crate::digest::sha256 as digest;

/// Whether `rel` is one of a skill's runnable scripts, by path: the one
/// rule `run_script`, `skills list`, `load_skill` and the permissions shown
/// before an install share. A runnable script lies under `scripts/`, as
/// the Agent Skills convention keeps them; a file whose name starts with
/// `_` is a module the scripts import, not an entry point, except a
/// package's `__main__.py`, which `python -m scripts.pkg` runs. The file
/// must also be one the skill serves (not hidden or ignored).
pub fn is_runnable_script(rel: &str) -> bool {
    let Some(inside) = rel.strip_prefix("scripts/") else {
        return false;
    };
    let file = inside.rsplit('/').next().unwrap_or(inside);
    !file.is_empty() && (!file.starts_with('_') || file == "__main__.py")
}

#[cfg(test)]
mod runnable_tests {
    use super::is_runnable_script;

    #[test]
    fn only_entry_points_under_scripts_run() {
        for yes in [
            "scripts/x.py",
            "scripts/tools/x.py",
            "scripts/pkg/__main__.py",
            "scripts/x.sh",
        ] {
            assert!(is_runnable_script(yes), "{yes}");
        }
        for no in [
            "references/notes.py",
            "scripts/_hidden.py",
            "scripts/__init__.py",
            "pkg/__main__.py",
            "x.py",
            "scripts/",
            "scriptsx/a.py",
        ] {
            assert!(!is_runnable_script(no), "{no}");
        }
    }
}
