//! The on-disk cache of compiled components: authenticated, private to
//! the user, named stably, and kept under a size cap.

mod memo;

pub use memo::DigestMemo;

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

/// The on-disk cache of compiled components, keyed by content and engine.
///
/// Compiled code is native code that the host maps and runs, so nothing in
/// this folder is trusted by location alone. Before a file is deserialized:
/// - the folder and the file are owned by the user running this process and
///   writable by nobody else, and the file is a regular file reached without
///   following a symlink;
/// - the file carries a keyed BLAKE3 MAC, under a key kept in the folder (mode
///   0600), over the component digest it claims, the engine's compatibility
///   hash and the compiled bytes. A file copied over another's name, or
///   written by hand without the key, fails the check.
///
/// Anything that fails is discarded and recompiled, with a warning. Write
/// grants never cover this folder (see `skill::policy`), so a guest cannot
/// reach the key or the files.
///
/// Files are named by the component's SHA-256 and a BLAKE3 hash of the
/// engine's compatibility hash, so a name means the same thing under every
/// Rust release. The folder is kept under a size cap: after a store, the
/// files used least recently (a load touches its file's modification time)
/// are removed until the folder fits, and files unused for longer than
/// [`UNUSED_FOR`] go whatever the size.
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// The default size cap of the compiled-code cache: room for a few dozen
/// large components (a componentize-py tool compiles to about 60 MB).
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 2 << 30;

/// A compiled file no process loaded for this long is removed at the next
/// store, whatever the cache's size.
pub(crate) const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// A store's temporary file (`.tmp…`) untouched for this long belongs to a
/// process killed while it wrote (an optimizing compile's store, for one)
/// and is removed at the next store; a store in flight is younger.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);
const TEMPORARY_PREFIX: &str = ".tmp";

/// File header: a magic tag, then the 32-byte MAC, then the compiled code.
/// Versions 02 and 03 MAC with keyed BLAKE3 (01 used HMAC-SHA256, which
/// took a quarter of a large component's start: 27 ms for 43 MB of code);
/// 03 hashes the engine with BLAKE3 instead of the standard library's
/// hasher, whose output may change between Rust releases.
const MAGIC: &[u8; 8] = b"SKBXCW03";
/// The file name's suffix; the format version is in it, so hosts that
/// write different formats share a folder without reading each other's
/// files.
const SUFFIX: &str = "-v3.cwasm";
const MAC_LEN: usize = 32;
const KEY_FILE: &str = ".key";
/// Compiled code larger than this is not read back.
const MAX_CACHED_BYTES: u64 = 1 << 30;

impl DiskCache {
    pub fn new(dir: PathBuf) -> Self {
        DiskCache {
            dir,
            max_bytes: DEFAULT_CACHE_MAX_BYTES,
        }
    }

    /// The same cache with another size cap (in bytes).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// `$SKILLBOX_CACHE_DIR`, else the user's cache folder.
    pub fn default_location() -> Option<Self> {
        let dir = crate::dirs::cache_dir()?;
        Some(DiskCache::new(dir.join("components")))
    }

    /// The cache folder, for the checks that keep write grants off it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file_name(engine: &Engine, digest_hex: &str) -> (String, u64) {
        let mut hasher = StableHasher(blake3::Hasher::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = hasher.finish();
        (
            format!("{digest_hex}-{engine_hash:016x}{SUFFIX}"),
            engine_hash,
        )
    }

    /// Keyed BLAKE3 over the component's digest, the engine's hash and the
    /// code. The key file's bytes are stretched to the 32-byte key BLAKE3
    /// takes; comparing two `blake3::Hash`es is constant-time.
    fn mac(key: &[u8], digest_hex: &str, engine_hash: u64, code: &[u8]) -> blake3::Hash {
        let key = blake3::derive_key("skillbox compiled-code cache MAC v3", key);
        let mut mac = blake3::Hasher::new_keyed(&key);
        mac.update(digest_hex.as_bytes());
        mac.update(&engine_hash.to_le_bytes());
        mac.update(code);
        mac.finalize()
    }

