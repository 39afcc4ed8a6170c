//! Each call's private `/tmp`: an empty folder that no other call has
//! changed, reused only when the call that held it left no trace.
//!
//! Creating a folder and removing it again was the largest single cost of
//! a sandboxed call (ext4's inode allocation after a recent delete scans
//! its bitmaps: about 25 µs of a 110 µs call). Most tools never touch
//! `/tmp`, so a folder comes back from a call exactly as it went in. Such
//! a folder is kept and handed to a later call; anything else is deleted.
//!
//! "Exactly as it went in" is decided by the kernel, not by the guest's
//! account of what it did: the folder must still be empty, and its access,
//! modification and change times must be the ones it was made with (a
//! reused folder is by that rule unchanged since). Creating, renaming or deleting an entry moves the last two,
//! and setting the folder's own times moves the change time, so a guest
//! cannot pass a file or a timestamp to the next holder. The host's own
//! look inside opens the folder with `O_NOATIME`, so it moves nothing.
//!
//! That look (an open, two `getdents` and a close) was a fifth of a
//! sandboxed call, and it is needed only while a change could leave the
//! times as they were: the kernel stamps a change with its coarse clock,
//! which advances once a tick, so a change in the tick the folder was made
//! in may not move them. A folder handed out at least a second after it
//! was made, on a file system that keeps sub-second times, is judged by
//! its times alone: every change the call made is stamped later.

use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustix::fs::Timespec;
use tempfile::TempDir;

use super::grants::PinnedDir;

/// At most this many untouched folders wait for reuse; more calls than
/// this at once create their own and the extra folders are deleted.
const MAX_IDLE: usize = 16;

/// A folder handed out at least this long after it was made is judged by
/// its times alone (when its file system keeps sub-second times): every
/// change the call makes is stamped a tick or more after the folder was
/// made, so it moves them.
const JUDGED_BY_TIMES_AFTER: Duration = Duration::from_secs(1);

/// Untouched scratch folders waiting for the next call.
pub(crate) struct ScratchPool {
    idle: Mutex<Vec<Scratch>>,
    judged_by_times_after: Duration,
}

impl Default for ScratchPool {
    fn default() -> Self {
        ScratchPool {
            idle: Mutex::default(),
            judged_by_times_after: JUDGED_BY_TIMES_AFTER,
        }
    }
}

/// One scratch folder, held open.
struct Scratch {
    /// Deletes the folder when dropped.
    _dir: TempDir,
    pinned: PinnedDir,
    /// Its access, modification and change times when it was made.
    made: [Timespec; 3],
    /// When it was last handed to a call.
    leased: SystemTime,
}

fn times(dir: &impl AsFd) -> std::io::Result<[Timespec; 3]> {
    let st = rustix::fs::fstat(dir)?;
    let at = |secs: i64, nsecs: u64| Timespec {
        tv_sec: secs,
        tv_nsec: nsecs as _,
    };
    Ok([
        at(st.st_atime as i64, st.st_atime_nsec as u64),
        at(st.st_mtime as i64, st.st_mtime_nsec as u64),
        at(st.st_ctime as i64, st.st_ctime_nsec as u64),
    ])
}

