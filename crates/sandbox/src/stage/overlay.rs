//! One call's view of the workspace: the workspace below, the call's own
//! changes above, in a staging folder of the host's state folder.
//!
//! Nothing is copied until the call changes it. A file is copied up the
//! first time the call opens it for writing; a file it creates lives only
//! above; a file it deletes is hidden by an entry that says so. Folders
//! the staged files need are made above as plain folders (they are not
//! changes). Reads of anything the call did not change go to the
//! workspace itself, so a call that only reads costs what it did before.

use std::collections::BTreeMap;
use std::io;

use cap_std::fs::{Dir, Metadata, OpenOptions};
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;

use super::path::{Fingerprint, Kind, WsPath, ancestors, depth, is_under, parent, rel};

/// What a path was in the workspace before the call changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    Absent,
    Was(Fingerprint),
}

/// A change the call made to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Its content is the staged file at the same path above.
    File { base: Base },
    /// A folder the call made.
    Dir { base: Base },
    /// A symbolic link the call made.
    Link { base: Base },
    /// The call deleted it.
    Gone { base: Fingerprint },
}

impl Entry {
    pub(crate) fn base(&self) -> Base {
        match *self {
            Entry::File { base } | Entry::Dir { base } | Entry::Link { base } => base,
            Entry::Gone { base } => Base::Was(base),
        }
    }

    fn kind(&self) -> Option<Kind> {
        match self {
            Entry::File { .. } => Some(Kind::File),
            Entry::Dir { .. } => Some(Kind::Dir),
            Entry::Link { .. } => Some(Kind::Link),
            Entry::Gone { .. } => None,
        }
    }
}

/// Where a path is, as the call sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Staged above, of this kind.
    Upper(Kind),
    /// Not changed by the call: whatever the workspace has (if anything).
    Lower,
    /// Deleted by the call, or under something it deleted.
    Missing,
}

/// Why a staged change was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deny {
    /// What the file system itself would answer.
    Code(ErrorCode),
    /// A change staging does not make, in words for the guest's author.
    Refused(String),
}

impl From<ErrorCode> for Deny {
    fn from(code: ErrorCode) -> Self {
        Deny::Code(code)
    }
}

impl From<io::Error> for Deny {
    fn from(e: io::Error) -> Self {
        Deny::Code(error_code(&e))
    }
}

/// The WASI error code for an I/O error met while staging.
pub(super) fn error_code(e: &io::Error) -> ErrorCode {
    use io::ErrorKind as K;
    match e.kind() {
        K::NotFound => ErrorCode::NoEntry,
        K::AlreadyExists => ErrorCode::Exist,
        K::PermissionDenied => ErrorCode::Access,
        K::DirectoryNotEmpty => ErrorCode::NotEmpty,
        K::NotADirectory => ErrorCode::NotDirectory,
        K::IsADirectory => ErrorCode::IsDirectory,
        K::StorageFull => ErrorCode::InsufficientSpace,
        K::CrossesDevices => ErrorCode::CrossDevice,
        _ => ErrorCode::Io,
    }
}

/// The workspace below, the staging folder above, and what the call did.
#[derive(Debug)]
pub(crate) struct Overlay {
    pub(super) lower: Dir,
    /// Made at the call's first change: a call that only reads has none.
    pub(super) upper: Option<Dir>,
    pub(super) entries: BTreeMap<WsPath, Entry>,
    /// Files the call read from the workspace, as they were when it did.
    pub(super) reads: BTreeMap<WsPath, Fingerprint>,
    /// The workspace's folders above the call's changes, as they were when
    /// the call first staged below them. A commit writes by path, so a
    /// folder on the way that another call replaced since (by a link, say)
    /// would take the write somewhere the call never saw.
    pub(super) parents: BTreeMap<WsPath, Fingerprint>,
}

impl Overlay {
    pub(crate) fn new(lower: Dir, upper: Option<Dir>) -> Self {
        Overlay {
            lower,
            upper,
            entries: BTreeMap::new(),
            reads: BTreeMap::new(),
            parents: BTreeMap::new(),
        }
    }

    /// A handle on the staging folder, for a descriptor of it.
    pub(crate) fn upper_file(&self) -> io::Result<std::fs::File> {
        Ok(self.up()?.try_clone()?.into_std_file())
    }

