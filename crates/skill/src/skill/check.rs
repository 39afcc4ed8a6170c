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

/// Text only `skillbox new`'s template writes: a skill that still holds it
/// is not finished, and `skills check` says so.
pub const TEMPLATE_TEXT: &[&str] = &[
    "replace this with what your skill does",
    "One paragraph on what this skill is for",
];

/// The Skills extension's interoperability limits, as the clients that
/// install skills apply them: at most 512 files and 16 MiB in all per
/// skill (the extension's own recommendation, and the Inspector's
/// `--verify`), and 16 MiB per file (fast-agent refuses a larger one).
pub const INTEROP_MAX_FILES: usize = 512;
pub const INTEROP_MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;
pub const INTEROP_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

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
pub fn check_folder(dir: &Path, sandbox: &std::sync::Arc<Sandbox>) -> Vec<Diagnostic> {
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
        let resolution = tools::resolve(&skill, sandbox);
        diags.extend(resolution.diagnostics.iter().cloned());
        // The check compiles what serving would compile in the background,
        // so code the types describe but the compiler refuses is found here.
        let manifest_path = dir.join(super::manifest::MANIFEST_FILE);
        for component in resolution.components() {
            if let Err(why) = component.compiled_blocking() {
                diags.push(Diagnostic::error(
                    &manifest_path,
                    "component-load",
                    format!("a component does not compile: {why}"),
                ));
            }
        }
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
        for text in TEMPLATE_TEXT {
            if skill.meta.description.contains(text) || skill.body.contains(text) {
                diags.push(Diagnostic::error(
                    &skill_md,
                    "template-text",
                    format!(
                        "SKILL.md still holds the template's placeholder (\"{text} …\"); say what \
                         this skill does and when to use it, in your own words"
                    ),
                ));
            }
        }
        diags.extend(interop_findings(&skill));
    }
    diags.sort();
    diags.dedup();
    diags
}

/// Where a skill exceeds what the clients that install skills through the
/// Skills extension accept. Components are not served there
/// (`Skill::is_component`), so a large tool does not count.
fn interop_findings(skill: &model::Skill) -> Vec<Diagnostic> {
    let files = skill.served_files();
    let total: u64 = files.iter().map(|f| f.size).sum();
    let mut out = Vec::new();
    let finding =
        |path: PathBuf, message: String| Diagnostic::warning(path, "interop-limit", message);
    if files.len() > INTEROP_MAX_FILES {
        out.push(finding(
            skill.dir.clone(),
            format!(
                "the skill serves {} files; clients installing skills through the Skills extension \
                 accept at most {INTEROP_MAX_FILES}. Move build outputs out of the folder or list \
                 them in its .gitignore",
                files.len()
            ),
        ));
    }
    if total > INTEROP_MAX_TOTAL_BYTES {
        out.push(finding(
            skill.dir.clone(),
            format!(
                "the skill serves {} MiB in all; clients installing skills through the Skills \
                 extension accept at most {} MiB",
                total.div_ceil(1024 * 1024),
                INTEROP_MAX_TOTAL_BYTES / (1024 * 1024)
            ),
        ));
    }
    for file in files.iter().filter(|f| f.size > INTEROP_MAX_FILE_BYTES) {
        out.push(finding(
            skill.dir.join(&file.path),
            format!(
                "{} MiB; a client installing the skill (fast-agent) refuses files over {} MiB",
                file.size.div_ceil(1024 * 1024),
                INTEROP_MAX_FILE_BYTES / (1024 * 1024)
            ),
        ));
    }
    out
}