    pub(super) fn load(&self, engine: &Engine, digest_hex: &str) -> Option<Component> {
        let (name, engine_hash) = Self::file_name(engine, digest_hex);
        let path = self.dir.join(&name);
        if std::fs::symlink_metadata(&path).is_err() {
            return None;
        }
        let checked = (|| {
            private_folder(&self.dir)?;
            let key = self.key(false)?;
            let bytes = read_private_file(&path, MAX_CACHED_BYTES)?;
            let (tag, code) = split_tagged(&bytes, MAGIC)?;
            if Self::mac(&key, digest_hex, engine_hash, code) != tag {
                return Err("its MAC does not match the component it is named for");
            }
            Ok(bytes)
        })();
        if checked.is_ok() {
            touch(&path);
        }
        let bytes = match checked {
            Ok(bytes) => bytes,
            Err(why) => {
                tracing::warn!(
                    "compiled-code cache: discarding `{name}`: {why}; the component is compiled again"
                );
                let _ = std::fs::remove_file(&path);
                return None;
            }
        };
        let code = &bytes[MAGIC.len() + MAC_LEN..];
        // SAFETY: `Component::deserialize` runs the bytes as native code, so
        // they must be what this process's engine produced for this very
        // component. They are: the folder and the file are owned by this
        // user and writable by no one else, the file was opened without
        // following symlinks and is a regular file, and its HMAC (keyed by a
        // secret only this user can read) covers the component's sha256, the
        // engine's compatibility hash and every byte deserialized here.
        #[allow(unsafe_code)]
        let deserialized = unsafe { Component::deserialize(engine, code) };
        match deserialized {
            Ok(component) => Some(component),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    pub(super) fn store(&self, engine: &Engine, digest_hex: &str, component: &Component) {
        // The cache is an optimisation: failing to write it is not an error.
        let Ok(code) = component.serialize() else {
            return;
        };
        if create_private_folder(&self.dir).is_err() || private_folder(&self.dir).is_err() {
            tracing::warn!(
                "compiled-code cache: the folder is not private to this user; not caching"
            );
            return;
        }
        let Ok(key) = self.key(true) else { return };
        let (name, engine_hash) = Self::file_name(engine, digest_hex);
        let tag = Self::mac(&key, digest_hex, engine_hash, &code);
        let Ok(mut tmp) = self.temporary_file() else {
            return;
        };
        let written = std::io::Write::write_all(&mut tmp, MAGIC)
            .and_then(|()| std::io::Write::write_all(&mut tmp, tag.as_bytes()))
            .and_then(|()| std::io::Write::write_all(&mut tmp, &code));
        if written.is_ok() && tmp.persist(self.dir.join(&name)).is_ok() {
            self.evict(&name);
        }
    }

    /// Removes compiled files unused for [`UNUSED_FOR`], then the least
    /// recently used ones until the folder holds at most its cap; never
    /// `keep` (the file just stored). Only files this host names are
    /// touched: `*.cwasm`, and its own abandoned temporary files.
    fn evict(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let temporary = name.starts_with(TEMPORARY_PREFIX);
            if !(name.ends_with(".cwasm") || temporary) || name == keep {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let used = meta.modified().unwrap_or(now);
            if temporary {
                if now.duration_since(used).unwrap_or_default() > ABANDONED_AFTER {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            if now.duration_since(used).unwrap_or_default() > UNUSED_FOR {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            files.push((used, meta.len(), entry.path()));
        }
        let kept = std::fs::metadata(self.dir.join(keep)).map_or(0, |m| m.len());
        let mut total: u64 = kept + files.iter().map(|(_, len, _)| len).sum::<u64>();
        files.sort();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }

    /// A file to write and then rename into place, named so that
    /// [`DiskCache::evict`] recognizes it if its writer is killed.
    fn temporary_file(&self) -> std::io::Result<tempfile::NamedTempFile> {
        tempfile::Builder::new()
            .prefix(TEMPORARY_PREFIX)
            .tempfile_in(&self.dir)
    }

    /// The MAC key, created on first use when `create` is set.
    fn key(&self, create: bool) -> Result<Vec<u8>, &'static str> {
        let path = self.dir.join(KEY_FILE);
        if create && std::fs::symlink_metadata(&path).is_err() {
            let mut key = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut r| std::io::Read::read_exact(&mut r, &mut key))
                .map_err(|_| "no random source for the cache key")?;
            let mut tmp = self.temporary_file().map_err(|_| "cannot write the key")?;
            std::io::Write::write_all(&mut tmp, &key).map_err(|_| "cannot write the key")?;
            // Another process may have created it meanwhile; keep theirs.
            let _ = tmp.persist_noclobber(&path);
        }
        let key = read_private_file(&path, 1024)?;
        if key.len() < 16 {
            return Err("the cache key is too short");
        }
        Ok(key)
    }
}

/// A private file's header, `magic` then a 32-byte MAC, split from what
/// the MAC covers.
fn split_tagged<'a>(
    bytes: &'a [u8],
    magic: &[u8],
) -> Result<(blake3::Hash, &'a [u8]), &'static str> {
    let rest = bytes.strip_prefix(magic).ok_or("it has no header")?;
    if rest.len() < MAC_LEN {
        return Err("it is truncated");
    }
    let (tag, body) = rest.split_at(MAC_LEN);
    let tag: [u8; MAC_LEN] = tag.try_into().map_err(|_| "it is truncated")?;
    Ok((blake3::Hash::from_bytes(tag), body))
}

fn create_private_folder(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The folder is a real folder owned by this user and writable only by it.
fn private_folder(dir: &Path) -> Result<(), &'static str> {
    let meta = std::fs::symlink_metadata(dir).map_err(|_| "the cache folder cannot be read")?;
    if !meta.is_dir() {
        return Err("the cache folder is not a folder (a symlink?)");
    }
    owned_and_private(&meta)
}

fn owned_and_private(meta: &std::fs::Metadata) -> Result<(), &'static str> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err("it is owned by another user");
    }
    if meta.mode() & 0o022 != 0 {
        return Err("it is writable by group or others");
    }
    Ok(())
}

/// Reads a regular, private file without following a symlink or blocking
/// on a FIFO; checks are made on the opened handle, not the path.
fn read_private_file(path: &Path, limit: u64) -> Result<Vec<u8>, &'static str> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(path)
        .map_err(|_| "it cannot be opened (a symlink, or unreadable)")?;
    let meta = file.metadata().map_err(|_| "it cannot be read")?;
    if !meta.is_file() {
        return Err("it is not a regular file");
    }
    owned_and_private(&meta)?;
    if meta.len() > limit {
        return Err("it is too large");
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| "it cannot be read")?;
    Ok(bytes)
}