    /// Whether the staging folder was made.
    pub(crate) fn has_upper(&self) -> bool {
        self.upper.is_some()
    }

    /// The staging folder; the caller made it before the first change.
    pub(super) fn up(&self) -> io::Result<&Dir> {
        self.upper
            .as_ref()
            .ok_or_else(|| io::Error::other("the call's staging folder was not made"))
    }

    /// The workspace folder itself.
    pub(crate) fn lower(&self) -> &Dir {
        &self.lower
    }

    /// Whether the call changed anything.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn found(&self, path: &str) -> Found {
        if let Some(entry) = self.entries.get(path) {
            return entry.kind().map_or(Found::Missing, Found::Upper);
        }
        for up in ancestors(path) {
            match self.entries.get(up) {
                Some(Entry::Gone { .. } | Entry::File { .. } | Entry::Link { .. }) => {
                    return Found::Missing;
                }
                // A folder the call made where there was none (or a file,
                // or a link) has nothing of the workspace under it.
                Some(Entry::Dir { base }) if !was_dir(*base) => return Found::Missing,
                Some(Entry::Dir { .. }) | None => {}
            }
        }
        Found::Lower
    }

    pub(crate) fn lower_meta(&self, path: &str) -> Option<Metadata> {
        self.lower.symlink_metadata(rel(path)).ok()
    }

    /// The kind of `path` as the call sees it, if it exists.
    pub(crate) fn kind(&self, path: &str) -> Option<Kind> {
        match self.found(path) {
            Found::Upper(kind) => Some(kind),
            Found::Missing => None,
            Found::Lower => self.lower_meta(path).map(|m| Fingerprint::of(&m).kind),
        }
    }

    /// What `path` was before the call, for a change about to be staged.
    fn base_of(&self, path: &str) -> Base {
        if let Some(entry) = self.entries.get(path) {
            return entry.base();
        }
        if self.found(path) == Found::Missing {
            // Under a folder the call deleted: whatever was there is
            // recorded by its own entry (a folder is deleted only empty).
            return Base::Absent;
        }
        self.lower_meta(path)
            .map_or(Base::Absent, |m| Base::Was(Fingerprint::of(&m)))
    }

    /// Staged changes go to paths as written; a symbolic link on the way
    /// would make the staged path and the one finally written differ. The
    /// workspace's folders on the way are remembered, so that the commit
    /// can tell whether any of them was replaced since.
    fn check_no_link_above(&mut self, path: &str) -> Result<(), Deny> {
        for up in ancestors(path) {
            if self.entries.contains_key(up) {
                continue;
            }
            let Some(meta) = self.lower_meta(up) else {
                continue;
            };
            if meta.is_symlink() {
                return Err(Deny::Refused(format!(
                    "refused to change `{path}`: `{up}` is a symbolic link, and a call's \
                     workspace changes are staged by path; change the files at the link's \
                     target instead"
                )));
            }
            self.parents
                .entry(up.to_string())
                .or_insert_with(|| Fingerprint::of(&meta));
        }
        Ok(())
    }

    /// Checks that `path` can be made: its folder exists, as the call sees
    /// it, and no link lies on the way; then makes the folders above.
    fn prepare_new(&mut self, path: &str) -> Result<(), Deny> {
        let up = parent(path);
        match self.kind(up) {
            Some(Kind::Dir) => {}
            Some(_) => return Err(ErrorCode::NotDirectory.into()),
            None => return Err(ErrorCode::NoEntry.into()),
        }
        self.check_no_link_above(path)?;
        if !up.is_empty() {
            self.up()?.create_dir_all(up)?;
        }
        Ok(())
    }

    /// Makes `path` a new file above (the caller opens and creates it).
    pub(crate) fn stage_new_file(&mut self, path: &str) -> Result<(), Deny> {
        self.prepare_new(path)?;
        let base = self.base_of(path);
        self.entries.insert(path.into(), Entry::File { base });
        Ok(())
    }

    /// Copies the workspace's file at `path` above, so the call can change
    /// it; with `truncate`, an empty file instead. Returns the bytes copied.
    pub(crate) fn copy_up(&mut self, path: &str, truncate: bool) -> Result<u64, Deny> {
        self.check_no_link_above(path)?;
        let meta = self.lower_meta(path).ok_or(ErrorCode::NoEntry)?;
        let up = parent(path);
        if !up.is_empty() {
            self.up()?.create_dir_all(up)?;
        }
        let mut to = self.up()?.create(path)?;
        let mut copied = 0;
        if !truncate {
            let mut from = self.lower.open(path)?;
            copied = io::copy(&mut from, &mut to)?;
        }
        to.set_permissions(meta.permissions())?;
        self.entries.insert(
            path.into(),
            Entry::File {
                base: Base::Was(Fingerprint::of(&meta)),
            },
        );
        Ok(copied)
    }

    /// Remembers how a workspace file looked (`meta`) when the call read
    /// it.
    pub(crate) fn note_read_of(&mut self, path: &str, meta: &Metadata) {
        if self.reads.contains_key(path) || self.entries.contains_key(path) {
            return;
        }
        self.reads.insert(path.into(), Fingerprint::of(meta));
    }

    /// What is left after `path` is deleted: nothing if it was new.
    fn forget(&mut self, path: &str, base: Base) {
        match base {
            Base::Was(base) => self.entries.insert(path.into(), Entry::Gone { base }),
            Base::Absent => self.entries.remove(path),
        };
    }

    pub(crate) fn unlink(&mut self, path: &str) -> Result<(), Deny> {
        match self.kind(path) {
            None => return Err(ErrorCode::NoEntry.into()),
            Some(Kind::Dir) => return Err(ErrorCode::IsDirectory.into()),
            Some(_) => {}
        }
        self.check_no_link_above(path)?;
        let base = self.base_of(path);
        if matches!(self.found(path), Found::Upper(_)) {
            self.up()?.remove_file(path)?;
        }
        self.forget(path, base);
        Ok(())
    }

    pub(crate) fn mkdir(&mut self, path: &str) -> Result<(), Deny> {
        if self.kind(path).is_some() {
            return Err(ErrorCode::Exist.into());
        }
        self.prepare_new(path)?;
        let base = self.base_of(path);
        match self.up()?.create_dir(path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e.into()),
            _ => {}
        }
        self.entries.insert(path.into(), Entry::Dir { base });
        Ok(())
    }

    pub(crate) fn rmdir(&mut self, path: &str) -> Result<(), Deny> {
        match self.kind(path) {
            None => return Err(ErrorCode::NoEntry.into()),
            Some(Kind::Dir) => {}
            Some(_) => return Err(ErrorCode::NotDirectory.into()),
        }
        if path.is_empty() {
            return Err(ErrorCode::Access.into());
        }
        if !self.listing(path)?.is_empty() {
            return Err(ErrorCode::NotEmpty.into());
        }
        self.check_no_link_above(path)?;
        let base = self.base_of(path);
        // The folder may be above as a plain folder for staged files that
        // were deleted since; it goes too.
        if let Some(upper) = &self.upper {
            let _ = upper.remove_dir(path);
        }
        self.forget(path, base);
        Ok(())
    }

    pub(crate) fn symlink(&mut self, target: &str, link: &str) -> Result<(), Deny> {
        if self.kind(link).is_some() {
            return Err(ErrorCode::Exist.into());
        }
        self.prepare_new(link)?;
        let base = self.base_of(link);
        self.up()?.symlink(target, link)?;
        self.entries.insert(link.into(), Entry::Link { base });
        Ok(())
    }

    /// Moves a file or link from `from` to `to`. A folder moves only if the
    /// call made it and nothing of the workspace lies under it.
    pub(crate) fn rename(&mut self, from: &str, to: &str) -> Result<(), Deny> {
        let kind = self.kind(from).ok_or(ErrorCode::NoEntry)?;
        if from == to {
            return Ok(());
        }
        let target = self.kind(to);
        match (kind, target) {
            (Kind::Dir, Some(Kind::Dir)) if !self.listing(to)?.is_empty() => {
                return Err(ErrorCode::NotEmpty.into());
            }
            (Kind::Dir, Some(k)) if k != Kind::Dir => return Err(ErrorCode::NotDirectory.into()),
            (k, Some(Kind::Dir)) if k != Kind::Dir => return Err(ErrorCode::IsDirectory.into()),
            _ => {}
        }
        if kind == Kind::Dir && is_under(to, from) {
            return Err(ErrorCode::Invalid.into());
        }
        self.check_no_link_above(from)?;
        if kind == Kind::Dir {
            return self.rename_dir(from, to);
        }
        if self.found(from) == Found::Lower {
            match kind {
                Kind::File => {
                    self.copy_up(from, false)?;
                }
                _ => {
                    let target = self.lower.read_link_contents(from)?;
                    let base = self.base_of(from);
                    let up = parent(from);
                    if !up.is_empty() {
                        self.up()?.create_dir_all(up)?;
                    }
                    self.up()?.symlink(target, from)?;
                    self.entries.insert(from.into(), Entry::Link { base });
                }
            }
        }
        if target == Some(Kind::Dir) {
            self.rmdir(to)?;
        }
        self.prepare_new(to)?;
        let from_base = self.base_of(from);
        let to_base = self.base_of(to);
        self.up()?.rename(from, self.up()?, to)?;
        let moved = match kind {
            Kind::Link => Entry::Link { base: to_base },
            _ => Entry::File { base: to_base },
        };
        self.entries.insert(to.into(), moved);
        self.forget(from, from_base);
        Ok(())
    }

    fn rename_dir(&mut self, from: &str, to: &str) -> Result<(), Deny> {
        let made_here = matches!(
            self.entries.get(from),
            Some(Entry::Dir { base: Base::Absent })
        );
        if !made_here || self.lower_meta(from).is_some() {
            return Err(Deny::Refused(format!(
                "refused to rename the folder `{from}`: it was in the workspace before this \
                 call, and a call's workspace changes are staged file by file; make `{to}` \
                 and move the files into it instead"
            )));
        }
        if self.kind(to) == Some(Kind::Dir) {
            self.rmdir(to)?;
        }
        self.prepare_new(to)?;
        let to_base = self.base_of(to);
        self.up()?.rename(from, self.up()?, to)?;
        let moved: Vec<(WsPath, Entry)> = self
            .entries
            .iter()
            .filter(|(p, _)| is_under(p, from))
            .map(|(p, e)| (p.clone(), *e))
            .collect();
        for (path, entry) in moved {
            self.entries.remove(&path);
            let new = format!("{to}{}", &path[from.len()..]);
            let entry = match self.entries.get(&new).map(Entry::base) {
                Some(base @ Base::Was(_)) => rebased(entry, base),
                _ => entry,
            };
            self.entries.insert(new, entry);
        }
        self.entries.remove(from);
        self.entries.insert(to.into(), Entry::Dir { base: to_base });
        Ok(())
    }

    /// Whether any change lies in or under the folder `dir`.
    pub(crate) fn touches(&self, dir: &str) -> bool {
        if dir.is_empty() {
            return !self.entries.is_empty();
        }
        self.entries.contains_key(dir)
            || self
                .entries
                .range(format!("{dir}/")..)
                .next()
                .is_some_and(|(p, _)| is_under(p, dir))
    }

    /// The folder `dir` as the call sees it: names and kinds, sorted.
    pub(crate) fn listing(&self, dir: &str) -> Result<Vec<(String, Kind)>, Deny> {
        let mut names = BTreeMap::new();
        let shadows_lower = match self.entries.get(dir) {
            Some(Entry::Dir { base }) => was_dir(*base),
            _ => true,
        };
        if shadows_lower
            && self.found(dir) != Found::Missing
            && let Ok(read) = self.lower.read_dir(rel(dir))
        {
            for item in read.flatten() {
                let name = item.file_name().to_string_lossy().into_owned();
                let path = join_name(dir, &name);
                if self.found(&path) == Found::Lower
                    && let Ok(meta) = item.metadata()
                {
                    names.insert(name, Fingerprint::of(&meta).kind);
                }
            }
        }
        for (path, entry) in &self.entries {
            if parent(path) == dir
                && let Some(kind) = entry.kind()
                && !path.is_empty()
            {
                let name = path.rsplit('/').next().unwrap_or(path);
                names.insert(name.to_string(), kind);
            }
        }
        Ok(names.into_iter().collect())
    }

    /// The changes in the order they can be applied: deletions deepest
    /// first, then folders shallowest first, then files and links.
    pub(crate) fn plan(&self) -> Vec<(WsPath, Entry)> {
        let mut gone: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Gone { .. }))
            .collect();
        gone.sort_by_key(|(p, _)| std::cmp::Reverse(depth(p)));
        let mut dirs: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Dir { .. }))
            .collect();
        dirs.sort_by_key(|(p, _)| depth(p));
        let rest = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::File { .. } | Entry::Link { .. }));
        gone.into_iter()
            .chain(dirs)
            .chain(rest)
            .map(|(p, e)| (p.clone(), *e))
            .collect()
    }

    /// Copies another overlay's changes on top of this one's (a dry run's
    /// next call starts from what the earlier calls left).
    pub(crate) fn fork(&self, upper: Dir) -> io::Result<Overlay> {
        let lower = self.lower.try_clone()?;
        for (path, entry) in self.plan() {
            let up = parent(&path);
            if !up.is_empty() {
                upper.create_dir_all(up)?;
            }
            match entry {
                Entry::File { .. } => {
                    self.up()?.copy(&path, &upper, &path)?;
                }
                Entry::Dir { .. } => upper.create_dir_all(&path)?,
                Entry::Link { .. } => {
                    upper.symlink(self.up()?.read_link_contents(&path)?, &path)?
                }
                Entry::Gone { .. } => {}
            }
        }
        Ok(Overlay {
            lower,
            upper: Some(upper),
            entries: self.entries.clone(),
            reads: self.reads.clone(),
            parents: self.parents.clone(),
        })
    }

    /// The target of the link at `path`, as written.
    pub(crate) fn raw_link(&self, path: &str) -> Option<String> {
        let target = match self.found(path) {
            Found::Upper(Kind::Link) => self.up().ok()?.read_link_contents(path).ok()?,
            Found::Lower => self.lower.read_link_contents(path).ok()?,
            _ => return None,
        };
        target.to_str().map(String::from)
    }

    /// Where the link at `path` leads, as a workspace path: `None` when it
    /// leads out of the workspace (or is not a link).
    pub(crate) fn link_target(&self, path: &str) -> Option<WsPath> {
        let target = match self.found(path) {
            Found::Upper(Kind::Link) => self.up().ok()?.read_link_contents(path).ok()?,
            Found::Lower => self.lower.read_link_contents(path).ok()?,
            _ => return None,
        };
        super::path::join(parent(path), target.to_str()?)
    }

    /// Whether the link at `link` to `target` climbs (`..`) out of a
    /// component that is itself a link, as the call sees the workspace.
    /// Links are judged by name, but the file system applies `..` after
    /// following a link, so `l -> a/m/..` with `a/m -> ../..` leads where no
    /// lexical check looked.
    pub(crate) fn climbs_through_link(&self, link: &str, target: &str) -> bool {
        let mut at: Vec<&str> = parent(link).split('/').filter(|p| !p.is_empty()).collect();
        let mut through_link = false;
        for part in target.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if through_link {
                        return true;
                    }
                    at.pop();
                }
                name => {
                    at.push(name);
                    through_link |= self.kind(&at.join("/")) == Some(Kind::Link);
                }
            }
        }
        false
    }

    /// Why a link at `link` to `target` may not be made, or committed, as
    /// the call sees the workspace (`root` is its real path, when known):
    /// it must lead inside the workspace by name and not climb out of
    /// another link, and must not name or land on a project skill folder
    /// (`.claude/l -> .` is a way into `.claude/skills`). The one rule the
    /// guard applies when a guest makes a link and the commit applies
    /// again.
    pub(crate) fn link_refusal(
        &self,
        root: Option<&std::path::Path>,
        link: &str,
        target: &str,
    ) -> Option<String> {
        use crate::protect::{self, Last};
        if self.climbs_through_link(link, target) {
            return Some(format!(
                "refused to link `{link}` to `{target}`: it climbs (`..`) out of a link, which \
                 the file system follows first, so where it leads cannot be judged by its name; \
                 give the target without `..` after a link"
            ));
        }
        let inside = root.map_or(Ok(()), |root| {
            protect::check_link_inside(&self.lower, link, target, root)
        });
        if let Err(refusal) = protect::check_link_target(target).and(inside) {
            return Some(refusal.message("link"));
        }
        let Some(lands) = super::path::join(parent(link), target) else {
            return Some(format!(
                "refused to link `{link}` to `{target}`: it would lead out of the workspace"
            ));
        };
        protect::check_link_target(&lands)
            .and_then(|()| protect::check_change(&self.lower, &lands, Last::Link))
            .err()
            .map(|refusal| refusal.message("link"))
    }

    /// Opens a staged file for reading (for the change set and patches).
    pub(crate) fn open_upper(&self, path: &str) -> io::Result<cap_std::fs::File> {
        self.up()?.open_with(path, OpenOptions::new().read(true))
    }
}

