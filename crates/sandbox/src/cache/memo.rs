//! Digests the host computed, remembered across processes by each file's
//! settled stamp (see [`crate::stamp`]), so a start does not read and
//! hash again the components and locked files it hashed before: that
//! SHA-256 was the largest part of a start's CPU.
//!
//! The memo lives beside the compiled code and is trusted as it is: the
//! folder and file are private to the user, and a keyed BLAKE3 MAC under
//! the cache's key covers every entry. A memo that fails a check is
//! ignored (and replaced at the next save); a lost write only costs a
//! hash. An entry says "a file with this stamp has this digest": a
//! settled stamp moves with every write, but not with a change made
//! through a shared mapping, so an entry names a file for the catalog and
//! the lock check, and code read to be compiled is hashed again
//! ([`crate::digest::of_open_file`]). An entry may also pick, by digest,
//! code compiled already from bytes that were hashed, for a component
//! whose file still has the stamp (`Sandbox::prepare_cached`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::{DiskCache, private_folder, read_private_file, split_tagged};
use crate::stamp::FileStamp;

const FILE: &str = "digests-v1.memo";
const MAGIC: &[u8; 8] = b"SKBXDM01";
/// Past this many entries (a line is about 135 bytes, and every start
/// reads them all), a save keeps only those this process used.
const CROWDED_AT: usize = 4096;
const MAX_FILE_BYTES: u64 = 4 << 20;

/// Remembered digests, read once when the sandbox is made and saved after
/// a catalog is built.
pub struct DigestMemo {
    cache: DiskCache,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    known: HashMap<FileStamp, String>,
    used: HashSet<FileStamp>,
    changed: bool,
}

impl std::fmt::Debug for DigestMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestMemo")
    }
}

