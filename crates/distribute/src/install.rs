//! Installing into a source folder so that a crash at any point leaves
//! either the old state or the new one, and the lock agreeing with it.
//!
//! ```text
//! stage   .skillbox-staging-XXXX/NAME   every file written and synced
//! journal .skillbox-install.json        {name, staged, backup, entry}, synced
//! swap    NAME -> .skillbox-old-XXXX    (when replacing)
//!         staged -> NAME
//! commit  skillbox.lock                 written whole: the commit point
//! clean   backup and journal removed
//! ```
//!
//! While a journal exists the catalog does not load the skill it names.
//! [`recover`] runs first in every command that changes a source: a lock
//! that already holds the journal's entry means the install committed, and
//! what is left is cleaned up; otherwise the old folder is put back. All
//! of it happens inside the source folder, so every rename is atomic.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::skill::lock::{self, JOURNAL_FILE, LockEntry, LockFile, sync_dir, write_atomically};

const STAGING_PREFIX: &str = ".skillbox-staging-";
const BACKUP_PREFIX: &str = ".skillbox-old-";

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot install into {root}: {why}")]
    Io { root: String, why: String },
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(
        "another skillbox command is installing into {root}; wait for it to finish, then run this again"
    )]
    Busy { root: String },
}

/// The right to change one source folder, held until dropped: two
/// commands never stage, recover or write the lock at once. The kernel
/// releases it when a command dies, `kill -9` included.
pub struct Busy {
    _file: std::fs::File,
}

/// Takes the source folder `root` for this command, or says who has it.
pub fn hold(root: &Path) -> Result<Busy, InstallError> {
    std::fs::create_dir_all(root).map_err(io(root))?;
    // The folder itself is locked, so nothing is left in it afterwards.
    let file = std::fs::File::open(root).map_err(io(root))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| InstallError::Busy {
            root: root.display().to_string(),
        },
    )?;
    Ok(Busy { _file: file })
}

fn io(root: &Path) -> impl Fn(std::io::Error) -> InstallError + '_ {
    move |e| InstallError::Io {
        root: root.display().to_string(),
        why: e.to_string(),
    }
}

/// A skill's files written into a staging folder of the source, not yet
/// installed. Dropped without [`Staged::commit`], it is removed.
pub struct Staged {
    root: PathBuf,
    holder: tempfile::TempDir,
    name: String,
}

/// Writes `files` into `<root>/.skillbox-staging-XXXX/<name>/`, each file
/// and folder synced. The paths were checked (`artifact::check_path`).
pub fn stage(root: &Path, name: &str, files: &[(String, Vec<u8>)]) -> Result<Staged, InstallError> {
    std::fs::create_dir_all(root).map_err(io(root))?;
    let holder = tempfile::Builder::new()
        .prefix(STAGING_PREFIX)
        .tempdir_in(root)
        .map_err(io(root))?;
    let dir = holder.path().join(name);
    std::fs::create_dir(&dir).map_err(io(root))?;
    let mut folders = std::collections::BTreeSet::new();
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(root))?;
            folders.insert(parent.to_path_buf());
        }
        use std::io::Write;
        let mut file = std::fs::File::create_new(&path).map_err(io(root))?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(io(root))?;
    }
    for folder in folders.iter().rev() {
        sync_dir(folder).map_err(io(root))?;
    }
    sync_dir(&dir).map_err(io(root))?;
    Ok(Staged {
        root: root.to_path_buf(),
        holder,
        name: name.to_string(),
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    name: String,
    /// The staging holder's folder name.
    staged: String,
    /// Where the replaced folder waits, when there was one.
    backup: Option<String>,
    entry: LockEntry,
}

impl Staged {
    /// The staged skill folder (named after the skill, for checks).
    pub fn dir(&self) -> PathBuf {
        self.holder.path().join(&self.name)
    }

    /// Installs the staged folder as `<root>/<name>` and records `entry`
    /// in the lock, atomically with respect to a crash (module docs).
    pub fn commit(self, entry: LockEntry) -> Result<(), InstallError> {
        let root = self.root.clone();
        let err = io(&root);
        let dest = root.join(&self.name);
        let holder = self.holder.keep();
        let backup = dest
            .exists()
            .then(|| format!("{BACKUP_PREFIX}{}", unique_suffix(&holder)));
        let journal = Journal {
            name: self.name.clone(),
            staged: file_name(&holder),
            backup: backup.clone(),
            entry: entry.clone(),
        };
        write_atomically(
            &root.join(JOURNAL_FILE),
            &serde_json::to_vec_pretty(&journal).expect("a journal serializes"),
        )
        .map_err(&err)?;
        pause_point("after-journal");
        if let Some(backup) = &backup {
            std::fs::rename(&dest, root.join(backup)).map_err(&err)?;
        }
        std::fs::rename(holder.join(&self.name), &dest).map_err(&err)?;
        sync_dir(&root).map_err(&err)?;
        pause_point("before-lock");
        let mut locked = LockFile::read(&root)?;
        locked.skills.insert(self.name.clone(), entry);
        locked.write(&root)?;
        finish(&root, &journal).map_err(&err)
    }
}

/// Removes what a committed install left behind.
fn finish(root: &Path, journal: &Journal) -> std::io::Result<()> {
    if let Some(backup) = &journal.backup {
        remove_dir_if_any(&root.join(backup))?;
    }
    remove_dir_if_any(&root.join(&journal.staged))?;
    std::fs::remove_file(root.join(JOURNAL_FILE))?;
    sync_dir(root)
}

/// What [`recover`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    Nothing,
    /// The install of this skill had committed; its leftovers are gone.
    Finished(String),
    /// The install of this skill had not committed; the old folder (or
    /// none) is back.
    Undone(String),
    /// A journal that named anything but this folder's own staging and
    /// backup folders was removed, and nothing else touched.
    Discarded,
}

