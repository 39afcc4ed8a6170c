//! SHA-256 digests, written one way everywhere: lowercase hex (sha2's own
//! `LowerHex`), and `sha256:<hex>` where a digest names its algorithm, as
//! OCI descriptors, the lock file, skill files and components do.

use std::path::Path;

use sha2::{Digest, Sha256};

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
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(finish(hasher))
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
}
