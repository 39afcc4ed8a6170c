//! A call's staged workspace handed to a host program, and the program's
//! changes taken back (`sandbox/program`).
//!
//! A host program cannot go through the guard's overlay: it makes system
//! calls, not WASI calls. It gets the kernel's overlay file system
//! instead, over the same view: the workspace below, the call's changes so
//! far as a layer above it ([`Stage::write_layer`]), and a fresh upper
//! folder that catches everything the program writes. After the program
//! exits, [`Stage::take_in`] replays that upper folder onto the call's own
//! overlay, through the same operations a guest's writes take, so a
//! program's writes are staged, diffed, confirmed, dry-run and committed
//! like any other.

use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use cap_std::fs::{Dir, MetadataExt as _, OpenOptions};

use super::overlay::{Entry, Overlay};
use super::path::{Kind, WsPath, ancestors, parent};
use super::transaction::Stage;
use crate::mount::{QuotaExceeded, QuotaKind};
use crate::protect::{self, Last};

/// The extended attribute overlayfs (mounted with `userxattr`) puts on a
/// folder that hides everything below it.
const OPAQUE_XATTR: &str = "user.overlay.opaque";

/// Why a program's changes could not be taken in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TakeInError {
    #[error(transparent)]
    Quota(#[from] QuotaExceeded),
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A workspace file the program changed was changed by someone else
    /// while it ran: taking its version in would lose theirs.
    #[error("`{0}` changed in the workspace while the program ran")]
    Changed(String),
}

impl Stage {
    /// Writes the call's changes so far into the empty folder `layer` as
    /// an overlayfs layer: its files (hard links to the staged copies,
    /// which a lower layer never changes), folders and links, and a
    /// whiteout for each path it deleted.
    pub(crate) fn write_layer(&self, layer: &Dir) -> io::Result<()> {
        let overlay = &self.overlay;
        for (path, entry) in overlay.plan() {
            let gone_above = ancestors(&path)
                .any(|up| matches!(overlay.entries.get(up), Some(Entry::Gone { .. })));
            if gone_above {
                continue;
            }
            let up = parent(&path);
            if !up.is_empty() {
                layer.create_dir_all(up)?;
            }
            match entry {
                Entry::Gone { .. } => whiteout(layer, &path)?,
                Entry::Dir { .. } => layer.create_dir_all(&path)?,
                Entry::File { .. } => {
                    if overlay.up()?.hard_link(&path, layer, &path).is_err() {
                        overlay.up()?.copy(&path, layer, &path)?;
                    }
                }
                Entry::Link { .. } => {
                    layer.symlink(overlay.up()?.read_link_contents(&path)?, &path)?
                }
            }
        }
        Ok(())
    }

    /// Replays what a program left in the overlayfs upper folder `upper`
    /// onto the call's changes. Every byte and entry is spent through
    /// `spend` first (the workspace quota); changes the guard would refuse
    /// a guest (protected folders, links that lead out) are left out and
    /// said in the list returned.
    ///
    /// A workspace path the program changed that someone else changed
    /// since `started` (the program's start) fails the whole take-in
    /// before anything is staged: the program worked on the version before.
    pub(crate) fn take_in(
        &mut self,
        upper: &Path,
        root: Option<&Path>,
        started: std::time::SystemTime,
        spend: &mut (dyn FnMut(QuotaKind, u64) -> Result<(), QuotaExceeded> + Send),
    ) -> Result<Vec<String>, TakeInError> {
        self.prepare()?;
        changed_since(&self.overlay, upper, "", started)?;
        let mut taking = TakingIn {
            overlay: &mut self.overlay,
            root,
            refusals: Vec::new(),
            spend,
        };
        taking.folder(upper, "")?;
        Ok(taking.refusals)
    }
}

/// Fails with the first path under `upper` (the program's changes) whose
/// workspace file, as the call sees it, changed after `started`. Folders
/// are not compared: their times move whenever anyone adds a file.
fn changed_since(
    overlay: &Overlay,
    upper: &Path,
    ws: &str,
    started: std::time::SystemTime,
) -> Result<(), TakeInError> {
    let since = started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    for entry in std::fs::read_dir(upper)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = super::overlay::join_name(ws, &name);
        if entry.file_type()?.is_dir() {
            changed_since(overlay, &entry.path(), &path, started)?;
            continue;
        }
        if overlay.found(&path) != super::overlay::Found::Lower {
            continue;
        }
        if let Some(meta) = overlay.lower_meta(&path).filter(|m| !m.is_dir()) {
            let ctime = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
            if ctime > since {
                return Err(TakeInError::Changed(path));
            }
        }
    }
    Ok(())
}

