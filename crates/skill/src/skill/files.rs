//! The host's own reads inside a skill folder, through a cap-std directory
//! handle: `..`, absolute paths and symlinks cannot leave the folder.
//!
//! The handle is opened once, when the catalog is built, and shared by
//! every later read and by every call's `/skill` mount; see
//! [`crate::sandbox::PinnedDir`]. Reads take regular files only: a FIFO,
//! device or socket is opened non-blocking and refused by its type on the
//! opened handle, so it can never stall the host.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use super::fileset::FileRule;
use crate::sandbox::PinnedDir;

/// SKILL.md and skillbox.yaml larger than this are refused.
pub const MAX_SKILL_FILE_BYTES: u64 = 256 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    #[error("no such file in the skill folder")]
    NotFound,
    #[error(
        "the path leaves the skill folder (`..`, an absolute path or a symlink pointing outside)"
    )]
    Escapes,
    #[error("the file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("it is a folder, not a file")]
    NotAFile,
    #[error("it is {0}, not a regular file; only regular files are read")]
    NotRegular(&'static str),
    #[error("it cannot be read ({0})")]
    Io(String),
    #[error(
        "it is not one of the skill's files (a build output, a hidden file, or a path the \
         skill's .gitignore excludes)"
    )]
    NotServed,
    #[error(
        "it is a component this server runs as the skill's tools or scripts; it is not served \
         as a file (call the tools instead)"
    )]
    Component,
}

/// A skill folder opened as a capability, with the rule for which of its
/// files are the skill (`fileset.rs`). Clones share the one handle.
#[derive(Clone)]
pub struct SkillDir {
    /// The folder's handle, pinned once: each call checks its identity.
    pinned: PinnedDir,
    rule: Arc<FileRule>,
}

impl std::fmt::Debug for SkillDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SkillDir")
    }
}

