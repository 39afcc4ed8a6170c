//! Walking a source for skill folders: one folder per skill, found by a
//! file named exactly `SKILL.md`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::diagnostic::Diagnostic;

/// How far one source is searched: user settings, with defaults above the
/// largest public skill collections (thousands of skills, each with a few
/// files), so a collection that works elsewhere is not cut short here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Folders below a source root searched for skills.
    pub max_depth: usize,
    /// Skills taken from one source.
    pub max_skills: usize,
    /// Directory entries examined in one source.
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 6,
            max_skills: 10_000,
            max_entries: 500_000,
        }
    }
}

const SKIPPED: [&str; 2] = ["node_modules", "target"];

/// The skill folders under `root`, sorted, plus diagnostics about what was
/// skipped. A root that is itself a skill folder yields just itself.
pub fn skill_dirs(root: &Path, limits: &Limits) -> (Vec<PathBuf>, Vec<Diagnostic>) {
    let mut walk = Walk {
        limits: *limits,
        root_canonical: std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()),
        found: Vec::new(),
        diagnostics: Vec::new(),
        visited: BTreeSet::new(),
        deferred: Vec::new(),
        entries: 0,
    };
    if !root.is_dir() {
        walk.diagnostics.push(Diagnostic::error(
            root,
            "source-missing",
            "this skills folder does not exist or is not a folder",
        ));
        return (walk.found, walk.diagnostics);
    }
    walk.visit(root, 0);
    // Symlinks inside the source are followed last, and only to folders the
    // walk did not reach itself, so a link never registers a skill twice.
    while let Some((link, depth)) = walk.deferred.pop() {
        walk.visit(&link, depth);
    }
    walk.found.sort();
    (walk.found, walk.diagnostics)
}

struct Walk {
    limits: Limits,
    root_canonical: PathBuf,
    found: Vec<PathBuf>,
    diagnostics: Vec<Diagnostic>,
    visited: BTreeSet<PathBuf>,
    deferred: Vec<(PathBuf, usize)>,
    entries: usize,
}

impl Walk {
    fn visit(&mut self, dir: &Path, depth: usize) {
        let Ok(canonical) = std::fs::canonicalize(dir) else {
            return;
        };
        if !self.visited.insert(canonical) {
            return; // a symlink loop
        }
        if dir.join("SKILL.md").is_file() {
            if self.found.len() >= self.limits.max_skills {
                self.diagnostics.push(Diagnostic::warning(
                    dir,
                    "source-limit",
                    format!(
                        "more than {} skills in one source; the rest are skipped (raise --max-skills)",
                        self.limits.max_skills
                    ),
                ));
                return;
            }
            self.found.push(dir.to_path_buf());
            return;
        }
        if dir.join("skill.md").is_file() {
            self.diagnostics.push(Diagnostic::warning(
                dir.join("skill.md"),
                "skill-file-name",
                "found `skill.md`; the file must be named exactly `SKILL.md` to load",
            ));
        }
        if depth >= self.limits.max_depth {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut children: Vec<_> = entries.filter_map(Result::ok).collect();
        children.sort_by_key(|e| e.file_name());
        for child in children {
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                self.diagnostics.push(Diagnostic::warning(
                    dir,
                    "source-limit",
                    format!(
                        "more than {} entries in one source; the rest are skipped (raise --max-entries)",
                        self.limits.max_entries
                    ),
                ));
                return;
            }
            let name = child.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || SKIPPED.contains(&name.as_ref()) {
                continue;
            }
            let path = child.path();
            let Ok(file_type) = child.file_type() else {
                continue;
            };
            if file_type.is_symlink() {
                match std::fs::canonicalize(&path) {
                    Ok(target) if target.starts_with(&self.root_canonical) => {
                        if target.is_dir() {
                            self.deferred.push((path, depth + 1));
                        }
                    }
                    Ok(_) => self.diagnostics.push(Diagnostic::warning(
                        &path,
                        "symlink-escape",
                        "this symlink points outside its skills folder and is not followed",
                    )),
                    Err(_) => {}
                }
            } else if file_type.is_dir() {
                self.visit(&path, depth + 1);
            }
        }
    }
}
