//! `skillbox.lock`: where each installed skill came from, and exactly which
//! files it was installed with.
//!
//! The lock sits in the source folder it describes (`~/.skillbox/skills`,
//! a project's `.agents/skills`), so a project commits it with its skills,
//! and a change to it reloads a running server like any other change to
//! the source. Every catalog build checks each locked skill's folder
//! against its entry: a skill whose files no longer match is not loaded.
//!
//! The lock is written only by `skillbox add`, `update`, `sync` and
//! `remove`, always whole (a temporary file, synced, then renamed).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::sandbox::DigestMemo;

/// The lock file's name, in the source folder it describes.
pub const LOCK_FILE: &str = "skillbox.lock";
/// The journal of an install in progress, in the same folder (see
/// `distribute::install`); the skill it names is not loaded until the next
/// `skillbox` command that changes the source finishes or undoes it.
pub const JOURNAL_FILE: &str = ".skillbox-install.json";
/// The lock format this build writes and reads.
pub const LOCK_VERSION: u32 = 1;
/// The largest lock file read.
const MAX_LOCK_BYTES: u64 = 16 * 1024 * 1024;
/// Files one installed skill may hold (the same cap `add` pulls within).
pub const MAX_LOCKED_FILES: usize = 1000;

/// Every skill installed in one source folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    pub version: u32,
    /// By skill name, which is also the installed folder's name.
    pub skills: BTreeMap<String, LockEntry>,
}

/// One installed skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    /// What the user asked for: `oci://host/repo:tag`, `git+URL#path=…`.
    pub reference: String,
    /// What that resolved to: `oci://host/repo@sha256:…` or
    /// `git+URL@COMMIT#path=…`; `sync` restores from it.
    pub resolved: String,
    /// `sha256:` over the sorted `path digest` lines of `files`.
    pub content_digest: String,
    /// Every file installed, relative, `/`-separated, with `sha256:…`.
    pub files: BTreeMap<String, String>,
    /// Who signed it; `None` is an unsigned install (`--allow-unsigned`).
    pub signer: Option<Signer>,
    /// The signed OCI manifest, as pulled, and its signature: `sync`
    /// checks both offline (the manifest lists every file's digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// RFC 3339, UTC.
    pub installed_at: String,
}

/// A signer's identity. Key pairs are the only scheme today; keyless
/// signing would add a scheme whose identity is an issuer and a subject,
/// pinned the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signer {
    /// `minisign`.
    pub scheme: String,
    /// The key's 16-hex-digit id, as `minisign` prints it.
    pub key_id: String,
    /// `sha256:` of the public key's bytes.
    pub fingerprint: String,
    /// The public key itself (minisign's base64 line), so `sync` checks
    /// the stored signature offline with the very key that was pinned.
    pub public_key: String,
}

impl Signer {
    /// `minisign:KEYID`, the form messages and tables use.
    pub fn label(&self) -> String {
        format!("{}:{}", self.scheme, self.key_id)
    }
}

/// Where an installed skill came from, as the catalog reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    pub reference: String,
    pub resolved: String,
    pub content_digest: String,
    /// `minisign:KEYID`, or `None` when installed unsigned.
    pub signer: Option<String>,
}

impl Provenance {
    pub fn of(entry: &LockEntry) -> Provenance {
        Provenance {
            reference: entry.reference.clone(),
            resolved: entry.resolved.clone(),
            content_digest: entry.content_digest.clone(),
            signer: entry.signer.as_ref().map(Signer::label),
        }
    }

    /// `signed by minisign:…` or `unsigned`.
    pub fn signer_label(&self) -> &str {
        self.signer.as_deref().unwrap_or("unsigned")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{LOCK_FILE} cannot be read: {0}")]
    Read(std::io::Error),
    #[error(
        "{LOCK_FILE} is not a lock file this version understands: {0}; restore it from version control, or remove it and add the skills again"
    )]
    Malformed(String),
    #[error("{LOCK_FILE} was written by a newer skillbox (format {0}); upgrade skillbox")]
    Newer(u32),
    #[error("{LOCK_FILE} cannot be written: {0}")]
    Write(std::io::Error),
}

