//! The locks that let processes take turns on a workspace and tell a
//! running call's stage from an abandoned one, on one machine or on
//! several sharing the transaction folder on a network volume.
//!
//! Both are `flock`s on files opened for writing. On a local file system a
//! flock excludes every other open file, this process's too. Over NFS,
//! Linux emulates flock with POSIX record locks, which take an exclusive
//! lock only through a descriptor open for writing (so not on a folder)
//! and never exclude the process that holds them. So each lock also has an
//! in-process half: one process's commits on a workspace take turns on a
//! mutex, and the stages this process owns are remembered, so its own
//! recovery never takes one for abandoned.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

/// The file in a stage folder its owner holds locked.
const OWNER: &str = "owner";

/// Transaction folders whose lock some thread of this process holds.
static TURNS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
static TURN_FREED: Condvar = Condvar::new();
/// Stage folders this process owns.
static LIVE: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn held(set: &'static Mutex<BTreeSet<PathBuf>>) -> MutexGuard<'static, BTreeSet<PathBuf>> {
    set.lock().unwrap_or_else(|e| e.into_inner())
}

/// A workspace's lock, held: commits and recovery of one workspace take
/// turns, across threads, processes and machines that share `txn`.
#[derive(Debug)]
pub(super) struct WorkspaceLock {
    txn: PathBuf,
    _file: File,
}

/// Waits for the lock of the transaction folder `txn`.
pub(super) fn lock_workspace(txn: &Path) -> io::Result<WorkspaceLock> {
    super::transaction::create_private(txn)?;
    {
        let mut turns = held(&TURNS);
        while turns.contains(txn) {
            turns = TURN_FREED.wait(turns).unwrap_or_else(|e| e.into_inner());
        }
        turns.insert(txn.to_owned());
    }
    let locked =
        open_for_lock(&txn.join("lock"), true).and_then(|file| flock(&file, true).map(|()| file));
    match locked {
        Ok(file) => Ok(WorkspaceLock {
            txn: txn.to_owned(),
            _file: file,
        }),
        Err(e) => {
            release_turn(txn);
            Err(e)
        }
    }
}

impl Drop for WorkspaceLock {
    fn drop(&mut self) {
        release_turn(&self.txn);
    }
}

fn release_turn(txn: &Path) {
    held(&TURNS).remove(txn);
    TURN_FREED.notify_all();
}

/// A stage folder's ownership, held for as long as the stage lives.
#[derive(Debug)]
pub(super) struct StageLock {
    folder: PathBuf,
    _file: File,
}

impl Drop for StageLock {
    fn drop(&mut self) {
        held(&LIVE).remove(&self.folder);
    }
}

/// Takes ownership of the stage folder `folder`, just made; `None` when
/// another process's recovery took it in the moment between (it is then
/// gone or locked).
pub(super) fn own_stage(folder: &Path) -> io::Result<Option<StageLock>> {
    let file = match open_for_lock(&folder.join(OWNER), true) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !try_flock(&file)? {
        return Ok(None);
    }
    held(&LIVE).insert(folder.to_owned());
    Ok(Some(StageLock {
        folder: folder.to_owned(),
        _file: file,
    }))
}

/// Whether the stage folder `folder` is abandoned: no live owner, here or
/// in any process. While the returned guard lives no owner can appear.
pub(super) fn abandoned(folder: &Path) -> io::Result<Option<Option<File>>> {
    if held(&LIVE).contains(folder) {
        return Ok(None);
    }
    match open_for_lock(&folder.join(OWNER), false) {
        // Made but never owned: its maker died, or gave it up to a
        // recovery like this one.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(None)),
        Err(e) => Err(e),
        Ok(file) => Ok(try_flock(&file)?.then_some(Some(file))),
    }
}

fn open_for_lock(path: &Path, create: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

fn flock(file: &File, wait: bool) -> io::Result<()> {
    use rustix::fs::FlockOperation as F;
    let op = if wait {
        F::LockExclusive
    } else {
        F::NonBlockingLockExclusive
    };
    rustix::fs::flock(file, op).map_err(io::Error::from)
}

/// Takes `file`'s lock if no one holds it.
fn try_flock(file: &File) -> io::Result<bool> {
    match flock(file, false) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_this_process_owns_is_never_abandoned_even_where_locks_do_not_exclude_it() {
        let txn = tempfile::tempdir().unwrap();
        let folder = txn.path().join("s1");
        std::fs::create_dir(&folder).unwrap();
        let owned = own_stage(&folder)
            .unwrap()
            .expect("a fresh folder is owned");
        assert!(abandoned(&folder).unwrap().is_none());
        drop(owned);
        assert!(abandoned(&folder).unwrap().is_some());
        let never_owned = txn.path().join("s2");
        std::fs::create_dir(&never_owned).unwrap();
        assert!(matches!(abandoned(&never_owned).unwrap(), Some(None)));
    }
}