impl Scratch {
    fn create() -> std::io::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("skillbox-call-")
            .tempdir()?;
        let pinned = PinnedDir::open(dir.path())?;
        let made = times(pinned.dir())?;
        Ok(Scratch {
            _dir: dir,
            pinned,
            made,
            leased: SystemTime::now(),
        })
    }

    /// Whether the folder is exactly as the last call got it: its times
    /// are the ones it was made with, and, unless they alone tell (see
    /// [`Scratch::told_by_times`]), it is empty.
    fn untouched(&self, judged_by_times_after: Duration) -> std::io::Result<bool> {
        use rustix::fs::{Mode, OFlags};
        if times(self.pinned.dir())? != self.made {
            return Ok(false);
        }
        if self.told_by_times(judged_by_times_after) {
            return Ok(true);
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOATIME | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.pinned.dir(), ".", flags, Mode::empty())?;
        let times_now = times(&fd)?;
        let mut entries = rustix::fs::Dir::new(fd)?;
        let empty = entries
            .all(|entry| entry.is_ok_and(|e| matches!(e.file_name().to_bytes(), b"." | b"..")));
        Ok(empty && times_now == self.made)
    }

    /// Whether unchanged times alone show the folder unchanged: it was
    /// handed to the call `after` or longer after it was made, by the
    /// clock, and its file system keeps sub-second times (a change time on
    /// a whole second is taken for one that does not). What the call
    /// changed was stamped after it got the folder, so a tick or more
    /// later than the folder was made.
    fn told_by_times(&self, after: Duration) -> bool {
        crate::stamp::settled(self.made[2], self.leased, after)
    }
}

impl ScratchPool {
    /// An empty folder for one call: reused if one is idle, else new.
    pub(crate) fn lease(self: &Arc<Self>) -> std::io::Result<ScratchLease> {
        let reused = self.lock().pop();
        let mut scratch = match reused {
            Some(scratch) => scratch,
            None => Scratch::create()?,
        };
        scratch.leased = SystemTime::now();
        Ok(ScratchLease {
            scratch: Some(scratch),
            pool: Arc::clone(self),
        })
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.lock().len()
    }

