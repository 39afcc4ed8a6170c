//! What a staged call would change, as a list with sizes, as a diff excerpt
//! for the person who approves it, and as a patch `git apply` takes.

use std::io::Read;

use super::overlay::{Base, Entry, Overlay};
use super::path::{Kind, WsPath};

/// One path a call added, changed or deleted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub path: WsPath,
    pub change: ChangeKind,
    pub kind: Kind,
    /// Its size before (changed or deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_bytes: Option<u64>,
    /// Its size after (added or changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Changed,
    Deleted,
}

/// Everything a call changed in the workspace, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
}

impl ChangeSet {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Paths changed.
    pub fn files(&self) -> usize {
        self.changes.len()
    }

    /// Bytes of the files added or changed, as they are after the call.
    pub fn bytes(&self) -> u64 {
        self.changes.iter().filter_map(|c| c.after_bytes).sum()
    }

    /// One line per change, for a question or a result.
    pub fn lines(&self) -> Vec<String> {
        self.changes
            .iter()
            .map(|c| {
                let what = match c.kind {
                    Kind::Dir => "folder ",
                    Kind::Link => "link ",
                    _ => "",
                };
                match c.change {
                    ChangeKind::Added => {
                        format!("+ added {what}{}{}", c.path, size(c.after_bytes, c.kind))
                    }
                    ChangeKind::Deleted => {
                        format!("- deleted {what}{}{}", c.path, size(c.before_bytes, c.kind))
                    }
                    ChangeKind::Changed => match (c.before_bytes, c.after_bytes) {
                        (Some(before), Some(after)) => {
                            format!("~ changed {what}{} ({before} B -> {after} B)", c.path)
                        }
                        _ => format!("~ replaced {what}{}", c.path),
                    },
                }
            })
            .collect()
    }

    /// `N files, M bytes`, or `nothing`.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "nothing".into();
        }
        let files = self.files();
        format!(
            "{files} {}, {} bytes",
            if files == 1 { "path" } else { "paths" },
            self.bytes()
        )
    }
}

fn size(bytes: Option<u64>, kind: Kind) -> String {
    match (bytes, kind) {
        (Some(b), Kind::File) => format!(" ({b} B)"),
        _ => String::new(),
    }
}

/// The changes an overlay holds. A file opened for writing and left as it
/// was is not a change.
pub(super) fn of(overlay: &Overlay) -> ChangeSet {
    let mut changes = Vec::new();
    for (path, entry) in &overlay.entries {
        let upper_len = || {
            overlay
                .up()
                .and_then(|u| u.symlink_metadata(path))
                .map_or(0, |m| m.len())
        };
        let change = match *entry {
            Entry::File { base: Base::Absent } => Change {
                path: path.clone(),
                change: ChangeKind::Added,
                kind: Kind::File,
                before_bytes: None,
                after_bytes: Some(upper_len()),
            },
            Entry::File {
                base: Base::Was(base),
            } => {
                if base.kind == Kind::File && same_content(overlay, path) {
                    continue;
                }
                Change {
                    path: path.clone(),
                    change: ChangeKind::Changed,
                    kind: Kind::File,
                    before_bytes: (base.kind == Kind::File).then_some(base.len),
                    after_bytes: Some(upper_len()),
                }
            }
            Entry::Dir { base } => match base {
                Base::Was(b) if b.kind == Kind::Dir => continue,
                // A file or link replaced by a folder.
                Base::Was(b) => Change {
                    path: path.clone(),
                    change: ChangeKind::Changed,
                    kind: Kind::Dir,
                    before_bytes: (b.kind == Kind::File).then_some(b.len),
                    after_bytes: None,
                },
                Base::Absent => Change {
                    path: path.clone(),
                    change: ChangeKind::Added,
                    kind: Kind::Dir,
                    before_bytes: None,
                    after_bytes: None,
                },
            },
            Entry::Link { base } => Change {
                path: path.clone(),
                change: if base == Base::Absent {
                    ChangeKind::Added
                } else {
                    ChangeKind::Changed
                },
                kind: Kind::Link,
                before_bytes: None,
                after_bytes: None,
            },
            Entry::Gone { base } => Change {
                path: path.clone(),
                change: ChangeKind::Deleted,
                kind: base.kind,
                before_bytes: (base.kind == Kind::File).then_some(base.len),
                after_bytes: None,
            },
        };
        changes.push(change);
    }
    ChangeSet { changes }
}

fn same_content(overlay: &Overlay, path: &str) -> bool {
    let (Ok(mut a), Ok(mut b)) = (overlay.lower.open(path), overlay.open_upper(path)) else {
        return false;
    };
    let (Ok(ma), Ok(mb)) = (a.metadata(), b.metadata()) else {
        return false;
    };
    if ma.len() != mb.len() {
        return false;
    }
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let (Ok(n), Ok(m)) = (a.read(&mut x), b.read(&mut y)) else {
            return false;
        };
        if n != m || x[..n] != y[..m] {
            return false;
        }
        if n == 0 {
            return true;
        }
    }
}

