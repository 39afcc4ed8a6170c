//! Paths inside the workspace as a staged call sees them, and the
//! fingerprint that tells whether someone else changed a file.

use cap_std::fs::{Metadata, MetadataExt};

/// A path relative to the workspace root: `/`-separated, with no empty,
/// `.` or `..` parts. The root itself is the empty string.
pub type WsPath = String;

/// `rel` resolved against the workspace path `base`, lexically. `None` for
/// an absolute path or one that climbs above the root: wasmtime-wasi
/// refuses both too.
pub fn join(base: &str, rel: &str) -> Option<WsPath> {
    if rel.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(parts.join("/"))
}

/// The folder that holds `path` (the root holds top-level names).
pub(super) fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// Every folder above `path`, nearest first, the root excluded.
pub(super) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = path;
    std::iter::from_fn(move || {
        let (up, _) = rest.rsplit_once('/')?;
        rest = up;
        Some(up)
    })
}

/// Whether `path` lies inside the folder `dir` (the root holds everything).
pub(super) fn is_under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// How deep `path` is: the root is 0.
pub(super) fn depth(path: &str) -> usize {
    if path.is_empty() {
        0
    } else {
        path.matches('/').count() + 1
    }
}

/// The name of `path` as `std::path` takes it relative to a folder: the
/// root is `.`.
pub fn rel(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

/// What a file looked like when the call first touched it. Any write, by
/// anyone, changes the change time (`ctime`), which no one can set back;
/// the inode changes when a file is replaced by a rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fingerprint {
    pub kind: Kind,
    pub len: u64,
    pub ino: u64,
    pub ctime_ns: i128,
    pub mtime_ns: i128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    File,
    Dir,
    Link,
    Other,
}

impl Fingerprint {
    pub fn of(meta: &Metadata) -> Self {
        let kind = if meta.is_symlink() {
            Kind::Link
        } else if meta.is_dir() {
            Kind::Dir
        } else if meta.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Fingerprint {
            kind,
            len: meta.len(),
            ino: meta.ino(),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
        }
    }

    /// Whether `now` is still what this fingerprint recorded. A folder is
    /// only checked to still be a folder: its times change whenever anyone
    /// adds a file to it, which does not overlap with this call.
    pub fn still(&self, now: &Fingerprint) -> bool {
        match self.kind {
            Kind::Dir => now.kind == Kind::Dir,
            _ => self == now,
        }
    }
}

/// The name of the workspace at `workspace` among this host's transaction
/// folders: a hash of its real path.
pub(super) fn workspace_key(workspace: &std::path::Path) -> std::io::Result<String> {
    Ok(key_of(&std::fs::canonicalize(workspace)?))
}

/// [`workspace_key`] of a path already made real.
pub(super) fn key_of(real: &std::path::Path) -> String {
    let hash = crate::digest::sha256_hex(real.as_os_str().as_encoded_bytes());
    hash[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_lexically_and_never_climb_out() {
        assert_eq!(join("", "a/./b//c").as_deref(), Some("a/b/c"));
        assert_eq!(join("a/b", "../c").as_deref(), Some("a/c"));
        assert_eq!(join("a", "..").as_deref(), Some(""));
        assert_eq!(join("a", "../.."), None);
        assert_eq!(join("", "/etc/passwd"), None);
        assert_eq!(parent("a/b/c"), "a/b");
        assert_eq!(parent("a"), "");
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a/b", "a"]);
        assert!(is_under("a/b", "a") && !is_under("ab", "a") && is_under("x", ""));
        assert_eq!((depth(""), depth("a"), depth("a/b")), (0, 1, 2));
    }
}
