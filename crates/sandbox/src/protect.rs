//! The project skill folders a tool may never change.
//!
//! `.agents/skills` and `.claude/skills` are where a project keeps skills
//! that `--trust-project` loads as trusted. A tool granted a writable
//! workspace could otherwise plant one there for a later run to trust, so
//! any folder of that name, at any depth, is out of bounds for every
//! change a guest can make: creating, writing, truncating, linking,
//! renaming into or out of, removing. It holds whether the folder exists
//! yet or not, and whatever `--trust-project` says. So that the folder
//! cannot be assembled elsewhere and moved in, the guest cannot rename
//! anything to `.agents` or `.claude`, or make a symbolic link of that name
//! or one that points through such a folder.
//!
//! A path is judged twice: as written (joined lexically to the real path
//! of the folder it is relative to), and as the host's file system resolves
//! it, symbolic links followed, so that a link placed earlier cannot lead a
//! write into a protected folder under another name.

use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

/// Folder names that hold a project's skills when they contain `skills`.
const PROJECT_FOLDERS: [&str; 2] = [".agents", ".claude"];
const SKILLS: &str = "skills";

/// What a guest may not do to a path, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The protected part of the path, from the project folder on
    /// (`.claude/skills/x/SKILL.md`), or the guest's own text: never a
    /// host path.
    pub shown: String,
    pub reason: Reason,
}

/// Why a change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// It touches a project skill folder.
    ProjectSkills,
    /// A symbolic link whose target lies outside the workspace: the guest
    /// cannot follow it, but the user's own tools would.
    LinkOutside,
}

impl Refusal {
    fn project(shown: String) -> Self {
        Refusal {
            shown,
            reason: Reason::ProjectSkills,
        }
    }

    pub(crate) fn message(&self, action: &str) -> String {
        match self.reason {
            Reason::ProjectSkills => format!(
                "refused to {action} `{}`: a workspace's .agents/skills and .claude/skills \
                 folders are protected from tools, because --trust-project loads the skills \
                 found there. Write somewhere else in the workspace, or add the skill yourself",
                self.shown
            ),
            Reason::LinkOutside => format!(
                "refused to {action} `{}`: a symbolic link in the workspace must point inside \
                 it, so that nothing the tool leaves behind leads the user's own programs \
                 elsewhere",
                self.shown
            ),
        }
    }
}

/// How the last component of a path is treated when it is a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Last {
    /// The operation acts on the link itself (create, remove, rename).
    Link,
    /// The operation follows it (open).
    Target,
}

/// Whether a change at `path` under the folder `dir` would touch a project
/// skill folder; `Err` says which part.
pub(crate) fn check_change(dir: &impl AsRawFd, path: &str, last: Last) -> Result<(), Refusal> {
    for candidate in candidates(dir, path, last) {
        if let Some(shown) = protected_part(&candidate) {
            return Err(Refusal::project(shown));
        }
    }
    Ok(())
}

/// Whether `path` under `dir` may become a project folder by a rename or a
/// new link: its own name is `.agents` or `.claude`.
pub(crate) fn check_new_name(dir: &impl AsRawFd, path: &str) -> Result<(), Refusal> {
    check_change(dir, path, Last::Link)?;
    match Path::new(path).file_name() {
        Some(name) if is_project_folder(name) => {
            Err(Refusal::project(name.to_string_lossy().into_owned()))
        }
        _ => Ok(()),
    }
}

/// Whether a symbolic link's target names a project folder anywhere in it:
/// such a link is a way into the folder under another name.
pub(crate) fn check_link_target(target: &str) -> Result<(), Refusal> {
    match Path::new(target)
        .components()
        .find(|c| is_project_folder(c.as_os_str()))
    {
        Some(folder) => Err(Refusal::project(
            folder.as_os_str().to_string_lossy().into_owned(),
        )),
        None => Ok(()),
    }
}

/// Whether a symbolic link `link` (under `dir`) to `target` stays inside
/// `root`, the workspace's real path, judged by name.
pub(crate) fn check_link_inside(
    dir: &impl AsRawFd,
    link: &str,
    target: &str,
    root: &Path,
) -> Result<(), Refusal> {
    let outside = || Refusal {
        shown: format!("{link} -> {target}"),
        reason: Reason::LinkOutside,
    };
    let target = Path::new(target);
    if target.is_absolute() {
        return Err(outside());
    }
    let Some(base) = fd_path(dir) else {
        return Ok(());
    };
    let Ok(from_root) = base.strip_prefix(root) else {
        return Err(outside());
    };
    let mut depth: Vec<&OsStr> = Vec::new();
    let link_dir = Path::new(link).parent().unwrap_or(Path::new(""));
    for part in from_root
        .components()
        .chain(link_dir.components())
        .chain(target.components())
    {
        match part {
            Component::ParentDir => {
                if depth.pop().is_none() {
                    return Err(outside());
                }
            }
            Component::Normal(name) => depth.push(name),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(outside()),
        }
    }
    Ok(())
}