/// Files larger than this are shown by size, never diffed.
const MAX_DIFFED_BYTES: u64 = 1024 * 1024;

/// The text of a file before (`lower`) or after the call, if it is text.
fn text_of(overlay: &Overlay, path: &str, after: bool) -> Option<String> {
    let file = if after {
        overlay.open_upper(path).ok()?
    } else {
        overlay.lower.open(path).ok()?
    };
    let mut bytes = Vec::new();
    file.take(MAX_DIFFED_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > MAX_DIFFED_BYTES || bytes.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The before and after text of a changed file, or why it has none.
fn texts(overlay: &Overlay, change: &Change) -> Result<(String, String), &'static str> {
    if change.kind != Kind::File {
        return Err("not a file");
    }
    let before = match change.change {
        ChangeKind::Added => String::new(),
        _ => text_of(overlay, &change.path, false).ok_or("binary or large")?,
    };
    let after = match change.change {
        ChangeKind::Deleted => String::new(),
        _ => text_of(overlay, &change.path, true).ok_or("binary or large")?,
    };
    Ok((before, after))
}

/// A digest of everything `set` would write: each path, what happens to
/// it, and every byte it would hold (a link: its target). An approval of
/// the diff a person was shown binds to this rather than to the excerpt
/// they read, which may be cut or redacted: two runs whose changes differ
/// anywhere get different digests.
pub(super) fn content_digest(overlay: &Overlay, set: &ChangeSet) -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let field = |hasher: &mut sha2::Sha256, bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    for change in &set.changes {
        field(&mut hasher, change.path.as_bytes());
        let what = format!(
            "{:?} {:?} {:?}",
            change.change, change.kind, change.after_bytes
        );
        field(&mut hasher, what.as_bytes());
        if change.change == ChangeKind::Deleted {
            continue;
        }
        match change.kind {
            Kind::File => match overlay.open_upper(&change.path) {
                Ok(mut file) => {
                    if std::io::copy(&mut file, &mut hasher).is_err() {
                        field(&mut hasher, b"unreadable");
                    }
                }
                Err(_) => field(&mut hasher, b"unreadable"),
            },
            Kind::Link => {
                let target = overlay.raw_link(&change.path).unwrap_or_default();
                field(&mut hasher, target.as_bytes());
            }
            _ => {}
        }
    }
    crate::digest::finish(hasher)
}

/// A unified diff of every text file changed, cut at `max_bytes`; other
/// files are named with their sizes.
pub(super) fn excerpt(overlay: &Overlay, set: &ChangeSet, max_bytes: usize) -> String {
    let mut out = String::new();
    for change in &set.changes {
        if out.len() >= max_bytes {
            out.push_str("… (diff cut here; the list above is complete)\n");
            break;
        }
        match texts(overlay, change) {
            Ok((before, after)) => {
                let diff = similar::TextDiff::from_lines(&before, &after);
                let old = format!("a/{}", change.path);
                let new = format!("b/{}", change.path);
                out.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(2)
                        .header(&old, &new)
                        .to_string(),
                );
            }
            Err("binary or large") => out.push_str(&format!(
                "{} (binary or over 1 MiB: {} B -> {} B)\n",
                change.path,
                change.before_bytes.unwrap_or(0),
                change.after_bytes.unwrap_or(0)
            )),
            Err(_) => {}
        }
    }
    crate::text::cut(
        &mut out,
        max_bytes,
        "\n… (diff cut here; the list above is complete)\n",
    );
    out
}

/// Every change as a git-format patch, which `git apply` takes in the
/// workspace (or a clean copy of it). Binary and large files cannot be
/// written as text: they are listed in the error.
pub(super) fn patch(overlay: &Overlay, set: &ChangeSet) -> Result<String, Vec<String>> {
    let mut out = String::new();
    let mut skipped = Vec::new();
    for change in &set.changes {
        if change.kind == Kind::Dir {
            // git tracks files; a folder appears with the files in it.
            continue;
        }
        let Ok((before, after)) = texts(overlay, change) else {
            skipped.push(change.path.clone());
            continue;
        };
        let path = &change.path;
        out.push_str(&format!("diff --git a/{path} b/{path}\n"));
        let (old, new) = match change.change {
            ChangeKind::Added => {
                out.push_str("new file mode 100644\n");
                ("/dev/null".to_string(), format!("b/{path}"))
            }
            ChangeKind::Deleted => {
                out.push_str("deleted file mode 100644\n");
                (format!("a/{path}"), "/dev/null".to_string())
            }
            ChangeKind::Changed => (format!("a/{path}"), format!("b/{path}")),
        };
        if before == after {
            continue;
        }
        let diff = similar::TextDiff::from_lines(&before, &after);
        out.push_str(
            &diff
                .unified_diff()
                .context_radius(3)
                .missing_newline_hint(true)
                .header(&old, &new)
                .to_string(),
        );
    }
    if skipped.is_empty() {
        Ok(out)
    } else {
        Err(skipped)
    }
}