/// A `Hasher` that feeds BLAKE3, so a value's hash (here the engine's
/// compatibility hash) is the same under every Rust release, unlike the
/// standard library's `DefaultHasher`.
struct StableHasher(blake3::Hasher);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let hash = self.0.finalize();
        u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("32 bytes"))
    }
}

/// Marks a cache file as used now, for the least-recently-used eviction.
/// A cache on a read-only file system simply keeps its old times.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fake compiled file of `len` bytes, last used `age` ago.
    fn file(dir: &Path, name: &str, len: usize, age: Duration) {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn eviction_keeps_the_cache_under_its_cap_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let hour = Duration::from_secs(3600);
        file(dir.path(), "old-v3.cwasm", 400, 3 * hour);
        file(dir.path(), "recent-v3.cwasm", 400, hour);
        file(dir.path(), "new-v3.cwasm", 400, Duration::ZERO);
        file(dir.path(), "forgotten-v2.cwasm", 10, UNUSED_FOR + hour);
        file(dir.path(), ".key", 32, 3 * hour);
        // A killed process's store, and one in flight.
        file(dir.path(), ".tmpAbandoned", 4000, 2 * hour);
        file(dir.path(), ".tmpWriting", 4000, Duration::ZERO);
        let cache = DiskCache::new(dir.path().to_path_buf()).with_max_bytes(1000);

        cache.evict("new-v3.cwasm");
        // 1200 bytes of code under a 1000-byte cap: the least recently used
        // goes, the one unused for a month goes whatever the size, the
        // abandoned temporary file goes, and neither the key nor a store in
        // flight is touched.
        assert_eq!(
            names(dir.path()),
            [".key", ".tmpWriting", "new-v3.cwasm", "recent-v3.cwasm"]
        );

        // The file just stored stays even when it alone is over the cap.
        let tiny = cache.with_max_bytes(100);
        tiny.evict("new-v3.cwasm");
        assert_eq!(names(dir.path()), [".key", ".tmpWriting", "new-v3.cwasm"]);
    }

    #[test]
    fn the_engine_part_of_a_name_does_not_depend_on_the_standard_library_hasher() {
        // A fixed input gives this fixed hash under every Rust release: the
        // first eight bytes of BLAKE3 over what `Hash` writes, not SipHash
        // with whatever keys a release picks.
        let mut hasher = StableHasher(blake3::Hasher::new());
        48u64.hash(&mut hasher);
        let expected = blake3::hash(&48u64.to_ne_bytes());
        assert_eq!(
            hasher.finish(),
            u64::from_le_bytes(expected.as_bytes()[..8].try_into().unwrap())
        );
        assert_eq!(format!("{:016x}", hasher.finish()), GOLDEN);
    }

    /// The engine part of a name for the input above, fixed once.
    const GOLDEN: &str = "cdf4482ad6dfcc00";
}
