//! A skill as an OCI artifact.
//!
//! ```text
//! manifest (artifactType application/vnd.skillbox.skill.v1)
//!   annotations: title, description, version, created, and what the
//!                skill asks for (dev.skillbox.skill.permissions)
//!   config:  application/vnd.skillbox.skill.config.v1+json (the same, as JSON)
//!   layers:  one per file, titled with its path (as ORAS stores files):
//!            application/wasm for each component, so wasm tools pull them,
//!            application/vnd.skillbox.skill.file.v1 for every other file
//! ```
//!
//! One layer per file means a registry checks every file's digest, a pull
//! checks each again, and a signature of the manifest covers each file by
//! its digest; there is no archive to unpack, so no archive trick (links,
//! device files, `..` inside a tar) exists to defend against. A layer's
//! path is checked before anything is written.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::permissions::Permissions;
use crate::skill::Skill;

pub const ARTIFACT_TYPE: &str = "application/vnd.skillbox.skill.v1";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.skillbox.skill.config.v1+json";
pub const FILE_MEDIA_TYPE: &str = "application/vnd.skillbox.skill.file.v1";
/// What the WebAssembly OCI tools use for a component's layer.
pub const WASM_MEDIA_TYPE: &str = "application/wasm";
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const TITLE: &str = "org.opencontainers.image.title";
pub const PERMISSIONS_ANNOTATION: &str = "dev.skillbox.skill.permissions";

/// Files one artifact may hold.
pub const MAX_FILES: usize = crate::skill::lock::MAX_LOCKED_FILES;
/// The largest file (components included).
pub const MAX_FILE_BYTES: u64 = crate::skill::model::MAX_SERVED_FILE_BYTES;
/// The most one artifact may hold in all.
pub const MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;
/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{0}")]
    Pack(String),
    #[error("the artifact is not a skill: {0}; nothing was installed")]
    NotASkill(String),
    #[error("the artifact's manifest is refused: {0}; nothing was installed")]
    Refused(String),
}

/// One file of a skill, ready to push.
pub struct PackedFile {
    pub path: String,
    pub bytes: Vec<u8>,
    pub media_type: &'static str,
}

/// A skill packed for a registry.
pub struct Packed {
    pub name: String,
    pub files: Vec<PackedFile>,
    pub config: Vec<u8>,
    pub annotations: BTreeMap<String, String>,
}

/// The skill's files (the fileset rule's, plus every component its
/// manifest names) and its metadata.
pub fn pack(skill: &Skill) -> Result<Packed, ArtifactError> {
    let fail = |why: String| ArtifactError::Pack(why);
    let components: BTreeSet<&str> = skill
        .manifest
        .iter()
        .flat_map(|m| m.component_paths())
        .collect();
    let mut paths: BTreeSet<String> = skill
        .files
        .list_all_files(MAX_FILES + 1)
        .into_iter()
        .collect();
    paths.extend(components.iter().map(|c| c.to_string()));
    if paths.len() > MAX_FILES {
        return Err(fail(format!("the skill has more than {MAX_FILES} files")));
    }
    let mut files = Vec::new();
    let mut total = 0u64;
    for path in paths {
        let bytes = skill
            .files
            .read_bounded(&path, MAX_FILE_BYTES)
            .map_err(|e| fail(format!("{path}: {e}")))?;
        total += bytes.len() as u64;
        if total > MAX_TOTAL_BYTES {
            return Err(fail(format!(
                "the skill is larger than {} MiB",
                MAX_TOTAL_BYTES >> 20
            )));
        }
        let media_type = if components.contains(path.as_str()) {
            WASM_MEDIA_TYPE
        } else {
            FILE_MEDIA_TYPE
        };
        files.push(PackedFile {
            path,
            bytes,
            media_type,
        });
    }
    let permissions = Permissions::of(skill);
    let version = skill.meta.metadata.get("version").cloned();
    let config = json!({
        "name": skill.name(),
        "description": skill.meta.description,
        "version": version,
        "permissions": permissions,
        "files": files.len(),
    });
    let mut annotations = BTreeMap::from([
        (TITLE.to_string(), skill.name().to_string()),
        (
            "org.opencontainers.image.description".to_string(),
            skill.meta.description.clone(),
        ),
        (
            "org.opencontainers.image.created".to_string(),
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
        (
            PERMISSIONS_ANNOTATION.to_string(),
            serde_json::to_string(&permissions).expect("permissions serialize"),
        ),
    ]);
    if let Some(version) = version {
        annotations.insert("org.opencontainers.image.version".into(), version);
    }
    Ok(Packed {
        name: skill.name().to_string(),
        files,
        config: serde_json::to_vec(&config).expect("config serializes"),
        annotations,
    })
}

/// A descriptor as a manifest holds it.
pub fn descriptor(media_type: &str, bytes: &[u8], title: Option<&str>) -> Value {
    let mut d = json!({
        "mediaType": media_type,
        "digest": crate::skill::model::digest(bytes),
        "size": bytes.len(),
    });
    if let Some(title) = title {
        d["annotations"] = json!({ TITLE: title });
    }
    d
}

/// The manifest of a packed skill, as bytes (these are what is signed).
pub fn manifest(packed: &Packed) -> Vec<u8> {
    let layers: Vec<Value> = packed
        .files
        .iter()
        .map(|f| descriptor(f.media_type, &f.bytes, Some(&f.path)))
        .collect();
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": descriptor(CONFIG_MEDIA_TYPE, &packed.config, None),
        "layers": layers,
        "annotations": packed.annotations,
    }))
    .expect("a manifest serializes")
}

/// One file a pulled manifest promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub path: String,
    pub digest: String,
    pub size: u64,
    pub media_type: String,
}

