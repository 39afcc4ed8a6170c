//! SHA-256 digests, written one way everywhere: lowercase hex (sha2's own
//! `LowerHex`), and `sha256:<hex>` where a digest names its algorithm, as
//! OCI descriptors, the lock file, skill files and components do.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::DigestMemo;
use crate::stamp::FileStamp;

/// The algorithm prefix of a named digest.
pub const PREFIX: &str = "sha256:";

/// SHA-256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// SHA-256 of `bytes` as `sha256:<hex>`.
pub fn sha256(bytes: &[u8]) -> String {
    finish(Sha256::new_with_prefix(bytes))
}

/// What `hasher` has seen, as `sha256:<hex>`.
pub fn finish(hasher: Sha256) -> String {
    format!("{PREFIX}{:x}", hasher.finalize())
}

/// SHA-256 of a file as `sha256:<hex>`, read in blocks.
pub fn file(path: &Path) -> std::io::Result<String> {
    file_with_memo(path, None)
}

/// [`file`], taken from `memo` when it remembers the file's settled stamp
/// (see [`crate::stamp`]).
pub fn file_with_memo(path: &Path, memo: Option<&DigestMemo>) -> std::io::Result<String> {
    of_open_file(&mut std::fs::File::open(path)?, u64::MAX, memo)
}

/// SHA-256 of an open file of at most `limit` bytes. A settled stamp
/// `memo` remembers gives the digest without a read; otherwise the file
/// is read and hashed, and the digest remembered only if the file's stamp
/// was settled before the read and is the same after it, so a write
/// during the read leaves nothing behind.
///
/// A stamp does not see a change made through a shared mapping a writer
/// keeps (see `docs/security.md`), so code is hashed again from the bytes
/// that are compiled: a remembered digest names a file, and never stands
/// for bytes to compile. It may stand for code compiled already from bytes
/// with that digest, which is what the skill loader runs for a file whose
/// stamp is unchanged.
pub fn of_open_file<F: Read + AsFd>(
    file: &mut F,
    limit: u64,
    memo: Option<&DigestMemo>,
) -> std::io::Result<String> {
    let before = memo.and_then(|_| FileStamp::settled_of(file));
    if let (Some(memo), Some(stamp)) = (memo, &before)
        && stamp.size() <= limit
        && let Some(digest) = memo.digest_of(stamp)
    {
        return Ok(digest);
    }
    let mut hasher = Sha256::new();
    let read = std::io::copy(&mut (&mut *file).take(limit.saturating_add(1)), &mut hasher)?;
    if read > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the file is larger than {limit} bytes"),
        ));
    }
    let digest = finish(hasher);
    if let (Some(memo), Some(before)) = (memo, before)
        && FileStamp::settled_of(file) == Some(before)
    {
        memo.remember(before, &digest);
    }
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_lowercase_hex_with_their_algorithm_named() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(sha256_hex(b""), empty);
        assert_eq!(sha256(b""), format!("sha256:{empty}"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(file(&path).unwrap(), sha256(b"abc"));
    }

    #[test]
    fn a_file_changed_within_the_second_is_hashed_and_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let memo = DigestMemo::open(&crate::DiskCache::new(dir.path().join("cache")));
        let path = dir.path().join("f");
        let written = std::time::Instant::now();
        std::fs::write(&path, b"abc").unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        assert_eq!(
            of_open_file(&mut file, 3, Some(&memo)).unwrap(),
            sha256(b"abc")
        );
        let stamp = FileStamp::of(&file).unwrap();
        // Unless the machine stalled past the settling time meanwhile.
        if written.elapsed() < crate::stamp::SETTLED_AFTER {
            assert_eq!(memo.digest_of(&stamp), None, "remembered an unsettled file");
        }
        let too_large = of_open_file(&mut std::fs::File::open(&path).unwrap(), 2, Some(&memo));
        assert_eq!(
            too_large.unwrap_err().kind(),
            std::io::ErrorKind::FileTooLarge
        );
    }
}