impl LockFile {
    /// The lock in `root`, or an empty one when there is none.
    pub fn read(root: &Path) -> Result<LockFile, LockError> {
        let path = root.join(LOCK_FILE);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LockFile {
                    version: LOCK_VERSION,
                    skills: BTreeMap::new(),
                });
            }
            Err(e) => return Err(LockError::Read(e)),
        };
        let mut text = String::new();
        use std::io::Read;
        file.take(MAX_LOCK_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(LockError::Read)?;
        if text.len() as u64 > MAX_LOCK_BYTES {
            return Err(LockError::Malformed("it is larger than 16 MiB".into()));
        }
        LockFile::parse(&text)
    }

    /// A lock file's text, checked: a newer format is refused by name.
    pub fn parse(text: &str) -> Result<LockFile, LockError> {
        let version = serde_json::from_str::<serde_json::Value>(text)
            .map_err(|e| LockError::Malformed(e.to_string()))?
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if version > u64::from(LOCK_VERSION) {
            return Err(LockError::Newer(version as u32));
        }
        let lock: LockFile =
            serde_json::from_str(text).map_err(|e| LockError::Malformed(e.to_string()))?;
        if lock.version != LOCK_VERSION {
            return Err(LockError::Malformed(format!(
                "format {} is not {LOCK_VERSION}",
                lock.version
            )));
        }
        Ok(lock)
    }

    /// Whether `root` has a lock file at all.
    pub fn exists(root: &Path) -> bool {
        root.join(LOCK_FILE).is_file()
    }

    /// Writes the lock whole: a temporary file beside it, synced, renamed
    /// over the old one, and the folder synced.
    pub fn write(&self, root: &Path) -> Result<(), LockError> {
        let mut text = serde_json::to_string_pretty(self).expect("a lock serializes");
        text.push('\n');
        write_atomically(&root.join(LOCK_FILE), text.as_bytes()).map_err(LockError::Write)
    }
}

/// Writes `path` whole or not at all: a temporary file in the same folder,
/// synced, renamed over `path`, and the folder synced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".skillbox-tmp-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Syncs a folder, so a rename in it survives a power cut.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// `sha256:` over `path digest\n` for every file, in path order: equal
/// trees have equal content digests whatever order they were written in.
pub fn content_digest(files: &BTreeMap<String, String>) -> String {
    let mut listing = String::new();
    for (path, digest) in files {
        listing.push_str(path);
        listing.push(' ');
        listing.push_str(digest);
        listing.push('\n');
    }
    crate::digest::sha256(listing.as_bytes())
}

/// The public key a lock entry pinned, checked against its fingerprint.
pub fn pinned_key(signer: &Signer) -> Result<minisign::PublicKey, String> {
    let key = minisign::PublicKey::from_base64(&signer.public_key)
        .map_err(|e| format!("the pinned key {} is damaged ({e})", signer.key_id))?;
    if crate::digest::sha256(&key.to_bytes()) != signer.fingerprint {
        return Err(format!(
            "the pinned key {} does not match its fingerprint",
            signer.key_id
        ));
    }
    Ok(key)
}