/// The files a pulled manifest lists, each checked: a skill artifact's
/// type, at most [`MAX_FILES`] files, every path inside the skill folder
/// (no `..`, no absolute path, no hidden part, no duplicates, no file
/// that is also a folder), every size within the caps, and a SKILL.md.
pub fn layers(manifest: &[u8]) -> Result<Vec<Layer>, ArtifactError> {
    let value: Value = serde_json::from_slice(manifest)
        .map_err(|e| ArtifactError::NotASkill(format!("its manifest is not JSON ({e})")))?;
    let config_type = value["config"]["mediaType"].as_str().unwrap_or_default();
    if value["artifactType"].as_str() != Some(ARTIFACT_TYPE) && config_type != CONFIG_MEDIA_TYPE {
        return Err(ArtifactError::NotASkill(format!(
            "its type is `{}`, not {ARTIFACT_TYPE} (was it pushed by skillbox publish?)",
            value["artifactType"].as_str().unwrap_or(config_type)
        )));
    }
    let listed = value["layers"]
        .as_array()
        .ok_or_else(|| ArtifactError::NotASkill("its manifest lists no layers".into()))?;
    if listed.len() > MAX_FILES {
        return Err(ArtifactError::Refused(format!(
            "it lists {} files; at most {MAX_FILES} are installed",
            listed.len()
        )));
    }
    let refuse = |why: String| ArtifactError::Refused(why);
    let mut out = Vec::new();
    let mut total = 0u64;
    let mut paths = BTreeSet::new();
    for layer in listed {
        let path = layer["annotations"][TITLE].as_str().ok_or_else(|| {
            refuse("a layer has no file name (org.opencontainers.image.title)".into())
        })?;
        check_path(path).map_err(|why| refuse(format!("the file name `{}` {why}", shown(path))))?;
        let digest = layer["digest"].as_str().unwrap_or_default();
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refuse(format!(
                "`{path}` has the digest `{digest}`, which is not sha256"
            )));
        }
        let size = layer["size"]
            .as_u64()
            .ok_or_else(|| refuse(format!("`{path}` has no size")))?;
        if size > MAX_FILE_BYTES {
            return Err(refuse(format!(
                "`{path}` is {size} bytes, over the {} MiB cap for one file",
                MAX_FILE_BYTES >> 20
            )));
        }
        total += size;
        if total > MAX_TOTAL_BYTES {
            return Err(refuse(format!(
                "its files add up to more than the {} MiB cap",
                MAX_TOTAL_BYTES >> 20
            )));
        }
        if !paths.insert(path.to_string()) {
            return Err(refuse(format!("`{path}` is listed twice")));
        }
        out.push(Layer {
            path: path.to_string(),
            digest: digest.to_string(),
            size,
            media_type: layer["mediaType"].as_str().unwrap_or_default().to_string(),
        });
    }
    for path in &paths {
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() && paths.contains(&prefix) {
                return Err(refuse(format!("`{prefix}` is both a file and a folder")));
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
        }
    }
    if !paths.contains(crate::skill::model::SKILL_FILE) {
        return Err(ArtifactError::NotASkill(
            "it has no SKILL.md at its root".into(),
        ));
    }
    Ok(out)
}

/// A name from outside as it may be printed: control and text-direction
/// characters shown as `?`.
pub fn shown(name: &str) -> String {
    crate::text::printable_line(&name.chars().take(200).collect::<String>())
}

/// Why a relative path from outside may not be written, if it may not.
pub fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() || path.len() > 1024 {
        return Err("is empty or too long");
    }
    if path.starts_with('/') || path.contains('\\') {
        return Err("is not a relative path inside the skill folder");
    }
    // Names are printed on terminals and in tab-separated reports.
    if path.chars().any(crate::text::unprintable) {
        return Err("holds control or text-direction characters");
    }
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err("would leave the skill folder");
        }
        if part.starts_with('.') {
            return Err("is hidden, and a published skill holds no hidden files");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_with(paths: &[(&str, u64)]) -> Vec<u8> {
        let layers: Vec<Value> = paths
            .iter()
            .map(|(p, size)| {
                json!({"mediaType": FILE_MEDIA_TYPE, "digest": format!("sha256:{}", "a".repeat(64)), "size": size, "annotations": {TITLE: p}})
            })
            .collect();
        serde_json::to_vec(&json!({"schemaVersion": 2, "artifactType": ARTIFACT_TYPE, "config": {}, "layers": layers})).unwrap()
    }

    #[test]
    fn paths_that_would_leave_the_folder_are_refused_before_any_write() {
        assert!(layers(&manifest_with(&[("SKILL.md", 1), ("references/a.md", 1)])).is_ok());
        for bad in [
            "../escape",
            "/etc/passwd",
            "a/../../b",
            "a//b",
            "./SKILL.md",
            ".git/config",
            "a\\b",
            "a\u{1b}[2J.md",
            "a\nb.md",
            "evil\u{202e}dm.exe",
        ] {
            let err = layers(&manifest_with(&[("SKILL.md", 1), (bad, 1)])).unwrap_err();
            assert!(matches!(err, ArtifactError::Refused(_)), "{bad}: {err}");
        }
        assert!(layers(&manifest_with(&[("SKILL.md", 1), ("a", 1), ("a/b", 1)])).is_err());
        assert!(layers(&manifest_with(&[("SKILL.md", 1), ("SKILL.md", 1)])).is_err());
        assert!(layers(&manifest_with(&[("README.md", 1)])).is_err());
        let over = layers(&manifest_with(&[("SKILL.md", MAX_FILE_BYTES + 1)])).unwrap_err();
        assert!(over.to_string().contains("cap"), "{over}");
    }
}