impl DigestMemo {
    /// The memo kept in `cache`: empty if there is none yet, or if the
    /// one there fails a check.
    pub fn open(cache: &DiskCache) -> DigestMemo {
        // A memo that fails a check is written again at the next save,
        // so its warning is not repeated at every start.
        let (known, damaged) = match read(cache) {
            Ok(known) => (known, false),
            Err(why) => {
                tracing::warn!("digest memo: ignoring it: {why}; files are hashed again");
                (HashMap::new(), true)
            }
        };
        DigestMemo {
            cache: cache.clone(),
            state: Mutex::new(State {
                known,
                changed: damaged,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The digest (`sha256:…`) remembered for a file with this settled
    /// stamp.
    pub fn digest_of(&self, stamp: &FileStamp) -> Option<String> {
        let mut state = self.lock();
        let digest = state.known.get(stamp).cloned()?;
        state.used.insert(*stamp);
        Some(digest)
    }

    /// Remembers that the file with this settled stamp has this digest.
    pub fn remember(&self, stamp: FileStamp, digest: &str) {
        let mut state = self.lock();
        state.used.insert(stamp);
        if state.known.get(&stamp).map(String::as_str) != Some(digest) {
            state.known.insert(stamp, digest.to_string());
            state.changed = true;
        }
    }

    /// Forgets what is remembered for this stamp: code read from the file
    /// did not match it (a change a stamp cannot see), and the next load
    /// must hash the file again.
    pub fn forget(&self, stamp: &FileStamp) {
        let mut state = self.lock();
        if state.known.remove(stamp).is_some() {
            state.changed = true;
        }
    }

    /// Writes the memo if anything new was remembered or forgotten.
    /// Failing to is not an error: the next start hashes again.
    pub fn save(&self) {
        let body = {
            let mut state = self.lock();
            if !state.changed {
                return;
            }
            state.changed = false;
            let State { known, used, .. } = &*state;
            let crowded = known.len() > CROWDED_AT;
            let mut body = String::new();
            let room = MAX_FILE_BYTES as usize - MAGIC.len() - blake3::OUT_LEN;
            for (stamp, digest) in known {
                if crowded && !used.contains(stamp) {
                    continue;
                }
                let line = format!("{} {digest}\n", stamp.encode());
                if body.len() + line.len() > room {
                    break;
                }
                body.push_str(&line);
            }
            body
        };
        if let Err(why) = write(&self.cache, body.as_bytes()) {
            tracing::debug!("digest memo: not saved: {why}");
        }
    }
}

fn mac(key: &[u8], body: &[u8]) -> blake3::Hash {
    let key = blake3::derive_key("skillbox digest memo MAC v1", key);
    blake3::keyed_hash(&key, body)
}

fn read(cache: &DiskCache) -> Result<HashMap<FileStamp, String>, &'static str> {
    let path = cache.dir().join(FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(HashMap::new());
    }
    private_folder(cache.dir())?;
    let key = cache.key(false)?;
    let bytes = read_private_file(&path, MAX_FILE_BYTES)?;
    let (tag, body) = split_tagged(&bytes, MAGIC)?;
    if mac(&key, body) != tag {
        return Err("its MAC does not match");
    }
    let body = std::str::from_utf8(body).map_err(|_| "it is not text")?;
    let mut known = HashMap::new();
    // A line this release cannot read is left out, not the memo.
    for line in body.lines() {
        if let Some((stamp, digest)) = line.rsplit_once(' ')
            && let Some(stamp) = FileStamp::decode(stamp)
        {
            known.insert(stamp, digest.to_string());
        }
    }
    Ok(known)
}

fn write(cache: &DiskCache, body: &[u8]) -> Result<(), &'static str> {
    super::create_private_folder(cache.dir()).map_err(|_| "cannot make the cache folder")?;
    private_folder(cache.dir())?;
    let key = cache.key(true)?;
    let tag = mac(&key, body);
    let mut tmp = cache
        .temporary_file()
        .map_err(|_| "cannot write in the cache folder")?;
    std::io::Write::write_all(&mut tmp, MAGIC)
        .and_then(|()| std::io::Write::write_all(&mut tmp, tag.as_bytes()))
        .and_then(|()| std::io::Write::write_all(&mut tmp, body))
        .map_err(|_| "cannot write the memo")?;
    tmp.persist(cache.dir().join(FILE))
        .map_err(|_| "cannot put the memo in place")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose stamp has settled, or `None` on a file system where
    /// none does.
    fn settled_file(dir: &std::path::Path, bytes: &[u8]) -> Option<(std::fs::File, FileStamp)> {
        let path = dir.join("f");
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let stamp = crate::stamp::wait_until_settled(&file, std::time::Duration::from_secs(10))?;
        Some((file, stamp))
    }

    #[test]
    fn a_saved_digest_is_found_by_the_next_process_and_a_forged_memo_is_ignored() {
        let root = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(root.path().join("cache"));
        let Some((_file, stamp)) = settled_file(root.path(), b"code") else {
            return;
        };
        let digest = crate::digest::sha256(b"code");

        let memo = DigestMemo::open(&cache);
        assert_eq!(memo.digest_of(&stamp), None);
        memo.remember(stamp, &digest);
        memo.save();
        assert_eq!(
            DigestMemo::open(&cache).digest_of(&stamp),
            Some(digest.clone())
        );

        // An entry edited by hand, without the key, is not believed.
        let path = cache.dir().join(FILE);
        let mut forged = std::fs::read(&path).unwrap();
        let at = forged
            .windows(digest.len())
            .position(|w| w == digest.as_bytes())
            .unwrap();
        let other = crate::digest::sha256(b"other");
        forged[at..at + other.len()].copy_from_slice(other.as_bytes());
        std::fs::write(&path, forged).unwrap();
        assert_eq!(DigestMemo::open(&cache).digest_of(&stamp), None);
    }

    #[test]
    fn a_crowded_memo_keeps_what_the_last_process_used() {
        let root = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(root.path().join("cache"));
        let stamp = |n: usize| FileStamp::decode(&format!("1 {n} 10 5 5 5 5")).unwrap();
        let memo = DigestMemo::open(&cache);
        for n in 0..=CROWDED_AT {
            memo.remember(stamp(n), "sha256:00");
        }
        memo.save();
        let memo = DigestMemo::open(&cache);
        assert_eq!(memo.lock().known.len(), CROWDED_AT + 1, "all were used");
        assert!(memo.digest_of(&stamp(7)).is_some());
        memo.remember(stamp(CROWDED_AT + 1), "sha256:01");
        memo.save();
        let kept = DigestMemo::open(&cache);
        let mut kept: Vec<_> = kept.lock().known.keys().copied().collect();
        kept.sort_by_key(FileStamp::encode);
        assert_eq!(kept, [stamp(CROWDED_AT + 1), stamp(7)]);
    }
}