    fn give_back(&self, scratch: Scratch) {
        if !scratch
            .untouched(self.judged_by_times_after)
            .unwrap_or(false)
        {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push(scratch);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Scratch>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A call's hold on a scratch folder. Dropping it (when the call's store
/// goes, however the call ended) returns the folder if it is untouched and
/// deletes it otherwise.
pub(crate) struct ScratchLease {
    scratch: Option<Scratch>,
    pool: Arc<ScratchPool>,
}

impl ScratchLease {
    /// The folder, pinned: the call mounts this very folder.
    pub(crate) fn dir(&self) -> &PinnedDir {
        &self.held().pinned
    }

    fn held(&self) -> &Scratch {
        self.scratch.as_ref().expect("held until drop")
    }
}

impl Drop for ScratchLease {
    fn drop(&mut self) {
        if let Some(scratch) = self.scratch.take() {
            self.pool.give_back(scratch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    /// Which folder a lease holds: its random name (inode numbers are
    /// reused by the file system as soon as a folder is deleted).
    fn identity(lease: &ScratchLease) -> std::path::PathBuf {
        lease.scratch.as_ref().unwrap()._dir.path().to_path_buf()
    }

    #[test]
    fn an_untouched_folder_is_reused() {
        let pool = Arc::new(ScratchPool::default());
        let first = pool.lease().unwrap();
        let id = identity(&first);
        drop(first);
        assert_eq!(pool.idle(), 1);
        let second = pool.lease().unwrap();
        assert_eq!(identity(&second), id);
    }

    /// Leases a folder from `pool`, lets `call` act on it as a call would,
    /// and asserts that the folder is deleted, never handed out again.
    fn assert_not_reused(pool: &Arc<ScratchPool>, call: impl FnOnce(&ScratchLease)) {
        let lease = pool.lease().unwrap();
        let id = identity(&lease);
        call(&lease);
        drop(lease);
        assert_eq!(pool.idle(), 0);
        assert_ne!(identity(&pool.lease().unwrap()), id);
    }

    #[test]
    fn a_folder_with_an_entry_left_in_it_is_deleted() {
        let pool = Arc::new(ScratchPool::default());
        assert_not_reused(&pool, |lease| {
            lease.dir().dir().write("left", b"x").unwrap();
        });
    }

    #[test]
    fn a_folder_emptied_again_is_not_reused() {
        // Its change time moved.
        let pool = Arc::new(ScratchPool::default());
        assert_not_reused(&pool, |lease| {
            lease.dir().dir().write("gone", b"x").unwrap();
            lease.dir().dir().remove_file("gone").unwrap();
        });
    }

    /// Sets the leased folder's times as a guest would, through a handle.
    fn set_times(
        lease: &ScratchLease,
        times: fn(std::fs::FileTimes, SystemTime) -> std::fs::FileTimes,
    ) {
        let file = lease.dir().dir().open(".").unwrap().into_std();
        let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1234);
        file.set_times(times(std::fs::FileTimes::new(), when))
            .unwrap();
    }

    #[test]
    fn a_folder_whose_times_were_set_is_not_reused() {
        let pool = Arc::new(ScratchPool::default());
        let lease = pool.lease().unwrap();
        set_times(&lease, std::fs::FileTimes::set_modified);
        drop(lease);
        assert_eq!(pool.idle(), 0);
    }

    #[test]
    fn an_access_time_a_call_set_does_not_reach_the_next_call() {
        let pool = Arc::new(ScratchPool::default());
        let lease = pool.lease().unwrap();
        set_times(&lease, std::fs::FileTimes::set_accessed);
        drop(lease);
        let next = pool.lease().unwrap();
        let [atime, _, _] = times(next.dir().dir()).unwrap();
        assert_ne!(atime.tv_sec, 1234);
    }

    /// Returns once a change made now is stamped later than `made`: the
    /// kernel's file-time clock moves once a tick.
    fn wait_for_a_later_stamp(made: Timespec) {
        let probe = tempfile::tempdir().unwrap();
        let file = probe.path().join("p");
        loop {
            // Each write stamps the file anew; the folder only at the first.
            std::fs::write(&file, b"x").unwrap();
            let [_, _, changed] = times(&std::fs::File::open(&file).unwrap()).unwrap();
            if (changed.tv_sec, changed.tv_nsec) > (made.tv_sec, made.tv_nsec) {
                return;
            }
        }
    }

    #[test]
    fn a_folder_judged_by_its_times_alone_is_still_deleted_when_a_call_left_a_file() {
        let pool = Arc::new(ScratchPool {
            judged_by_times_after: Duration::ZERO,
            ..ScratchPool::default()
        });
        assert_not_reused(&pool, |lease| {
            let made = lease.held().made;
            assert!(lease.held().told_by_times(Duration::ZERO) || made[2].tv_nsec == 0);
            wait_for_a_later_stamp(made[2]);
            lease.dir().dir().write("left", b"x").unwrap();
        });
    }

    #[test]
    fn a_folder_handed_out_young_is_listed_however_long_the_call_ran() {
        // A call that got the folder in the tick it was made can leave a
        // file without moving its times; that the call then ran for ten
        // seconds changes nothing.
        let pool = Arc::new(ScratchPool::default());
        let lease = pool.lease().unwrap();
        assert!(!lease.held().told_by_times(JUDGED_BY_TIMES_AFTER));
        let mut scratch = Scratch::create().unwrap();
        let made_at = SystemTime::now() - Duration::from_secs(10);
        let since_epoch = made_at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        scratch.made[2] = Timespec {
            tv_sec: since_epoch.as_secs() as _,
            tv_nsec: since_epoch.subsec_nanos().max(1) as _,
        };
        scratch.leased = made_at;
        assert!(!scratch.told_by_times(JUDGED_BY_TIMES_AFTER));
        scratch.leased = made_at + JUDGED_BY_TIMES_AFTER;
        assert!(scratch.told_by_times(JUDGED_BY_TIMES_AFTER));
        scratch.made[2].tv_nsec = 0;
        assert!(
            !scratch.told_by_times(Duration::ZERO),
            "no sub-second times"
        );
    }

    #[test]
    fn at_most_max_idle_folders_wait() {
        let pool = Arc::new(ScratchPool::default());
        let leases: Vec<_> = (0..MAX_IDLE + 3).map(|_| pool.lease().unwrap()).collect();
        drop(leases);
        assert_eq!(pool.idle(), MAX_IDLE);
    }
}
