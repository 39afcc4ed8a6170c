//! When a file's metadata alone shows that its bytes have not changed.
//!
//! On a local file system every write to a file moves its change time,
//! which no process can set (a network or FUSE file system reports
//! whatever its server says, so stamps are trusted only on the local
//! kinds [`FileStamp::settled_of`] names). But the kernel stamps a change
//! with a clock that advances once a tick, so a file changed in the tick a
//! stamp was taken in can change again without its stamp moving (git
//! calls such an entry "racily clean"). A stamp taken [`SETTLED_AFTER`] or
//! longer after the file's last change, on a file system that keeps
//! sub-second times, has no such tick: any later change is stamped later.
//! A change made through a shared writable mapping is the exception: the
//! kernel stamps it at a write fault, once per writeback (tmpfs never), so
//! a stamp names a file and never stands for bytes to compile: at most it
//! picks, by digest, code compiled already from bytes that were hashed.

use std::os::fd::AsFd;
use std::time::{Duration, SystemTime};

use rustix::fs::Timespec;

/// How long after its last change a file's times alone vouch for it. A
/// tick is at most 10 ms; some file systems stamp coarser, hence the
/// margin.
pub const SETTLED_AFTER: Duration = Duration::from_secs(1);

/// Whether a change time seen at `seen` is settled: `after` or more
/// before it by the clock, and not on a whole second (taken to mean a file
/// system without sub-second times).
pub(crate) fn settled(changed: Timespec, seen: SystemTime, after: Duration) -> bool {
    let (Ok(secs), Ok(nanos)) = (
        u64::try_from(changed.tv_sec),
        u32::try_from(changed.tv_nsec),
    ) else {
        return false;
    };
    let changed_at = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    nanos != 0
        && seen
            .duration_since(changed_at)
            .is_ok_and(|age| age >= after)
}

/// A file's identity, size and times: a later stamp equal to a settled one
/// means the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileStamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, u64),
    changed: (i64, u64),
}

impl FileStamp {
    /// The stamp of an open file, settled or not.
    pub(crate) fn of(file: &impl AsFd) -> std::io::Result<FileStamp> {
        let st = rustix::fs::fstat(file)?;
        Ok(FileStamp {
            device: st.st_dev,
            inode: st.st_ino,
            size: st.st_size as u64,
            modified: (st.st_mtime as i64, st.st_mtime_nsec as u64),
            changed: (st.st_ctime as i64, st.st_ctime_nsec as u64),
        })
    }

    /// The stamp as one line of text, for the digest memo.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.device,
            self.inode,
            self.size,
            self.modified.0,
            self.modified.1,
            self.changed.0,
            self.changed.1
        )
    }

    /// The stamp [`FileStamp::encode`] wrote.
    pub(crate) fn decode(text: &str) -> Option<FileStamp> {
        let parts: Vec<&str> = text.split(' ').collect();
        let [device, inode, size, m_secs, m_nanos, c_secs, c_nanos] = parts[..] else {
            return None;
        };
        Some(FileStamp {
            device: device.parse().ok()?,
            inode: inode.parse().ok()?,
            size: size.parse().ok()?,
            modified: (m_secs.parse().ok()?, m_nanos.parse().ok()?),
            changed: (c_secs.parse().ok()?, c_nanos.parse().ok()?),
        })
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The stamp of an open file if it is settled now (see [`settled`]) on
    /// a local file system.
    pub fn settled_of(file: &impl AsFd) -> Option<FileStamp> {
        if !on_local_file_system(file) {
            return None;
        }
        let stamp = FileStamp::of(file).ok()?;
        let changed = Timespec {
            tv_sec: stamp.changed.0,
            tv_nsec: stamp.changed.1 as _,
        };
        settled(changed, SystemTime::now(), SETTLED_AFTER).then_some(stamp)
    }
}

/// Whether the file is on a kind of file system the kernel keeps itself,
/// whose change times no process or server can set.
fn on_local_file_system(file: &impl AsFd) -> bool {
    const LOCAL: &[u32] = &[
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0xCA45_1A4E, // bcachefs
    ];
    // `f_type`'s width and sign differ between architectures; the magic
    // numbers are 32 bits.
    rustix::fs::fstatfs(file).is_ok_and(|fs| LOCAL.contains(&(fs.f_type as u32)))
}

/// Waits up to `within` for an open file's stamp to settle; `None` on a
/// file system whose stamps never do (whole-second times, or not local).
/// For tests, which need a settled file without sleeping a fixed second.
#[doc(hidden)]
pub fn wait_until_settled(file: &impl AsFd, within: Duration) -> Option<FileStamp> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(stamp) = FileStamp::settled_of(file) {
            return Some(stamp);
        }
        let stamp = FileStamp::of(file).ok()?;
        let whole_second = stamp.changed.1 == 0;
        if whole_second || !on_local_file_system(file) || std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sub_second_change_time_old_enough_is_settled() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |secs: i64, nanos: i64| Timespec {
            tv_sec: secs,
            tv_nsec: nanos as _,
        };
        assert!(settled(at(999_998, 5), now, SETTLED_AFTER));
        assert!(!settled(at(999_999, 500_000_000), now, SETTLED_AFTER));
        assert!(!settled(at(999_990, 0), now, SETTLED_AFTER), "whole second");
        assert!(
            !settled(at(1_000_001, 5), now, SETTLED_AFTER),
            "in the future"
        );
        assert!(!settled(at(-1, 5), now, SETTLED_AFTER));
    }

    #[test]
    fn a_stamp_reads_back_whatever_its_numbers() {
        let stamp = FileStamp {
            device: u64::MAX,
            inode: 1 << 63,
            size: 7,
            modified: (-5, 999_999_999),
            changed: (i64::MAX, 1),
        };
        assert_eq!(FileStamp::decode(&stamp.encode()), Some(stamp));
        assert_eq!(FileStamp::decode("1 2 3 4 5 6"), None);
        assert_eq!(FileStamp::decode("1 2 3 4 5 6 7 8"), None);
    }

    #[test]
    fn a_write_moves_a_settled_stamp_even_with_the_old_times_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let written = std::time::Instant::now();
        std::fs::write(&path, b"one").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let young = FileStamp::settled_of(&file);
        if written.elapsed() < SETTLED_AFTER {
            assert_eq!(young, None, "just written");
        }
        let Some(settled) = wait_until_settled(&file, Duration::from_secs(10)) else {
            return; // a file system whose stamps never settle
        };
        // The same size and inode, and the old modification time set back
        // by hand: the change time still moves, and no one can set it.
        let st = rustix::fs::fstat(&file).unwrap();
        std::fs::write(&path, b"two").unwrap();
        let old = |secs: i64, nanos: u64| Timespec {
            tv_sec: secs,
            tv_nsec: nanos as _,
        };
        let times = rustix::fs::Timestamps {
            last_access: old(st.st_atime as i64, st.st_atime_nsec as u64),
            last_modification: old(st.st_mtime as i64, st.st_mtime_nsec as u64),
        };
        rustix::fs::futimens(
            std::fs::File::options().write(true).open(&path).unwrap(),
            &times,
        )
        .unwrap();
        let after = FileStamp::of(&file).unwrap();
        assert_eq!(
            (after.inode, after.size, after.modified),
            (settled.inode, settled.size, settled.modified)
        );
        assert_ne!(after, settled);
    }
}
