//! Skills from git repositories, fetched with the `git` the user has (its
//! credentials and transports), reading blobs out of a bare clone: nothing
//! is checked out, so no hook, filter or attribute of the repository runs.

use std::path::Path;
use std::process::{Command, Output};

use super::artifact::{MAX_FILE_BYTES, MAX_FILES, MAX_TOTAL_BYTES, check_path};
use super::reference::GitRef;
use crate::skill::fileset::FileRule;
use crate::skill::model::SKILL_FILE;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "git is not installed or cannot run ({0}); install git to add skills from git repositories"
    )]
    NoGit(String),
    #[error("git could not fetch {url}: {why}")]
    Fetch { url: String, why: String },
    #[error("{reference}: {why}; nothing was installed")]
    Refused { reference: String, why: String },
    #[error("{reference} is not a skill: {why}")]
    NotASkill { reference: String, why: String },
}

/// A skill's files at one commit.
pub struct GitPull {
    /// The full commit id.
    pub commit: String,
    pub files: Vec<(String, Vec<u8>)>,
}

fn git(dir: Option<&Path>, args: &[&str]) -> Result<Output, GitError> {
    let mut command = Command::new("git");
    if let Some(dir) = dir {
        command.arg("-C").arg(dir);
    }
    command
        .args([
            "-c",
            "protocol.ext.allow=never",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(std::process::Stdio::null());
    command.output().map_err(|e| GitError::NoGit(e.to_string()))
}

fn stdout_of(output: Output, fail: impl FnOnce(String) -> GitError) -> Result<Vec<u8>, GitError> {
    if output.status.success() {
        Ok(output.stdout)
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stderr
            .lines()
            .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
            .unwrap_or_else(|| stderr.lines().next().unwrap_or("git failed"));
        Err(fail(line.trim().to_string()))
    }
}

/// Fetches `reference` into a temporary bare clone and reads the skill's
/// files at the resolved commit, within the caps.
pub fn pull(reference: &GitRef) -> Result<GitPull, GitError> {
    let shown = reference.to_string();
    let clone = tempfile::Builder::new()
        .prefix("skillbox-git-")
        .tempdir()
        .map_err(|e| GitError::Fetch {
            url: reference.url.clone(),
            why: e.to_string(),
        })?;
    let bare = clone.path().join("repo.git");
    let bare_text = bare.to_string_lossy().into_owned();
    let mut args = vec!["clone", "--bare", "--quiet"];
    if reference.rev.is_none() {
        args.extend(["--depth", "1"]);
    }
    args.extend(["--", reference.url.as_str(), bare_text.as_str()]);
    stdout_of(git(None, &args)?, |why| GitError::Fetch {
        url: reference.url.clone(),
        why,
    })?;
    let rev = format!("{}^{{commit}}", reference.rev.as_deref().unwrap_or("HEAD"));
    let commit = stdout_of(
        git(
            Some(&bare),
            &["rev-parse", "--verify", "--quiet", "--end-of-options", &rev],
        )?,
        |_| GitError::Refused {
            reference: shown.clone(),
            why: format!(
                "the repository has no commit, branch or tag `{}`",
                reference.rev.as_deref().unwrap_or("HEAD")
            ),
        },
    )?;
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    let prefix = reference
        .path
        .as_deref()
        .map(|p| format!("{p}/"))
        .unwrap_or_default();
    let listing = stdout_of(
        git(
            Some(&bare),
            &["ls-tree", "-r", "-z", "--long", "--full-tree", &commit],
        )?,
        |why| GitError::Fetch {
            url: reference.url.clone(),
            why,
        },
    )?;
    let entries = parse_tree(&listing);
    // A repository holds only what its author committed, so only hidden
    // files and build outputs are left out (a component its .gitignore
    // lists was committed on purpose).
    let rule = FileRule::default();
    let refuse = |why: String| GitError::Refused {
        reference: shown.clone(),
        why,
    };
    let mut files = Vec::new();
    let mut total = 0u64;
    let mut has_skill = false;
    for entry in entries.iter().filter(|e| e.path.starts_with(&prefix)) {
        let rel = &entry.path[prefix.len()..];
        if !rule.serves(rel) {
            continue;
        }
        match entry.mode.as_str() {
            "100644" | "100755" => {}
            "120000" => {
                return Err(refuse(format!(
                    "`{rel}` is a symbolic link; a skill installs plain files only"
                )));
            }
            "160000" => {
                return Err(refuse(format!(
                    "`{rel}` is a submodule; a skill installs plain files only"
                )));
            }
            mode => {
                return Err(refuse(format!(
                    "`{rel}` has the mode {mode}, which is not a plain file"
                )));
            }
        }
        check_path(rel).map_err(|why| {
            refuse(format!(
                "the file name `{}` {why}",
                super::artifact::shown(rel)
            ))
        })?;
        if files.len() >= MAX_FILES {
            return Err(refuse(format!("the skill has more than {MAX_FILES} files")));
        }
        if entry.size > MAX_FILE_BYTES {
            return Err(refuse(format!(
                "`{rel}` is over the {} MiB cap for one file",
                MAX_FILE_BYTES >> 20
            )));
        }
        total += entry.size;
        if total > MAX_TOTAL_BYTES {
            return Err(refuse(format!(
                "the skill's files add up to more than {} MiB",
                MAX_TOTAL_BYTES >> 20
            )));
        }
        has_skill |= rel == SKILL_FILE;
        files.push((rel.to_string(), blob(&bare, &entry.object)?));
    }
    if !has_skill {
        let found: Vec<&str> = entries
            .iter()
            .filter_map(|e| e.path.strip_suffix(&format!("/{SKILL_FILE}")))
            .collect();
        // Every skill, up to a screenful; past that, how many more.
        const LISTED: usize = 50;
        let listed = match found.len().checked_sub(LISTED) {
            Some(more) if more > 0 => format!("{} and {more} more", found[..LISTED].join(", ")),
            _ => found.join(", "),
        };
        let why = match (found.is_empty(), reference.path.as_deref()) {
            (true, _) => "the repository holds no SKILL.md at all".to_string(),
            (false, at) => format!(
                "there is no SKILL.md {}; skills in it: {} (name one with #path=SUBDIR)",
                at.map_or("at its root".to_string(), |p| format!("in `{p}`")),
                listed
            ),
        };
        return Err(GitError::NotASkill {
            reference: shown,
            why,
        });
    }
    Ok(GitPull { commit, files })
}

struct TreeEntry {
    mode: String,
    object: String,
    size: u64,
    path: String,
}

/// `git ls-tree -r -z --long`: `<mode> <type> <object> <size>\t<path>\0`.
fn parse_tree(listing: &[u8]) -> Vec<TreeEntry> {
    listing
        .split(|b| *b == 0)
        .filter(|l| !l.is_empty())
        .filter_map(|line| {
            let line = String::from_utf8_lossy(line);
            let (meta, path) = line.split_once('\t')?;
            let mut parts = meta.split_whitespace();
            let mode = parts.next()?.to_string();
            let _kind = parts.next()?;
            let object = parts.next()?.to_string();
            let size = parts.next()?.parse().unwrap_or(0);
            Some(TreeEntry {
                mode,
                object,
                size,
                path: path.to_string(),
            })
        })
        .collect()
}

fn blob(bare: &Path, object: &str) -> Result<Vec<u8>, GitError> {
    stdout_of(git(Some(bare), &["cat-file", "blob", object])?, |why| {
        GitError::Fetch {
            url: "the fetched clone".into(),
            why,
        }
    })
}