/// Whether a signed entry is what its signer signed: the stored signature
/// verifies the stored manifest with the pinned key, and that manifest
/// lists exactly the entry's files. Editing the files and the lock
/// together does not pass this; only the signer's key can.
pub fn verify_signature(entry: &LockEntry) -> Result<(), String> {
    let Some(signer) = &entry.signer else {
        return Ok(());
    };
    let (Some(manifest), Some(signature)) = (&entry.manifest, &entry.signature) else {
        return Err("the lock names a signer but holds no signature".into());
    };
    let key = pinned_key(signer)?;
    let sig = minisign::SignatureBox::from_string(signature)
        .map_err(|e| format!("the stored signature is damaged ({e})"))?;
    minisign::verify(
        &key,
        &sig,
        std::io::Cursor::new(manifest.as_bytes()),
        true,
        false,
        false,
    )
    .map_err(|_| {
        format!(
            "the stored signature is not {}'s signature of the stored manifest",
            signer.label()
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(manifest)
        .map_err(|e| format!("the stored manifest is not JSON ({e})"))?;
    let signed: Option<BTreeMap<String, String>> = value["layers"].as_array().map(|layers| {
        layers
            .iter()
            .filter_map(|l| {
                Some((
                    l["annotations"]["org.opencontainers.image.title"]
                        .as_str()?
                        .to_string(),
                    l["digest"].as_str()?.to_string(),
                ))
            })
            .collect()
    });
    if signed.as_ref() != Some(&entry.files) {
        return Err("the lock's files are not the files the signed manifest lists".into());
    }
    Ok(())
}

/// How an installed folder differs from its lock entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drift {
    pub changed: Vec<String>,
    pub missing: Vec<String>,
    /// Files (or links, devices, anything not a plain file) that the
    /// install did not put there.
    pub added: Vec<String>,
}

impl Drift {
    pub fn is_clean(&self) -> bool {
        self.changed.is_empty() && self.missing.is_empty() && self.added.is_empty()
    }

    /// `changed: a, b; missing: c; added: d`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (label, paths) in [
            ("changed", &self.changed),
            ("missing", &self.missing),
            ("added", &self.added),
        ] {
            if !paths.is_empty() {
                parts.push(format!("{label}: {}", paths.join(", ")));
            }
        }
        parts.join("; ")
    }

    /// Every path named, changed first.
    pub fn paths(&self) -> impl Iterator<Item = &String> {
        self.changed.iter().chain(&self.missing).chain(&self.added)
    }
}

/// Every regular file below `dir` with its digest. Anything else (a link,
/// a device, a folder too deep, more files than the cap) is reported in
/// the second list by path, so a tree with one can never match a lock.
pub fn tree_files(dir: &Path) -> std::io::Result<(BTreeMap<String, String>, Vec<String>)> {
    remembered_tree_files(dir, None)
}

/// [`tree_files`], taking the digest of a file whose settled stamp `memo`
/// remembers without reading it.
fn remembered_tree_files(
    dir: &Path,
    memo: Option<&DigestMemo>,
) -> std::io::Result<(BTreeMap<String, String>, Vec<String>)> {
    let mut found = Found {
        memo,
        ..Found::default()
    };
    walk(dir, "", 0, &mut found)?;
    Ok((found.files, found.odd))
}

#[derive(Default)]
struct Found<'a> {
    memo: Option<&'a DigestMemo>,
    files: BTreeMap<String, String>,
    odd: Vec<String>,
}

fn walk(dir: &Path, prefix: &str, depth: usize, found: &mut Found<'_>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry.file_type()?;
        if kind.is_dir() && depth < 16 {
            walk(&entry.path(), &rel, depth + 1, found)?;
        } else if kind.is_file() && found.files.len() < MAX_LOCKED_FILES {
            let digest = crate::digest::file_with_memo(&entry.path(), found.memo)?;
            found.files.insert(rel, digest);
        } else {
            found.odd.push(rel);
        }
    }
    Ok(())
}

/// How the folder `dir` differs from `entry`.
pub fn drift(entry: &LockEntry, dir: &Path) -> std::io::Result<Drift> {
    remembered_drift(entry, dir, None)
}

/// [`drift`], taking the digests `memo` remembers (see
/// [`crate::sandbox::DigestMemo`]).
pub(crate) fn remembered_drift(
    entry: &LockEntry,
    dir: &Path,
    memo: Option<&DigestMemo>,
) -> std::io::Result<Drift> {
    let (files, odd) = remembered_tree_files(dir, memo)?;
    let mut drift = Drift {
        added: odd,
        ..Drift::default()
    };
    for (path, digest) in &entry.files {
        match files.get(path) {
            None => drift.missing.push(path.clone()),
            Some(found) if found != digest => drift.changed.push(path.clone()),
            Some(_) => {}
        }
    }
    drift.added.extend(
        files
            .keys()
            .filter(|path| !entry.files.contains_key(*path))
            .cloned(),
    );
    drift.added.sort();
    Ok(drift)
}