/// Makes a whiteout (a character device 0:0) at `path` in `layer`.
fn whiteout(layer: &Dir, path: &str) -> io::Result<()> {
    use rustix::fs::{FileType, Mode};
    rustix::fs::mknodat(layer, path, FileType::CharacterDevice, Mode::empty(), 0)?;
    Ok(())
}

/// Whether overlayfs marked the folder at `path` opaque.
fn is_opaque(path: &Path) -> bool {
    let mut value = [0u8; 4];
    matches!(
        rustix::fs::lgetxattr(path, OPAQUE_XATTR, &mut value[..]),
        Ok(1) if value[0] == b'y'
    )
}

struct TakingIn<'a> {
    overlay: &'a mut Overlay,
    root: Option<&'a Path>,
    refusals: Vec<String>,
    spend: &'a mut (dyn FnMut(QuotaKind, u64) -> Result<(), QuotaExceeded> + Send),
}

impl TakingIn<'_> {
    fn folder(&mut self, host: &Path, ws: &str) -> Result<(), TakeInError> {
        let mut names: Vec<_> = std::fs::read_dir(host)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            let Some(name) = name.to_str() else {
                self.refusals.push(format!(
                    "a program made a file in `{}` whose name is not UTF-8; it was left out",
                    if ws.is_empty() { "." } else { ws }
                ));
                continue;
            };
            let path = super::overlay::join_name(ws, name);
            self.entry(&host.join(name), &path)?;
        }
        Ok(())
    }

    fn entry(&mut self, host: &Path, path: &WsPath) -> Result<(), TakeInError> {
        let meta = std::fs::symlink_metadata(host)?;
        let kind = meta.file_type();
        let is_whiteout = kind.is_char_device() && meta.rdev() == 0;
        if let Err(refusal) = protect::check_change(&self.overlay.lower, path, Last::Link) {
            self.refusals.push(refusal.message("change"));
            return Ok(());
        }
        if is_whiteout {
            return self.remove(path);
        }
        if kind.is_dir() {
            let opaque = is_opaque(host);
            match self.overlay.kind(path) {
                Some(Kind::Dir) if !opaque => {}
                Some(_) => {
                    self.remove(path)?;
                    self.mkdir(path)?;
                }
                None => self.mkdir(path)?,
            }
            return self.folder(host, path);
        }
        if kind.is_symlink() {
            let target = std::fs::read_link(host)?;
            let Some(target) = target.to_str() else {
                self.refusals.push(format!(
                    "a program made a link at `{path}` whose target is not UTF-8; it was left out"
                ));
                return Ok(());
            };
            if let Some(why) = self.overlay.link_refusal(self.root, path, target) {
                self.refusals.push(why);
                return Ok(());
            }
            self.remove(path)?;
            (self.spend)(QuotaKind::Entries, 1)?;
            return self.staged(path, |o| o.symlink(target, path));
        }
        if kind.is_file() {
            return self.file(host, path, meta.len());
        }
        self.refusals.push(format!(
            "a program made `{path}`, which is not a file, folder or link; it was left out"
        ));
        Ok(())
    }

    fn file(&mut self, host: &Path, path: &str, len: u64) -> Result<(), TakeInError> {
        match self.overlay.kind(path) {
            Some(Kind::File) if self.same_as_seen(host, path, len)? => return Ok(()),
            Some(Kind::File) | None => {}
            Some(_) => self.remove(path)?,
        }
        (self.spend)(QuotaKind::Bytes, len)?;
        let staged_above = matches!(
            self.overlay.found(path),
            super::overlay::Found::Upper(Kind::File)
        );
        if !staged_above {
            if self.overlay.kind(path).is_some() {
                self.staged(path, |o| o.copy_up(path, true).map(|_| ()))?;
            } else {
                (self.spend)(QuotaKind::Entries, 1)?;
                self.staged(path, |o| o.stage_new_file(path))?;
            }
        }
        let mut to = self.overlay.up()?.open_with(
            path,
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        io::copy(&mut std::fs::File::open(host)?, &mut to)?;
        Ok(())
    }

    /// Whether the program's file at `host` holds what the call sees at
    /// `path` (a file copied up to change only its mode, say).
    fn same_as_seen(&self, host: &Path, path: &str, len: u64) -> io::Result<bool> {
        let seen = match self.overlay.found(path) {
            super::overlay::Found::Upper(_) => self.overlay.up()?.open(path)?,
            _ => self.overlay.lower.open(path)?,
        };
        if seen.metadata()?.len() != len {
            return Ok(false);
        }
        let mut ours = io::BufReader::new(std::fs::File::open(host)?);
        let mut theirs = io::BufReader::new(seen);
        let (mut a, mut b) = ([0u8; 8192], [0u8; 8192]);
        loop {
            let n = ours.read(&mut a)?;
            if n == 0 {
                return Ok(true);
            }
            theirs.read_exact(&mut b[..n])?;
            if a[..n] != b[..n] {
                return Ok(false);
            }
        }
    }

    fn mkdir(&mut self, path: &str) -> Result<(), TakeInError> {
        (self.spend)(QuotaKind::Entries, 1)?;
        self.staged(path, |o| o.mkdir(path))
    }

    /// Deletes `path` as the call sees it, everything under it first.
    fn remove(&mut self, path: &str) -> Result<(), TakeInError> {
        match self.overlay.kind(path) {
            None => Ok(()),
            Some(Kind::Dir) => {
                let listing = match self.overlay.listing(path) {
                    Ok(listing) => listing,
                    Err(deny) => return self.refused(path, deny),
                };
                for (name, _) in listing {
                    self.remove(&super::overlay::join_name(path, &name))?;
                }
                self.staged(path, |o| o.rmdir(path))
            }
            Some(_) => self.staged(path, |o| o.unlink(path)),
        }
    }

    /// Runs one staged change; a refusal is noted, not fatal.
    fn staged(
        &mut self,
        path: &str,
        change: impl FnOnce(&mut Overlay) -> Result<(), super::Deny>,
    ) -> Result<(), TakeInError> {
        match change(self.overlay) {
            Ok(()) => Ok(()),
            Err(deny) => self.refused(path, deny),
        }
    }

    fn refused(&mut self, path: &str, deny: super::Deny) -> Result<(), TakeInError> {
        self.refusals.push(match deny {
            super::Deny::Refused(why) => why,
            super::Deny::Code(code) => format!(
                "a program's change to `{path}` could not be staged ({code:?}); it was left out"
            ),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace with `files`, a stage on it, and an empty folder to
    /// play a program's overlayfs upper folder.
    fn setting(files: &[(&str, &str)]) -> (tempfile::TempDir, Stage, tempfile::TempDir) {
        let ws = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let file = ws.path().join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        let stage = Stage::begin(ws.path()).unwrap();
        (ws, stage, tempfile::tempdir().unwrap())
    }

    fn no_quota(_: QuotaKind, _: u64) -> Result<(), QuotaExceeded> {
        Ok(())
    }

    fn seen(stage: &Stage, path: &str) -> Option<String> {
        use super::super::overlay::Found;
        match stage.overlay.found(path) {
            Found::Upper(Kind::File) => stage.overlay.up().unwrap().read_to_string(path).ok(),
            Found::Lower => stage.overlay.lower.read_to_string(path).ok(),
            _ => None,
        }
    }

    #[test]
    fn a_program_s_upper_folder_becomes_staged_changes() {
        let (ws, mut stage, upper) = setting(&[
            ("keep.txt", "keep"),
            ("edit.txt", "old"),
            ("gone.txt", "gone"),
            ("same.txt", "same"),
            ("tree/a.txt", "a"),
            ("tree/b.txt", "b"),
        ]);
        let up = upper.path();
        std::fs::write(up.join("edit.txt"), "new").unwrap();
        std::fs::write(up.join("made.txt"), "made").unwrap();
        // Copied up unchanged (a mode change, say): no change at all.
        std::fs::write(up.join("same.txt"), "same").unwrap();
        let upper_dir = Dir::open_ambient_dir(up, cap_std::ambient_authority()).unwrap();
        whiteout(&upper_dir, "gone.txt").unwrap();
        std::fs::create_dir(up.join("tree")).unwrap();
        whiteout(&upper_dir, "tree/a.txt").unwrap();
        std::fs::write(up.join("tree/c.txt"), "c").unwrap();
        std::os::unix::fs::symlink("made.txt", up.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", up.join("escape")).unwrap();
        std::fs::create_dir_all(up.join(".claude/skills/evil")).unwrap();
        std::fs::write(up.join(".claude/skills/evil/SKILL.md"), "x").unwrap();

        let mut spent = 0;
        let mut spend = |kind: QuotaKind, amount: u64| {
            if kind == QuotaKind::Bytes {
                spent += amount;
            }
            Ok(())
        };
        let root = std::fs::canonicalize(ws.path()).unwrap();
        let refusals = stage
            .take_in(up, Some(&root), std::time::SystemTime::now(), &mut spend)
            .unwrap();

        assert_eq!(seen(&stage, "edit.txt").as_deref(), Some("new"));
        assert_eq!(seen(&stage, "made.txt").as_deref(), Some("made"));
        assert_eq!(seen(&stage, "keep.txt").as_deref(), Some("keep"));
        assert_eq!(seen(&stage, "gone.txt"), None);
        assert_eq!(seen(&stage, "tree/a.txt"), None);
        assert_eq!(seen(&stage, "tree/b.txt").as_deref(), Some("b"));
        assert_eq!(seen(&stage, "tree/c.txt").as_deref(), Some("c"));
        assert_eq!(stage.overlay.kind("link"), Some(Kind::Link));
        assert_eq!(stage.overlay.kind("escape"), None, "{refusals:?}");
        assert_eq!(stage.overlay.kind(".claude/skills"), None, "{refusals:?}");
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert_eq!(spent, 3 + 4 + 1, "new, made and c; same.txt costs nothing");
        let changed: Vec<String> = stage
            .changes()
            .changes
            .iter()
            .map(|c| c.path.clone())
            .collect();
        assert!(!changed.contains(&"same.txt".to_string()), "{changed:?}");
        // Nothing reached the workspace before a commit.
        assert_eq!(
            std::fs::read_to_string(ws.path().join("edit.txt")).unwrap(),
            "old"
        );
    }

    #[test]
    fn an_opaque_folder_hides_what_the_workspace_had_there() {
        let (_ws, mut stage, upper) = setting(&[("dir/old.txt", "old")]);
        let dir = upper.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        rustix::fs::setxattr(&dir, OPAQUE_XATTR, b"y", rustix::fs::XattrFlags::empty()).unwrap();
        std::fs::write(dir.join("new.txt"), "new").unwrap();
        stage
            .take_in(
                upper.path(),
                None,
                std::time::SystemTime::now(),
                &mut no_quota,
            )
            .unwrap();
        assert_eq!(seen(&stage, "dir/old.txt"), None);
        assert_eq!(seen(&stage, "dir/new.txt").as_deref(), Some("new"));
    }

    #[test]
    fn a_quota_the_program_overran_stops_the_take_in() {
        let (_ws, mut stage, upper) = setting(&[]);
        std::fs::write(upper.path().join("big.bin"), vec![0u8; 4096]).unwrap();
        let mut spend = |kind: QuotaKind, amount: u64| {
            if kind == QuotaKind::Bytes && amount > 1024 {
                return Err(QuotaExceeded {
                    mount: crate::mount::Mount::Workspace,
                    what: kind,
                    limit: 1024,
                });
            }
            Ok(())
        };
        let error = stage
            .take_in(upper.path(), None, std::time::SystemTime::now(), &mut spend)
            .unwrap_err();
        assert!(matches!(error, TakeInError::Quota(_)), "{error}");
        assert_eq!(seen(&stage, "big.bin"), None);
    }

    #[test]
    fn a_workspace_file_changed_while_the_program_ran_is_not_overwritten() {
        let (ws, mut stage, upper) = setting(&[("a.txt", "theirs before")]);
        let started = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
        std::fs::write(ws.path().join("a.txt"), "theirs, meanwhile").unwrap();
        std::fs::write(upper.path().join("a.txt"), "the program's").unwrap();
        std::fs::write(upper.path().join("b.txt"), "new").unwrap();
        let error = stage
            .take_in(upper.path(), None, started, &mut no_quota)
            .unwrap_err();
        assert!(
            matches!(&error, TakeInError::Changed(p) if p == "a.txt"),
            "{error}"
        );
        assert!(
            stage.is_empty(),
            "nothing is staged when one path conflicts"
        );
    }

    #[test]
    fn the_layer_shows_a_program_the_call_s_changes_so_far() {
        let (_ws, mut stage, layer) = setting(&[("gone.txt", "x"), ("d/kept.txt", "k")]);
        stage.prepare().unwrap();
        stage.overlay.stage_new_file("new.txt").unwrap();
        stage.overlay.up().unwrap().write("new.txt", "new").unwrap();
        stage.overlay.unlink("gone.txt").unwrap();
        stage.overlay.mkdir("d/sub").unwrap();
        let dir = Dir::open_ambient_dir(layer.path(), cap_std::ambient_authority()).unwrap();
        stage.write_layer(&dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(layer.path().join("new.txt")).unwrap(),
            "new"
        );
        let gone = std::fs::symlink_metadata(layer.path().join("gone.txt")).unwrap();
        assert!(gone.file_type().is_char_device() && gone.rdev() == 0);
        assert!(layer.path().join("d/sub").is_dir());
        assert!(
            !layer.path().join("d/kept.txt").exists(),
            "the workspace is the layer below"
        );
    }
}
