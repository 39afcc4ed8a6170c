//! Which files are the skill: one rule for everything that serves or ships
//! a skill's files (resources, `read_skill_file`, the Skills extension's
//! manifest, publishing).
//!
//! A skill folder is also where its author works, so it may hold a build
//! (`skillbox build` used to leave cargo's `target/` there), a VCS folder,
//! editor files and caches. None of that is the skill. Left out are:
//! - every dot-file and dot-folder (`.git`, `.gitignore`, `.venv`, …);
//! - the build and cache folders of the toolchains skills are written
//!   with ([`BUILD_OUTPUTS`]), wherever they sit;
//! - whatever the skill's own `.gitignore` excludes, as git reads it.
//!
//! The host still reads any file the manifest names (a component that a
//! `.gitignore` lists is still run); the rule decides only what is served.

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// Folders that hold what a toolchain built or cached, never the skill:
/// cargo's `target`, npm's `node_modules`, Python's `__pycache__`.
pub const BUILD_OUTPUTS: &[&str] = &["target", "node_modules", "__pycache__"];

/// The largest `.gitignore` read; a larger one is ignored (and the defaults
/// still apply).
const MAX_GITIGNORE_BYTES: usize = 64 * 1024;

/// The rule for one skill folder.
#[derive(Debug, Clone, Default)]
pub struct FileRule {
    gitignore: Option<Gitignore>,
}

impl FileRule {
    /// The rule with the skill's `.gitignore` (its text, if it has one).
    pub fn with_gitignore(text: Option<&str>) -> FileRule {
        let Some(text) = text.filter(|t| t.len() <= MAX_GITIGNORE_BYTES) else {
            return FileRule::default();
        };
        // Paths are matched relative to the skill folder, which the
        // builder's root stands for; it never touches the file system.
        let mut builder = GitignoreBuilder::new("");
        for line in text.lines() {
            // A line git would not accept is skipped, as git skips it.
            let _ = builder.add_line(None, line);
        }
        FileRule {
            gitignore: builder.build().ok(),
        }
    }

    /// Whether the entry `name` (a file or folder) at `rel` (relative to
    /// the skill folder, `/`-separated, `name` its last part) is left out.
    /// A folder that is left out leaves out everything below it.
    pub fn excludes(&self, rel: &str, is_dir: bool) -> bool {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if name.starts_with('.') || (is_dir && BUILD_OUTPUTS.contains(&name)) {
            return true;
        }
        self.gitignore
            .as_ref()
            .is_some_and(|g| g.matched(rel, is_dir).is_ignore())
    }

    /// Whether the file at `rel` is served: neither it nor any folder above
    /// it is left out.
    pub fn serves(&self, rel: &str) -> bool {
        let parts: Vec<&str> = rel.split('/').collect();
        (1..parts.len()).all(|n| !self.excludes(&parts[..n].join("/"), true))
            && !self.excludes(rel, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_outputs_vcs_and_hidden_files_are_not_the_skill() {
        let rule = FileRule::default();
        assert!(rule.serves("SKILL.md"));
        assert!(rule.serves("references/a.md"));
        assert!(rule.serves("tools/greet.wasm"));
        for left_out in [
            "tool/target/release/build/x",
            "target/debug/greet",
            "node_modules/a/index.js",
            "scripts/__pycache__/x.cpython-311.pyc",
            ".git/config",
            ".gitignore",
            "references/.draft.md",
        ] {
            assert!(!rule.serves(left_out), "{left_out}");
        }
    }

    #[test]
    fn the_skills_gitignore_is_read_as_git_reads_it() {
        let rule =
            FileRule::with_gitignore(Some("# build\n*.log\n/out/\nnotes/**\n!notes/keep.md\n"));
        assert!(!rule.serves("debug.log"));
        assert!(!rule.serves("references/deep/trace.log"));
        assert!(!rule.serves("out/result.json"));
        assert!(
            rule.serves("references/out/result.json"),
            "/out/ is anchored"
        );
        assert!(!rule.serves("notes/todo.md"));
        assert!(rule.serves("SKILL.md"));
        // An over-long .gitignore is not read; the defaults still hold.
        let huge = "x\n".repeat(MAX_GITIGNORE_BYTES);
        let rule = FileRule::with_gitignore(Some(&huge));
        assert!(rule.serves("x") && !rule.serves("target/x"));
    }
}