impl SkillDir {
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let dir = Dir::open_ambient_dir(path, ambient_authority()).map_err(|e| classify(&e))?;
        let mut opened = SkillDir {
            pinned: PinnedDir::new(Arc::new(dir), path.to_path_buf()),
            rule: Arc::default(),
        };
        let gitignore = opened
            .read_bounded(".gitignore", 64 * 1024)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        opened.rule = Arc::new(FileRule::with_gitignore(gitignore.as_deref()));
        Ok(opened)
    }

    /// Reads a file the skill serves (see `fileset.rs`), whole, refusing
    /// files over `limit` bytes.
    pub fn read_served(&self, rel: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        let rel = checked_relative(rel)?;
        if !self.rule.serves(rel) {
            return Err(ReadError::NotServed);
        }
        // A link is served only if what it leads to is: otherwise
        // `references/notes.md -> ../.env` would serve a hidden file.
        let real = self.real_path(rel).ok_or(ReadError::Escapes)?;
        if !self.rule.serves(&real) {
            return Err(ReadError::NotServed);
        }
        self.read_bounded(rel, limit)
    }

    /// Whether `rel` is reached through no symbolic link, its own name
    /// included.
    pub fn has_no_link(&self, rel: &str) -> bool {
        checked_relative(rel).is_ok_and(|r| {
            let normal: Vec<&str> = r
                .split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .collect();
            self.real_path(r)
                .is_some_and(|real| real == normal.join("/"))
        })
    }

    /// `rel` with every symbolic link on the way replaced by where it
    /// leads, by name, inside the folder; `None` when a link leads out of
    /// it or the links go round (40 at most, as Linux allows).
    fn real_path(&self, rel: &str) -> Option<String> {
        let mut rest: std::collections::VecDeque<String> = rel
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .map(String::from)
            .collect();
        let mut done: Vec<String> = Vec::new();
        let mut links = 0;
        while let Some(part) = rest.pop_front() {
            if part == ".." {
                done.pop()?;
                continue;
            }
            done.push(part);
            let here = done.join("/");
            let is_link = self
                .pinned
                .dir()
                .symlink_metadata(&here)
                .is_ok_and(|m| m.is_symlink());
            if !is_link {
                continue;
            }
            links += 1;
            let target = self.pinned.dir().read_link_contents(&here).ok()?;
            let target = target.to_str()?;
            if links > 40 || target.starts_with('/') {
                return None;
            }
            done.pop();
            for part in target
                .split('/')
                .rev()
                .filter(|p| !p.is_empty() && *p != ".")
            {
                rest.push_front(part.to_string());
            }
        }
        Some(done.join("/"))
    }

    /// Whether `path` still leads to this folder.
    pub fn still_at(&self, path: &Path) -> bool {
        self.pinned.still_at(path)
    }

    /// The same folder as a mount for the sandbox.
    pub fn pinned(&self, opened_at: &Path) -> PinnedDir {
        self.pinned.known_at(opened_at)
    }

    /// Reads `rel` whole, refusing files over `limit` bytes (detected by
    /// reading one byte past it, so a growing file cannot slip through).
    pub fn read_bounded(&self, rel: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        read_to_limit(&mut self.open_regular(rel)?, limit)
    }

    /// Opens the regular file `rel` for reading; a folder, FIFO, device or
    /// socket is refused by its type on the opened handle.
    pub(crate) fn open_regular(&self, rel: &str) -> Result<cap_std::fs::File, ReadError> {
        let rel = checked_relative(rel)?;
        let file = self
            .pinned
            .dir()
            .open_with(
                rel,
                OpenOptions::new()
                    .read(true)
                    .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32),
            )
            .map_err(|e| classify(&e))?;
        let meta = file.metadata().map_err(|e| classify(&e))?;
        if meta.is_dir() {
            return Err(ReadError::NotAFile);
        }
        if !meta.is_file() {
            return Err(ReadError::NotRegular(special_kind(&meta.file_type())));
        }
        Ok(file)
    }

    /// The size of the regular file `rel`, through the handle (a symlink
    /// leaving the folder has no size here).
    pub fn file_size(&self, rel: &str) -> Option<u64> {
        let meta = self
            .pinned
            .dir()
            .metadata(checked_relative(rel).ok()?)
            .ok()?;
        meta.is_file().then(|| meta.len())
    }

    /// Whether `rel` names a regular file inside the folder.
    pub fn is_file(&self, rel: &str) -> bool {
        checked_relative(rel)
            .ok()
            .and_then(|r| self.pinned.dir().metadata(r).ok())
            .is_some_and(|m| m.is_file())
    }

    /// Whether `rel` is a regular file the skill serves.
    pub fn serves_file(&self, rel: &str) -> bool {
        checked_relative(rel).is_ok_and(|r| {
            self.rule.serves(r)
                && self
                    .real_path(r)
                    .is_some_and(|real| self.rule.serves(&real))
        }) && self.is_file(rel)
    }

    /// The files the skill serves under `sub` (recursively, sorted, at
    /// most `max`), as paths relative to the skill folder with `/`
    /// separators.
    pub fn list_files(&self, sub: &str, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        if self.rule.serves(sub)
            && let Ok(dir) = self.pinned.dir().open_dir(sub)
        {
            self.walk(&dir, sub, 0, max, &mut out);
        }
        out.sort();
        out
    }

    /// Every file the skill serves (recursively, sorted, at most `max`),
    /// relative to the folder.
    pub fn list_all_files(&self, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        self.walk(self.pinned.dir(), "", 0, max, &mut out);
        out.sort();
        out
    }

    /// The direct children of folder `sub` ("" for the skill folder) that
    /// the skill serves: `(name, is_folder)`, sorted.
    pub fn children(&self, sub: &str) -> Result<Vec<(String, bool)>, ReadError> {
        if !sub.is_empty() && !self.rule.serves(checked_relative(sub)?) {
            return Err(ReadError::NotServed);
        }
        let listing = if sub.is_empty() {
            self.pinned.dir().entries()
        } else {
            self.pinned
                .dir()
                .open_dir(checked_relative(sub)?)
                .and_then(|d| d.entries())
        }
        .map_err(|e| classify(&e))?;
        let mut out: Vec<(String, bool)> = listing
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let kind = e.file_type().ok()?;
                let rel = if sub.is_empty() {
                    name.clone()
                } else {
                    format!("{sub}/{name}")
                };
                ((kind.is_file() || kind.is_dir()) && !self.rule.excludes(&rel, kind.is_dir()))
                    .then_some((name, kind.is_dir()))
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

impl SkillDir {
    fn walk(&self, dir: &Dir, prefix: &str, depth: usize, max: usize, out: &mut Vec<String>) {
        let Ok(entries) = dir.entries() else { return };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if out.len() >= max || depth > 8 {
                return;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            match entry.file_type() {
                Ok(t) if t.is_file() && !self.rule.excludes(&rel, false) => out.push(rel),
                Ok(t) if t.is_dir() && !self.rule.excludes(&rel, true) => {
                    if let Ok(sub) = dir.open_dir(&name) {
                        self.walk(&sub, &rel, depth + 1, max, out);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Reads an opened file whole, refusing it past `limit` bytes (detected
/// by reading one byte past it, so a growing file cannot slip through).
pub(crate) fn read_to_limit(
    file: &mut cap_std::fs::File,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| classify(&e))?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

fn special_kind(t: &cap_std::fs::FileType) -> &'static str {
    use cap_std::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}

/// Refuses absolute paths and `..` before cap-std sees them, so the error
/// says why.
pub fn checked_relative(rel: &str) -> Result<&str, ReadError> {
    let trimmed = rel.trim_start_matches("./");
    if trimmed.starts_with('/') || trimmed.split(['/', '\\']).any(|part| part == "..") {
        return Err(ReadError::Escapes);
    }
    Ok(trimmed)
}

fn classify(e: &std::io::Error) -> ReadError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ReadError::NotFound,
        std::io::ErrorKind::PermissionDenied => ReadError::Escapes,
        std::io::ErrorKind::IsADirectory => ReadError::NotAFile,
        _ if e.to_string().contains("outside") => ReadError::Escapes,
        kind => ReadError::Io(kind.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inside_and_refuses_escapes() {
        let root = tempfile::tempdir().unwrap();
        let skill = root.path().join("s");
        std::fs::create_dir_all(skill.join("references")).unwrap();
        std::fs::write(skill.join("references/a.md"), "hello").unwrap();
        std::fs::write(root.path().join("secret"), "nope").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret"), skill.join("link")).unwrap();
        let dir = SkillDir::open(&skill).unwrap();
        assert_eq!(dir.read_bounded("references/a.md", 100).unwrap(), b"hello");
        assert_eq!(dir.read_bounded("../secret", 100), Err(ReadError::Escapes));
        assert_eq!(
            dir.read_bounded("/etc/passwd", 100),
            Err(ReadError::Escapes)
        );
        assert_eq!(dir.read_bounded("link", 100), Err(ReadError::Escapes));
        assert_eq!(dir.read_bounded("missing", 100), Err(ReadError::NotFound));
        assert_eq!(
            dir.read_bounded("references/a.md", 3),
            Err(ReadError::TooLarge { limit: 3 })
        );
        assert_eq!(dir.list_files("references", 10), vec!["references/a.md"]);
    }

    #[test]
    fn a_link_is_served_only_when_its_target_is() {
        let root = tempfile::tempdir().unwrap();
        let skill = root.path().join("s");
        std::fs::create_dir_all(skill.join("references")).unwrap();
        std::fs::create_dir_all(skill.join("target")).unwrap();
        std::fs::write(skill.join(".secret"), "hidden").unwrap();
        std::fs::write(skill.join("target/out"), "build").unwrap();
        std::fs::write(skill.join("ignored.txt"), "ignored").unwrap();
        std::fs::write(skill.join(".gitignore"), "ignored.txt\n").unwrap();
        std::fs::write(skill.join("references/a.md"), "shown").unwrap();
        for (link, target) in [
            ("references/inner.md", "../.secret"),
            ("references/build", "../target/out"),
            ("references/ign", "./../ignored.txt"),
            ("references/chain", "inner.md"),
            ("references/ok.md", "a.md"),
            ("alias", "references"),
        ] {
            std::os::unix::fs::symlink(target, skill.join(link)).unwrap();
        }
        let dir = SkillDir::open(&skill).unwrap();
        for hidden in [
            "references/inner.md",
            "references/build",
            "references/ign",
            "references/chain",
            "alias/inner.md",
        ] {
            assert_eq!(
                dir.read_served(hidden, 100),
                Err(ReadError::NotServed),
                "{hidden}"
            );
            assert!(!dir.serves_file(hidden), "{hidden}");
        }
        assert_eq!(dir.read_served("references/ok.md", 100).unwrap(), b"shown");
        assert_eq!(dir.read_served("alias/a.md", 100).unwrap(), b"shown");
    }
}