/// The names an interrupted install in `root` left pending, if any: they
/// are not loaded until a command finishes or undoes it.
pub fn pending_install(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(JOURNAL_FILE)).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(value.get("name")?.as_str()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(files: &[(&str, &str)]) -> LockEntry {
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(p, c)| (p.to_string(), crate::digest::sha256(c.as_bytes())))
            .collect();
        LockEntry {
            reference: "oci://r/x:1".into(),
            resolved: "oci://r/x@sha256:00".into(),
            content_digest: content_digest(&files),
            files,
            signer: None,
            manifest: None,
            signature: None,
            installed_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn drift_names_every_changed_missing_and_added_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("SKILL.md"), "a").unwrap();
        std::fs::create_dir(dir.path().join("references")).unwrap();
        std::fs::write(dir.path().join("references/r.md"), "changed").unwrap();
        std::fs::write(dir.path().join("extra.py"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let locked = entry(&[
            ("SKILL.md", "a"),
            ("references/r.md", "r"),
            ("gone.md", "g"),
        ]);
        let drift = drift(&locked, dir.path()).unwrap();
        assert_eq!(drift.changed, ["references/r.md"]);
        assert_eq!(drift.missing, ["gone.md"]);
        assert_eq!(drift.added, ["extra.py", "link"]);
        assert_eq!(
            drift.describe(),
            "changed: references/r.md; missing: gone.md; added: extra.py, link"
        );
    }

    #[test]
    fn a_lock_round_trips_and_a_newer_or_broken_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = LockFile::read(dir.path()).unwrap();
        assert!(lock.skills.is_empty());
        lock.skills.insert("x".into(), entry(&[("SKILL.md", "a")]));
        lock.write(dir.path()).unwrap();
        assert_eq!(LockFile::read(dir.path()).unwrap(), lock);
        std::fs::write(
            dir.path().join(LOCK_FILE),
            r#"{"version": 9, "skills": {}}"#,
        )
        .unwrap();
        assert!(matches!(
            LockFile::read(dir.path()),
            Err(LockError::Newer(9))
        ));
        std::fs::write(dir.path().join(LOCK_FILE), "{").unwrap();
        assert!(matches!(
            LockFile::read(dir.path()),
            Err(LockError::Malformed(_))
        ));
    }

    #[test]
    fn a_remembered_digest_does_not_hide_a_file_rewritten_since() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("SKILL.md");
        std::fs::write(&path, "a").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let settle = std::time::Duration::from_secs(10);
        if crate::sandbox::stamp::wait_until_settled(&file, settle).is_none() {
            return; // a file system whose stamps never settle
        }
        let cache = tempfile::tempdir().unwrap();
        let memo = DigestMemo::open(&crate::sandbox::DiskCache::new(cache.path().into()));
        let locked = entry(&[("SKILL.md", "a")]);
        let drift = remembered_drift(&locked, dir.path(), Some(&memo)).unwrap();
        assert!(drift.is_clean(), "{drift:?}");
        assert_eq!(
            memo.digest_of(&crate::sandbox::stamp::FileStamp::settled_of(&file).unwrap()),
            Some(crate::digest::sha256(b"a")),
            "remembered"
        );
        // The same size, written after the digest was remembered; checked
        // once this stamp has settled too, so the times alone tell.
        std::fs::write(&path, "b").unwrap();
        crate::sandbox::stamp::wait_until_settled(&file, settle).unwrap();
        let drift = remembered_drift(&locked, dir.path(), Some(&memo)).unwrap();
        assert_eq!(drift.changed, ["SKILL.md"]);
    }
}
