//! `skills check`: every rule on a skill folder, as authors and CI run it.
//!
//! Strict where catalog loading is lenient: the frontmatter and manifest
//! rules, the manifest against the components' own WIT types (which
//! compiles them, through the cache), limits the user's ceilings would
//! clamp, and token budgets.

use std::path::{Path, PathBuf};

use super::diagnostic::Diagnostic;
use super::frontmatter::Strictness;
use super::source::{Source, SourceKind};
use super::{discover, model, tokens, tools};
use crate::sandbox::Sandbox;

/// A path given to check that is not a folder.
#[derive(Debug, thiserror::Error)]
#[error("{}: not a folder; pass a skill folder or a folder of skills", .0.display())]
pub struct NotAFolder(pub PathBuf);

/// Every skill folder named by `paths`: a folder with SKILL.md is one
/// skill; any other folder is searched for skills.
pub fn skill_folders(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<Diagnostic>), NotAFolder> {
    let mut folders = Vec::new();
    let mut diags = Vec::new();
    for path in paths {
        if !path.is_dir() {
            return Err(NotAFolder(path.clone()));
        }
        // `.` or `..` names no folder by itself; the skill's name is
        // compared with the folder's.
        let resolved;
        let path = if path.file_name().is_none() {
            resolved = path.canonicalize().unwrap_or_else(|_| path.clone());
            &resolved
        } else {
            path
        };
        if path.join("SKILL.md").is_file() {
            folders.push(path.clone());
        } else {
            let (found, d) = discover::skill_dirs(path, &discover::Limits::default());
            if found.is_empty() {
                diags.push(Diagnostic::error(
                    path,
                    "skill-missing",
                    "no SKILL.md here or in its subfolders",
                ));
            }
            folders.extend(found);
            diags.extend(d);
        }
    }
    Ok((folders, diags))
}

/// Checks one folder fully: the frontmatter and manifest rules, then the
/// manifest against the components' own types, then token budgets.
pub fn check_folder(dir: &Path, sandbox: &Sandbox) -> Vec<Diagnostic> {
    // `skills check demo` or `skills check .`: the parent of a relative
    // path can be empty, which names no folder.
    let root = std::path::absolute(dir)
        .ok()
        .and_then(|d| d.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| dir.to_path_buf());
    let source = Source {
        kind: SourceKind::Explicit,
        root,
        trusted: true,
    };
    let (skill, mut diags) = model::load(dir, &source, Strictness::Strict);
    if let Some(skill) = skill {
        diags.extend(tools::resolve(&skill, sandbox).diagnostics);
        if let Some(manifest) = &skill.manifest {
            let mut limits = crate::sandbox::Limits::default();
            let ceilings = super::policy::Ceilings::default();
            for clamped in super::policy::apply_requests(&mut limits, &manifest.limits, &ceilings) {
                diags.push(Diagnostic::warning(
                    dir.join(super::manifest::MANIFEST_FILE),
                    "manifest-limit",
                    format!("the skill {clamped}"),
                ));
            }
        }
        let skill_md = dir.join(model::SKILL_FILE);
        let body_tokens = tokens::count(&skill.body);
        if body_tokens > tokens::BODY_TOKEN_WARNING {
            diags.push(
                Diagnostic::warning(&skill_md, "body-tokens", format!(
                    "the body is {body_tokens} tokens (over {}); move detail into references/ so activation stays cheap",
                    tokens::BODY_TOKEN_WARNING
                ))
                .at_line(Some(skill.body_line)),
            );
        }
        if let Some(problem) = tokens::description_problem(&skill.meta.description) {
            diags.push(Diagnostic::warning(
                &skill_md,
                "description-quality",
                problem,
            ));
        }
    }
    diags.sort();
    diags.dedup();
    diags
}
