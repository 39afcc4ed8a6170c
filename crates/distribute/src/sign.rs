//! Signatures: minisign key pairs.
//!
//! minisign because the ecosystem can check it without any service: the
//! files `skillbox key new` writes are the files Debian's `minisign -G`
//! writes, a signature `publish --key` makes is one `minisign -V` checks,
//! and a key `minisign -G -W` made signs here. What is signed is the
//! artifact's OCI manifest, byte for byte; the manifest names every file's
//! digest, so one signature covers the whole skill.
//!
//! Trust is a set of public keys: `~/.config/skillbox/trusted-keys/*.pub`
//! plus `--trust-key FILE`. A lock pins a signer by scheme and key id
//! ([`Signer`]); keyless signing would be another scheme whose identity is
//! an issuer and a subject, checked and pinned the same way.

use std::path::{Path, PathBuf};

use minisign::{PublicKey, PublicKeyBox, SecretKey, SecretKeyBox, SignatureBox};

pub use crate::skill::lock::Signer;

/// The environment variable that holds an encrypted key's password.
pub const PASSWORD_VAR: &str = "SKILLBOX_KEY_PASSWORD";
/// The largest key or signature file read.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("{path}: {why}")]
    KeyFile { path: String, why: String },
    #[error("the signature is not a minisign signature: {0}")]
    Malformed(String),
    #[error(
        "the artifact is signed by key {key_id}, which is not trusted here; if you trust its publisher, pass --trust-key FILE with their public key, or copy it into the trusted-keys folder"
    )]
    UntrustedKey { key_id: String },
    #[error(
        "the signature by key {key_id} does not match the artifact: it was changed after signing, or signed for something else; nothing was installed"
    )]
    BadSignature { key_id: String },
}

/// `~/.config/skillbox/trusted-keys` (or under `$SKILLBOX_CONFIG_DIR`,
/// `$XDG_CONFIG_HOME`): every `*.pub` in it is trusted.
pub fn trusted_keys_dir() -> Option<PathBuf> {
    crate::dirs::config_dir().map(|d| d.join("trusted-keys"))
}

/// A key that signs.
pub struct SigningKey {
    secret: SecretKey,
    public: PublicKey,
}

/// Writes `NAME.key` (mode 0600) and `NAME.pub` in `dir`, refusing to
/// overwrite either.
pub fn new_key_pair(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf, Signer), SignError> {
    let key_path = dir.join(format!("{name}.key"));
    let pub_path = dir.join(format!("{name}.pub"));
    let fail = |path: &Path, why: String| SignError::KeyFile {
        path: path.display().to_string(),
        why,
    };
    for path in [&key_path, &pub_path] {
        if path.exists() {
            return Err(fail(
                path,
                "already exists; choose another name or move it away".into(),
            ));
        }
    }
    let pair = minisign::KeyPair::generate_unencrypted_keypair()
        .map_err(|e| fail(&key_path, e.to_string()))?;
    let comment = format!("skillbox signing key {name}");
    let secret_text = pair
        .sk
        .to_box(Some(&comment))
        .map_err(|e| fail(&key_path, e.to_string()))?
        .into_string();
    let public_text = pair
        .pk
        .to_box()
        .map_err(|e| fail(&pub_path, e.to_string()))?
        .into_string();
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .map_err(|e| fail(&key_path, e.to_string()))?;
    file.write_all(secret_text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| fail(&key_path, e.to_string()))?;
    std::fs::write(&pub_path, public_text).map_err(|e| fail(&pub_path, e.to_string()))?;
    Ok((key_path, pub_path, signer_of(&pair.pk)))
}

impl SigningKey {
    /// Reads a minisign secret key; an encrypted one needs its password in
    /// `$SKILLBOX_KEY_PASSWORD`.
    pub fn read(path: &Path) -> Result<SigningKey, SignError> {
        let fail = |why: String| SignError::KeyFile {
            path: path.display().to_string(),
            why,
        };
        let text = read_small(path).map_err(&fail)?;
        let secret = match unencrypted(&text) {
            Some(key) => key,
            None => {
                let boxed = SecretKeyBox::from_string(&text)
                    .map_err(|e| fail(format!("not a minisign secret key ({e})")))?;
                let password = std::env::var(PASSWORD_VAR).map_err(|_| {
                    fail(format!("the key is encrypted (or not a minisign secret key); put its password in ${PASSWORD_VAR}"))
                })?;
                boxed
                    .into_secret_key(Some(password))
                    .map_err(|e| fail(format!("the key cannot be decrypted ({e})")))?
            }
        };
        let public = PublicKey::from_secret_key(&secret)
            .map_err(|e| fail(format!("the key is damaged ({e})")))?;
        Ok(SigningKey { secret, public })
    }

    pub fn signer(&self) -> Signer {
        signer_of(&self.public)
    }

    /// A minisign signature of `bytes`, as the text of a `.minisig` file.
    pub fn sign(&self, bytes: &[u8], trusted_comment: &str) -> Result<String, SignError> {
        minisign::sign(
            Some(&self.public),
            &self.secret,
            std::io::Cursor::new(bytes),
            Some(trusted_comment),
            Some("signature from skillbox publish"),
        )
        .map(|sig| sig.into_string())
        .map_err(|e| SignError::Malformed(e.to_string()))
    }
}