impl Journal {
    /// Whether every name in it is one of this folder's own: a skill
    /// folder, a staging folder, a backup folder. A journal is a file in a
    /// folder others may write (a project's), so it is never trusted to
    /// name a path.
    fn is_own(&self) -> bool {
        let one_part =
            |s: &str| !s.is_empty() && !s.contains(['/', '\\', '\0']) && s != "." && s != "..";
        one_part(&self.name)
            && !self.name.starts_with('.')
            && one_part(&self.staged)
            && self.staged.starts_with(STAGING_PREFIX)
            && self
                .backup
                .as_deref()
                .is_none_or(|b| one_part(b) && b.starts_with(BACKUP_PREFIX))
    }
}

/// Finishes or undoes an interrupted install in `root`, and removes
/// staging folders no journal names.
pub fn recover(root: &Path) -> Result<Recovery, InstallError> {
    let err = io(root);
    let journal_path = root.join(JOURNAL_FILE);
    let outcome = match std::fs::read(&journal_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Recovery::Nothing,
        Err(e) => return Err(err(e)),
        Ok(bytes) => match serde_json::from_slice::<Journal>(&bytes) {
            // A journal that is not whole was never acted on: the rename
            // that publishes it is the first step.
            Err(_) => {
                std::fs::remove_file(&journal_path).map_err(&err)?;
                Recovery::Nothing
            }
            Ok(journal) if !journal.is_own() => {
                std::fs::remove_file(&journal_path).map_err(&err)?;
                Recovery::Discarded
            }
            Ok(journal) => {
                let lock = LockFile::read(root)?;
                if lock.skills.get(&journal.name) == Some(&journal.entry) {
                    finish(root, &journal).map_err(&err)?;
                    Recovery::Finished(journal.name)
                } else {
                    undo(root, &journal).map_err(&err)?;
                    Recovery::Undone(journal.name)
                }
            }
        },
    };
    // Leftovers of installs that never wrote a journal (killed while
    // staging) or of a removal.
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(STAGING_PREFIX) || name.starts_with(BACKUP_PREFIX) {
                remove_dir_if_any(&entry.path()).map_err(&err)?;
            }
        }
    }
    Ok(outcome)
}

fn undo(root: &Path, journal: &Journal) -> std::io::Result<()> {
    let dest = root.join(&journal.name);
    let staged_dir = root.join(&journal.staged).join(&journal.name);
    // The staged folder is gone only once it became `dest`: then `dest` is
    // the new version, and goes.
    if !staged_dir.exists() && dest.exists() {
        remove_dir_if_any(&dest)?;
    }
    if let Some(backup) = &journal.backup {
        let backup = root.join(backup);
        if backup.exists() && !dest.exists() {
            std::fs::rename(&backup, &dest)?;
        }
    }
    remove_dir_if_any(&root.join(&journal.staged))?;
    std::fs::remove_file(root.join(JOURNAL_FILE))?;
    sync_dir(root)
}

/// Uninstalls `name`: its folder is moved aside, the lock written without
/// it, then the folder deleted. A crash in between leaves the lock naming
/// a skill that is not there, which `sync` reinstalls.
pub fn remove(root: &Path, name: &str) -> Result<(), InstallError> {
    let err = io(root);
    let dest = root.join(name);
    let aside = root.join(format!("{BACKUP_PREFIX}{name}"));
    if dest.exists() {
        remove_dir_if_any(&aside).map_err(&err)?;
        std::fs::rename(&dest, &aside).map_err(&err)?;
        sync_dir(root).map_err(&err)?;
    }
    let mut locked = LockFile::read(root)?;
    if locked.skills.remove(name).is_some() {
        locked.write(root)?;
    }
    remove_dir_if_any(&aside).map_err(&err)?;
    sync_dir(root).map_err(&err)
}