fn was_dir(base: Base) -> bool {
    matches!(base, Base::Was(b) if b.kind == Kind::Dir)
}

/// `entry` with its base replaced: a change moved onto a path keeps what
/// that path was before the call.
fn rebased(entry: Entry, base: Base) -> Entry {
    match entry {
        Entry::File { .. } => Entry::File { base },
        Entry::Dir { .. } => Entry::Dir { base },
        Entry::Link { .. } => Entry::Link { base },
        gone @ Entry::Gone { .. } => gone,
    }
}

pub(super) fn join_name(dir: &str, name: &str) -> WsPath {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Stage;

    /// A workspace with `files` (path, text) and `dirs`, and a stage on it
    /// with its staging folder made.
    fn staged(dirs: &[&str], files: &[(&str, &str)]) -> (tempfile::TempDir, Stage) {
        let ws = tempfile::tempdir().unwrap();
        for dir in dirs {
            std::fs::create_dir_all(ws.path().join(dir)).unwrap();
        }
        for (path, text) in files {
            std::fs::write(ws.path().join(path), text).unwrap();
        }
        let mut stage = Stage::begin(ws.path()).unwrap();
        stage.prepare().unwrap();
        (ws, stage)
    }

    fn names(overlay: &Overlay, dir: &str) -> Vec<String> {
        overlay
            .listing(dir)
            .unwrap()
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn the_call_sees_its_own_changes_and_the_workspace_below_is_untouched() {
        let (ws, mut stage) = staged(&["docs"], &[("docs/a.txt", "a"), ("docs/b.txt", "b")]);
        let overlay = &mut stage.overlay;
        assert_eq!(overlay.found("docs/a.txt"), Found::Lower);

        assert_eq!(overlay.copy_up("docs/a.txt", false).unwrap(), 1);
        overlay
            .up()
            .unwrap()
            .write("docs/a.txt", "changed")
            .unwrap();
        overlay.unlink("docs/b.txt").unwrap();
        overlay.stage_new_file("docs/c.txt").unwrap();
        overlay.up().unwrap().write("docs/c.txt", "new").unwrap();

        assert_eq!(overlay.found("docs/a.txt"), Found::Upper(Kind::File));
        assert_eq!(overlay.found("docs/b.txt"), Found::Missing);
        assert_eq!(overlay.kind("docs/b.txt"), None);
        assert_eq!(names(overlay, "docs"), ["a.txt", "c.txt"]);
        assert!(overlay.touches("docs") && !overlay.touches("other"));
        assert_eq!(
            std::fs::read_to_string(ws.path().join("docs/a.txt")).unwrap(),
            "a"
        );
        assert!(ws.path().join("docs/b.txt").exists());
        assert!(!ws.path().join("docs/c.txt").exists());
    }

    #[test]
    fn a_file_made_and_deleted_by_the_call_leaves_no_change() {
        let (_ws, mut stage) = staged(&[], &[]);
        let overlay = &mut stage.overlay;
        overlay.stage_new_file("tmp.txt").unwrap();
        overlay.up().unwrap().write("tmp.txt", "x").unwrap();
        overlay.unlink("tmp.txt").unwrap();
        assert!(overlay.is_empty(), "{:?}", overlay.entries);
        assert_eq!(overlay.kind("tmp.txt"), None);
    }

    #[test]
    fn a_folder_made_where_a_file_was_hides_nothing_of_the_workspace_under_it() {
        let (_ws, mut stage) = staged(&["old"], &[("old/inner.txt", "i")]);
        let overlay = &mut stage.overlay;
        overlay.unlink("old/inner.txt").unwrap();
        overlay.rmdir("old").unwrap();
        overlay.mkdir("old").unwrap();
        assert_eq!(overlay.kind("old"), Some(Kind::Dir));
        assert_eq!(overlay.found("old/inner.txt"), Found::Missing);
        assert!(names(overlay, "old").is_empty());
        // Deletions apply deepest first, then folders, then files.
        let plan: Vec<(String, bool)> = overlay
            .plan()
            .into_iter()
            .map(|(path, entry)| (path, matches!(entry, Entry::Gone { .. })))
            .collect();
        assert_eq!(
            plan,
            [
                ("old/inner.txt".to_string(), true),
                ("old".to_string(), false)
            ]
        );
    }

    #[test]
    fn a_folder_that_was_in_the_workspace_is_not_renamed_but_one_the_call_made_is() {
        let (_ws, mut stage) = staged(&["kept"], &[]);
        let overlay = &mut stage.overlay;
        let refused = overlay.rename("kept", "moved").unwrap_err();
        assert!(
            matches!(&refused, Deny::Refused(why) if why.contains("make `moved` and move the files")),
            "{refused:?}"
        );

        overlay.mkdir("made").unwrap();
        overlay.stage_new_file("made/f.txt").unwrap();
        overlay.up().unwrap().write("made/f.txt", "f").unwrap();
        overlay.rename("made", "moved").unwrap();
        assert_eq!(overlay.kind("made"), None);
        assert_eq!(overlay.found("moved/f.txt"), Found::Upper(Kind::File));
        assert_eq!(names(overlay, "moved"), ["f.txt"]);
        assert_eq!(
            overlay.rename("moved", "moved/inside"),
            Err(ErrorCode::Invalid.into())
        );
    }

    #[test]
    fn a_change_through_a_linked_folder_is_refused_in_words() {
        let (ws, mut stage) = staged(&["real"], &[("real/x.txt", "x")]);
        std::os::unix::fs::symlink("real", ws.path().join("via")).unwrap();
        let refused = stage.overlay.copy_up("via/x.txt", false).unwrap_err();
        assert!(
            matches!(&refused, Deny::Refused(why) if why.contains("`via` is a symbolic link")),
            "{refused:?}"
        );
        // A new file's folder must be a folder as the call sees it.
        assert_eq!(
            stage.overlay.stage_new_file("via/y.txt"),
            Err(ErrorCode::NotDirectory.into())
        );
        assert!(stage.overlay.is_empty());
    }

    #[test]
    fn links_are_judged_as_the_call_sees_the_workspace() {
        let (ws, mut stage) = staged(&["a", ".claude/skills/mine"], &[]);
        std::os::unix::fs::symlink("../..", ws.path().join("a/up")).unwrap();
        let overlay = &mut stage.overlay;
        let root = std::fs::canonicalize(ws.path()).unwrap();
        assert_eq!(overlay.link_refusal(Some(&root), "ok", "a"), None);
        let climbs = overlay.link_refusal(Some(&root), "l", "a/up/..").unwrap();
        assert!(climbs.contains("climbs"), "{climbs}");
        let out = overlay.link_refusal(Some(&root), "l", "../..").unwrap();
        assert!(out.contains("must point inside"), "{out}");
        let skills = overlay
            .link_refusal(Some(&root), "l", ".claude/skills/mine")
            .unwrap();
        assert!(skills.contains("refused"), "{skills}");
    }

    #[test]
    fn a_fork_starts_from_the_changes_of_the_overlay_it_copies() {
        let (_ws, mut stage) = staged(&[], &[("a.txt", "a")]);
        stage.overlay.copy_up("a.txt", true).unwrap();
        stage
            .overlay
            .up()
            .unwrap()
            .write("a.txt", "forked")
            .unwrap();
        stage.overlay.symlink("a.txt", "link").unwrap();
        let upper = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(upper.path(), cap_std::ambient_authority()).unwrap();
        let fork = stage.overlay.fork(dir).unwrap();
        assert_eq!(fork.found("a.txt"), Found::Upper(Kind::File));
        assert_eq!(fork.raw_link("link").as_deref(), Some("a.txt"));
        assert_eq!(
            std::fs::read_to_string(upper.path().join("a.txt")).unwrap(),
            "forked"
        );
    }
}