/// An unencrypted secret key, read without its checksum: `minisign -G -W`
/// leaves the checksum of an unencrypted key empty. Signing checks each
/// signature against the key's own public half, so a damaged key cannot
/// sign.
fn unencrypted(text: &str) -> Option<SecretKey> {
    use base64::Engine as _;
    let line = text.lines().nth(1)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line.trim())
        .ok()?;
    let key = SecretKey::from_bytes(&bytes).ok()?;
    (!key.is_encrypted()).then_some(key)
}

/// The public keys a command trusts.
#[derive(Default)]
pub struct TrustedKeys {
    keys: Vec<(PublicKey, Signer)>,
}

impl TrustedKeys {
    /// Every `*.pub` in `dir` (when it exists), then each of `extra`.
    pub fn load(dir: Option<&Path>, extra: &[PathBuf]) -> Result<TrustedKeys, SignError> {
        let mut files: Vec<PathBuf> = dir
            .and_then(|d| std::fs::read_dir(d).ok())
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pub"))
            .collect();
        files.sort();
        files.extend(extra.iter().cloned());
        let mut trusted = TrustedKeys::default();
        for path in files {
            let key = read_public_key(&path)?;
            let signer = signer_of(&key);
            trusted.add(key, signer)?;
        }
        Ok(trusted)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Trusts the key a lock pinned, too (for `sync` and `update`).
    pub fn with_pinned(mut self, signer: &Signer) -> Result<TrustedKeys, SignError> {
        let key = crate::skill::lock::pinned_key(signer).map_err(|why| SignError::KeyFile {
            path: crate::skill::lock::LOCK_FILE.into(),
            why,
        })?;
        self.add(key, signer.clone())?;
        Ok(self)
    }

    /// Adds a key, refusing a second key with the same id: a signature
    /// names its key only by id, so two such keys could stand in for each
    /// other.
    fn add(&mut self, key: PublicKey, signer: Signer) -> Result<(), SignError> {
        match self.keys.iter().find(|(_, s)| s.key_id == signer.key_id) {
            Some((_, known)) if known.fingerprint == signer.fingerprint => Ok(()),
            Some((_, known)) => Err(SignError::KeyFile {
                path: format!("key {}", signer.key_id),
                why: format!(
                    "two different trusted keys share this key id ({} and {}); remove the one you do not trust",
                    known.fingerprint, signer.fingerprint
                ),
            }),
            None => {
                self.keys.push((key, signer));
                Ok(())
            }
        }
    }

    /// Who signed `bytes`, if `signature` is a valid signature of them by
    /// a trusted key.
    pub fn verify(&self, bytes: &[u8], signature: &str) -> Result<Signer, SignError> {
        let sig = SignatureBox::from_string(signature)
            .map_err(|e| SignError::Malformed(e.to_string()))?;
        let key_id = key_id_of(sig.keynum());
        let Some((key, signer)) = self.keys.iter().find(|(_, s)| s.key_id == key_id) else {
            return Err(SignError::UntrustedKey { key_id });
        };
        minisign::verify(key, &sig, std::io::Cursor::new(bytes), true, false, false).map_err(
            |_| SignError::BadSignature {
                key_id: key_id.clone(),
            },
        )?;
        Ok(signer.clone())
    }
}

/// Reads a minisign public key file (`minisign -G` and `key new` write the
/// same format).
pub fn read_public_key(path: &Path) -> Result<PublicKey, SignError> {
    let fail = |why: String| SignError::KeyFile {
        path: path.display().to_string(),
        why,
    };
    let text = read_small(path).map_err(&fail)?;
    PublicKeyBox::from_string(&text)
        .and_then(PublicKeyBox::into_public_key)
        .map_err(|e| fail(format!("not a minisign public key ({e})")))
}

fn read_small(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    Ok(text)
}

fn signer_of(key: &PublicKey) -> Signer {
    Signer {
        scheme: "minisign".into(),
        key_id: key_id_of(key.keynum()),
        fingerprint: crate::skill::model::digest(&key.to_bytes()),
        public_key: key.to_base64(),
    }
}

/// The key id as `minisign` prints it: the little-endian key number in
/// upper-case hex.
fn key_id_of(keynum: &[u8]) -> String {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&keynum[..8]);
    format!("{:016X}", u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_signs_what_its_public_half_verifies_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (key, public, signer) = new_key_pair(dir.path(), "alice").unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(
            new_key_pair(dir.path(), "alice").is_err(),
            "never overwrites"
        );
        let signing = SigningKey::read(&key).unwrap();
        assert_eq!(signing.signer(), signer);
        let signature = signing.sign(b"manifest", "skillbox test").unwrap();
        let trusted = TrustedKeys::load(None, &[public]).unwrap();
        assert_eq!(trusted.verify(b"manifest", &signature).unwrap(), signer);
        assert!(matches!(
            trusted.verify(b"manifest!", &signature),
            Err(SignError::BadSignature { .. })
        ));
        let (_, other, _) = new_key_pair(dir.path(), "mallory").unwrap();
        let others = TrustedKeys::load(None, &[other]).unwrap();
        assert!(matches!(
            others.verify(b"manifest", &signature),
            Err(SignError::UntrustedKey { .. })
        ));
    }
}