fn remove_dir_if_any(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn unique_suffix(holder: &Path) -> String {
    file_name(holder)
        .trim_start_matches(STAGING_PREFIX)
        .to_string()
}

use crate::sandbox::stage::pause_point;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn entry(tag: &str) -> LockEntry {
        LockEntry {
            reference: format!("oci://r/x:{tag}"),
            resolved: format!("oci://r/x@{tag}"),
            content_digest: String::new(),
            files: BTreeMap::new(),
            signer: None,
            manifest: None,
            signature: None,
            installed_at: String::new(),
        }
    }

    fn files(text: &str) -> Vec<(String, Vec<u8>)> {
        vec![("SKILL.md".into(), text.as_bytes().to_vec())]
    }

    #[test]
    fn a_commit_replaces_the_folder_and_records_the_entry() {
        let root = tempfile::tempdir().unwrap();
        stage(root.path(), "x", &files("one"))
            .unwrap()
            .commit(entry("1"))
            .unwrap();
        stage(root.path(), "x", &files("two"))
            .unwrap()
            .commit(entry("2"))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("x/SKILL.md")).unwrap(),
            "two"
        );
        assert_eq!(LockFile::read(root.path()).unwrap().skills["x"], entry("2"));
        let left: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "only x and the lock: {left:?}");
    }

    #[test]
    fn every_crash_point_recovers_to_before_or_after() {
        // Crashed after the swap, before the lock: undone, old folder back.
        let root = tempfile::tempdir().unwrap();
        stage(root.path(), "x", &files("old"))
            .unwrap()
            .commit(entry("1"))
            .unwrap();
        let staged = stage(root.path(), "x", &files("new")).unwrap();
        let holder = staged.holder.keep();
        let journal = Journal {
            name: "x".into(),
            staged: file_name(&holder),
            backup: Some(format!("{BACKUP_PREFIX}t")),
            entry: entry("2"),
        };
        write_atomically(
            &root.path().join(JOURNAL_FILE),
            &serde_json::to_vec(&journal).unwrap(),
        )
        .unwrap();
        std::fs::rename(
            root.path().join("x"),
            root.path().join(format!("{BACKUP_PREFIX}t")),
        )
        .unwrap();
        std::fs::rename(holder.join("x"), root.path().join("x")).unwrap();
        assert_eq!(lock::pending_install(root.path()).as_deref(), Some("x"));
        assert_eq!(recover(root.path()).unwrap(), Recovery::Undone("x".into()));
        assert_eq!(
            std::fs::read_to_string(root.path().join("x/SKILL.md")).unwrap(),
            "old"
        );
        assert_eq!(LockFile::read(root.path()).unwrap().skills["x"], entry("1"));
        assert!(!root.path().join(JOURNAL_FILE).exists());

        // Crashed after the lock: finished.
        let staged = stage(root.path(), "x", &files("new")).unwrap();
        let holder = staged.holder.keep();
        let journal = Journal {
            name: "x".into(),
            staged: file_name(&holder),
            backup: None,
            entry: entry("3"),
        };
        write_atomically(
            &root.path().join(JOURNAL_FILE),
            &serde_json::to_vec(&journal).unwrap(),
        )
        .unwrap();
        let mut lock = LockFile::read(root.path()).unwrap();
        lock.skills.insert("x".into(), entry("3"));
        lock.write(root.path()).unwrap();
        assert_eq!(
            recover(root.path()).unwrap(),
            Recovery::Finished("x".into())
        );
        assert!(!holder.exists());
    }

    #[test]
    fn a_planted_journal_naming_paths_elsewhere_touches_nothing() {
        let root = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        std::fs::write(victim.path().join("keep"), "x").unwrap();
        for (name, staged, backup) in [
            ("loot", victim.path().display().to_string(), None),
            (
                "loot",
                format!("{STAGING_PREFIX}x"),
                Some(victim.path().display().to_string()),
            ),
            ("../up", format!("{STAGING_PREFIX}x"), None),
            ("loot", "../../victim".to_string(), None),
        ] {
            let journal = Journal {
                name: name.into(),
                staged,
                backup,
                entry: entry("1"),
            };
            write_atomically(
                &root.path().join(JOURNAL_FILE),
                &serde_json::to_vec(&journal).unwrap(),
            )
            .unwrap();
            assert_eq!(recover(root.path()).unwrap(), Recovery::Discarded);
            assert!(victim.path().join("keep").exists());
        }
    }

    #[test]
    fn one_command_at_a_time_changes_a_folder() {
        let root = tempfile::tempdir().unwrap();
        let first = hold(root.path()).unwrap();
        assert!(matches!(hold(root.path()), Err(InstallError::Busy { .. })));
        drop(first);
        assert!(hold(root.path()).is_ok());
    }
}
