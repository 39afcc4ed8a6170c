//! `skillbox publish`: a skill folder pushed as an OCI artifact, signed
//! when given a key.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::DistributeError;
use super::artifact::{self, MANIFEST_MEDIA_TYPE};
use super::reference::OciRef;
use super::registry::{Registry, RegistryOptions};
use super::sign::{Signer, SigningKey};
use crate::sandbox::Sandbox;
use crate::skill::diagnostic::Diagnostic;
use crate::skill::frontmatter::Strictness;
use crate::skill::{Source, SourceKind, check, model};

/// Where a signature of the manifest `digest` is stored: a tag beside it,
/// as cosign stores its own (`sha256-<hex>.minisig`), holding an artifact
/// whose `subject` is the signed manifest (so registries that index
/// referrers list it too).
pub fn signature_tag(digest: &str) -> String {
    format!("{}.minisig", digest.replace(':', "-"))
}
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.skillbox.signature.v1";
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.skillbox.signature.minisign.v1";
const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// What `publish` pushed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Published {
    pub name: String,
    /// `oci://host/repo:tag`.
    pub reference: String,
    /// The manifest's `sha256:…`.
    pub digest: String,
    /// `oci://host/repo@sha256:…`.
    pub pinned: String,
    pub files: usize,
    pub bytes: u64,
    pub signer: Option<Signer>,
}

/// Checks the skill in `dir` as `skills check` does, packs it, pushes it
/// to `at`, and signs it with `key`.
pub async fn publish(
    dir: &Path,
    at: &OciRef,
    key: Option<&SigningKey>,
    registry: &RegistryOptions,
    sandbox: &Arc<Sandbox>,
) -> Result<Published, DistributeError> {
    let problems: Vec<Diagnostic> = check::check_folder(dir, sandbox)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if !problems.is_empty() {
        return Err(DistributeError::Check {
            name: dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            problems: problems.iter().map(|d| d.to_string()).collect(),
        });
    }
    let source = Source {
        kind: SourceKind::Explicit,
        root: dir.parent().unwrap_or(dir).to_path_buf(),
        trusted: true,
    };
    let (skill, _) = model::load(dir, &source, Strictness::Strict);
    let skill = skill.ok_or_else(|| DistributeError::Check {
        name: dir.display().to_string(),
        problems: vec!["the skill does not load".into()],
    })?;
    let packed = artifact::pack(&skill)?;
    let manifest = artifact::manifest(&packed);
    let client = Registry::new(&at.registry, registry)?;
    client.push_blob(at, &packed.config).await?;
    for file in &packed.files {
        client.push_blob(at, &file.bytes).await?;
    }
    // By digest first, then the signature, then the tag: the tag never
    // points at the new version before its signature is there.
    let digest = model::digest(&manifest);
    client.push_manifest(&at.at(&digest), &manifest).await?;
    if let Some(key) = key {
        let comment = format!("skillbox skill {} {digest}", packed.name);
        let signature = key.sign(&manifest, &comment)?;
        push_signature(&client, at, &digest, manifest.len(), signature.as_bytes()).await?;
    }
    client.push_manifest(at, &manifest).await?;
    Ok(Published {
        name: packed.name.clone(),
        reference: at.to_string(),
        pinned: at.at(&digest).to_string(),
        digest,
        files: packed.files.len(),
        bytes: packed.files.iter().map(|f| f.bytes.len() as u64).sum(),
        signer: key.map(SigningKey::signer),
    })
}

async fn push_signature(
    client: &Registry,
    at: &OciRef,
    digest: &str,
    manifest_size: usize,
    signature: &[u8],
) -> Result<(), DistributeError> {
    let empty = b"{}";
    client.push_blob(at, empty).await?;
    client.push_blob(at, signature).await?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": SIGNATURE_ARTIFACT_TYPE,
        "config": artifact::descriptor(EMPTY_CONFIG_MEDIA_TYPE, empty, None),
        "layers": [artifact::descriptor(SIGNATURE_MEDIA_TYPE, signature, None)],
        "subject": {"mediaType": MANIFEST_MEDIA_TYPE, "digest": digest, "size": manifest_size},
    }))
    .expect("a manifest serializes");
    client
        .push_manifest(&at.tagged(&signature_tag(digest)), &manifest)
        .await?;
    Ok(())
}