/// The host paths `path` may stand for: as written, and as resolved.
fn candidates(dir: &impl AsRawFd, path: &str, last: Last) -> Vec<PathBuf> {
    let Some(base) = fd_path(dir) else {
        return Vec::new();
    };
    let relative = Path::new(path);
    if relative.is_absolute() {
        // wasmtime-wasi refuses absolute paths; nothing to judge.
        return Vec::new();
    }
    let mut out = vec![lexical_join(&base, relative)];
    out.extend(resolve(&base.join(relative), last));
    out
}

/// `path` as the file system resolves it: the longest part that exists,
/// canonicalized (links followed), with the rest appended by name. With
/// [`Last::Link`] the last component is never followed.
fn resolve(path: &Path, last: Last) -> Option<PathBuf> {
    let mut rest = Vec::new();
    let mut current = path;
    if last == Last::Link {
        rest.push(current.file_name()?);
        current = current.parent()?;
    }
    loop {
        if let Ok(real) = std::fs::canonicalize(current) {
            let rest: PathBuf = rest.iter().rev().collect();
            return Some(lexical_join(&real, &rest));
        }
        rest.push(current.file_name()?);
        current = current.parent()?;
    }
}

/// `base` joined with `relative`, `.` and `..` applied by name.
fn lexical_join(base: &Path, relative: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for part in relative.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The part of `path` from a `.agents/skills` or `.claude/skills` pair on.
fn protected_part(path: &Path) -> Option<String> {
    let parts: Vec<&OsStr> = path.iter().collect();
    let at = parts
        .windows(2)
        .position(|pair| is_project_folder(pair[0]) && pair[1].eq_ignore_ascii_case(SKILLS))?;
    let shown: PathBuf = parts[at..].iter().collect();
    Some(shown.to_string_lossy().into_owned())
}

fn is_project_folder(name: &OsStr) -> bool {
    PROJECT_FOLDERS.iter().any(|f| name.eq_ignore_ascii_case(f))
}

/// The host path an open descriptor refers to now.
#[cfg(target_os = "linux")]
pub(crate) fn fd_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

#[cfg(target_os = "macos")]
pub fn fd_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: F_GETPATH writes at most PATH_MAX bytes into `buf`.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPATH, buf.as_mut_ptr()) };
    if rc == -1 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    Some(PathBuf::from(OsStr::from_bytes(&buf[..len])))
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn fd_path(_fd: &impl AsRawFd) -> Option<PathBuf> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, std::fs::File) {
        let root = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(root.path()).unwrap();
        (root, dir)
    }

    #[test]
    fn skill_folders_are_protected_whether_they_exist_or_not() {
        let (root, dir) = workspace();
        for path in [
            ".claude/skills",
            ".claude/skills/x/SKILL.md",
            ".agents/skills/x",
            "sub/repo/.claude/skills/x",
            "a/../.claude/skills/x",
            ".CLAUDE/Skills/x",
        ] {
            assert!(check_change(&dir, path, Last::Target).is_err(), "{path}");
        }
        for path in [
            ".claude",
            ".claude/settings.json",
            "skills/x",
            "docs/.claude-notes",
        ] {
            assert_eq!(check_change(&dir, path, Last::Target), Ok(()), "{path}");
        }
        std::fs::create_dir_all(root.path().join(".claude/skills")).unwrap();
        let refusal = check_change(&dir, ".claude/skills/x/SKILL.md", Last::Link).unwrap_err();
        assert_eq!(refusal.shown, ".claude/skills/x/SKILL.md");
        assert!(
            !refusal
                .message("create")
                .contains(&*root.path().to_string_lossy())
        );
    }

    #[test]
    fn a_link_cannot_lead_into_a_skill_folder() {
        let (root, dir) = workspace();
        std::fs::create_dir_all(root.path().join(".claude")).unwrap();
        std::os::unix::fs::symlink(".claude", root.path().join("innocent")).unwrap();
        assert!(check_change(&dir, "innocent/skills", Last::Link).is_err());
        assert!(check_change(&dir, "innocent/skills/x/SKILL.md", Last::Target).is_err());
        assert!(check_link_target("../.claude").is_err());
        assert!(check_link_target("docs/readme").is_ok());
        assert!(check_new_name(&dir, "x/.agents").is_err());
        assert!(check_new_name(&dir, "x/agents").is_ok());
    }
}
