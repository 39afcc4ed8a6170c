//! `add`, `update`, `sync` and `remove`: fetching, verifying, showing what
//! a skill asks for, and installing it with its lock entry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::DistributeError;
use super::artifact;
use super::git;
use super::install::{self, Recovery, Staged};
use super::permissions::Permissions;
use super::publish::{SIGNATURE_MEDIA_TYPE, signature_tag};
use super::reference::{OciRef, SkillRef};
use super::registry::{Registry, RegistryOptions};
use super::sign::{Signer, TrustedKeys};
use crate::sandbox::Sandbox;
use crate::skill::diagnostic::Diagnostic;
use crate::skill::frontmatter::{self, Strictness};
use crate::skill::lock::{self, Drift, LockEntry, LockFile};
use crate::skill::policy::UserGrants;
use crate::skill::{Source, SourceKind, check, model};

/// The largest signature artifact read.
const MAX_SIGNATURE_BYTES: u64 = 4096;

/// How one command fetches and installs.
pub struct Settings {
    /// The source folder installed into (`~/.skillbox/skills`, or a
    /// project's `.agents/skills`); its lock sits in it.
    pub root: PathBuf,
    pub registry: RegistryOptions,
    pub trusted: TrustedKeys,
    pub allow_unsigned: bool,
    pub allow_signer_change: bool,
    /// What the user gave skills by name (`skillbox grant`): what a plan
    /// shows a skill will get, and what an update is compared against.
    pub grants: UserGrants,
}

/// A skill fetched, verified, checked and staged, waiting for a yes.
pub struct Plan {
    pub name: String,
    pub entry: LockEntry,
    pub permissions: Permissions,
    /// The installed version it replaces, if any.
    pub previous: Option<LockEntry>,
    /// What it may do that the installed version may not.
    pub widened: Vec<String>,
    /// Warnings of the checks (errors refuse the plan).
    pub warnings: Vec<String>,
    /// What recovery found before this command started.
    pub recovered: Recovery,
    staged: Staged,
    root: PathBuf,
    /// The source folder, held for this command until the plan is
    /// installed or dropped (`None` inside `sync`, which holds it itself).
    _busy: Option<install::Busy>,
}

/// Why a plan is made: what it may replace, and which keys it trusts.
#[derive(Clone, Copy)]
enum Purpose<'a> {
    /// A new skill: it must not replace a folder `add` did not install.
    Add,
    /// A newer version of the installed skill `name`: the artifact must
    /// still be that skill, signed by a trusted key.
    Update(&'a str),
    /// The locked version of `name` again: its digest or commit is pinned,
    /// so its pinned key (or none, if it was installed unsigned) is enough.
    Restore(&'a str),
}

impl Plan {
    /// Whether this is the version already installed.
    pub fn is_unchanged(&self) -> bool {
        self.previous.as_ref().is_some_and(|p| {
            p.resolved == self.entry.resolved && p.content_digest == self.entry.content_digest
        }) && lock::drift(&self.entry, &self.root.join(&self.name)).is_ok_and(|d| d.is_clean())
    }

    /// Installs it atomically and records it in the lock.
    pub fn install(self) -> Result<(), DistributeError> {
        Ok(self.staged.commit(self.entry)?)
    }
}

/// What was fetched, before any check.
struct Pulled {
    resolved: String,
    files: Vec<(String, Vec<u8>)>,
    /// The OCI manifest and its signature, when there is one.
    manifest: Option<String>,
    signature: Option<String>,
}

/// Fetches `reference`, verifies it, runs the checks, and stages it.
pub async fn plan(
    reference: &SkillRef,
    settings: &Settings,
    sandbox: &Arc<Sandbox>,
) -> Result<Plan, DistributeError> {
    let busy = install::hold(&settings.root)?;
    let mut plan = plan_for(reference, settings, sandbox, Purpose::Add).await?;
    plan._busy = Some(busy);
    Ok(plan)
}

async fn plan_for(
    reference: &SkillRef,
    settings: &Settings,
    sandbox: &Arc<Sandbox>,
    purpose: Purpose<'_>,
) -> Result<Plan, DistributeError> {
    let recovered = install::recover(&settings.root)?;
    let pulled = match reference {
        SkillRef::Oci(r) => pull_oci(r, &settings.registry).await?,
        SkillRef::Git(r) => {
            let r = r.clone();
            let pull = tokio::task::spawn_blocking(move || git::pull(&r))
                .await
                .map_err(|e| DistributeError::Io(e.to_string()))??;
            let SkillRef::Git(g) = reference else {
                unreachable!()
            };
            let pinned = super::reference::GitRef {
                rev: Some(pull.commit.clone()),
                ..g.clone()
            };
            Pulled {
                resolved: pinned.to_string(),
                files: pull.files,
                manifest: None,
                signature: None,
            }
        }
    };
    let name = skill_name(&pulled.files, reference)?;
    let locked = LockFile::read(&settings.root)?;
    let previous = locked.skills.get(&name).cloned();
    match purpose {
        Purpose::Add if previous.is_none() && settings.root.join(&name).exists() => {
            return Err(DistributeError::Io(format!(
                "a folder `{name}` that skillbox add did not install is already in the skills folder; nothing was installed. Move it away (or delete it) first"
            )));
        }
        Purpose::Update(expected) | Purpose::Restore(expected) if expected != name => {
            return Err(DistributeError::Io(format!(
                "{reference} now holds the skill `{name}`, not `{expected}`; nothing was installed. Add it under its own name with `skillbox add` if you want it"
            )));
        }
        _ => {}
    }
    let signer = verify_signer(reference, &pulled, settings, purpose, previous.as_ref())?;

    let files: BTreeMap<String, String> = pulled
        .files
        .iter()
        .map(|(path, bytes)| (path.clone(), model::digest(bytes)))
        .collect();
    let entry = LockEntry {
        reference: match &previous {
            // `sync` restores by the resolved pin; the reference stays the
            // one the user gave.
            Some(p) if p.resolved == pulled.resolved => p.reference.clone(),
            _ => reference.to_string(),
        },
        resolved: pulled.resolved.clone(),
        content_digest: lock::content_digest(&files),
        files,
        signer,
        manifest: pulled.manifest.clone(),
        signature: pulled.signature.clone(),
        installed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let staged = install::stage(&settings.root, &name, &pulled.files)?;
    let dir = staged.dir();
    let diagnostics = {
        let dir = dir.clone();
        let sandbox = sandbox.clone();
        tokio::task::spawn_blocking(move || check::check_folder(&dir, &sandbox))
            .await
            .map_err(|e| DistributeError::Io(e.to_string()))?
    };
    let shown = |d: &Diagnostic| {
        let rel = d
            .path
            .strip_prefix(&dir)
            .unwrap_or(&d.path)
            .display()
            .to_string();
        let rel = if rel.is_empty() { name.clone() } else { rel };
        format!("{rel}: {}", d.message)
    };
    let (errors, warnings): (Vec<_>, Vec<_>) = diagnostics.iter().partition(|d| d.is_error());
    let errors: Vec<String> = errors.into_iter().map(shown).collect();
    let warnings: Vec<String> = warnings.into_iter().map(shown).collect();
    if !errors.is_empty() {
        return Err(DistributeError::Check {
            name,
            problems: errors,
        });
    }
    // Only a grant for the folder this installs into: one bound to a
    // skill of the same name elsewhere is not this one's.
    let folder = std::fs::canonicalize(&settings.root)
        .unwrap_or_else(|_| settings.root.clone())
        .join(&name);
    let granted = settings
        .grants
        .skills
        .get(&name)
        .filter(|g| g.folder.as_ref() == Some(&folder));
    let permissions = permissions_of(&dir, &settings.root)
        .unwrap_or_default()
        .with_grant(granted);
    let widened = match &previous {
        Some(_) => permissions_of(&settings.root.join(&name), &settings.root)
            .unwrap_or_default()
            .with_grant(granted)
            .widened_by(&permissions),
        None => Vec::new(),
    };
    Ok(Plan {
        name,
        entry,
        permissions,
        previous,
        widened,
        warnings,
        recovered,
        staged,
        root: settings.root.clone(),
        _busy: None,
    })
}

/// What the skill in `dir` asks for.
pub fn permissions_of(dir: &Path, root: &Path) -> Option<Permissions> {
    let source = Source {
        kind: SourceKind::User,
        root: root.to_path_buf(),
        trusted: true,
    };
    let (skill, _) = model::load(dir, &source, Strictness::Lenient);
    skill.map(|s| Permissions::of(&s))
}

/// The skill's name from its SKILL.md, which is also its folder's name.
fn skill_name(
    files: &[(String, Vec<u8>)],
    reference: &SkillRef,
) -> Result<String, DistributeError> {
    let not_a_skill = |why: String| DistributeError::NotASkill {
        reference: reference.to_string(),
        why,
    };
    let (_, bytes) = files
        .iter()
        .find(|(p, _)| p == model::SKILL_FILE)
        .ok_or_else(|| not_a_skill("it has no SKILL.md".into()))?;
    let (fm, _) = frontmatter::split_with(bytes, Strictness::Strict)
        .map_err(|p| not_a_skill(format!("its SKILL.md does not parse ({})", p.message)))?;
    let name = fm
        .mapping
        .get("name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| not_a_skill("its SKILL.md has no name".into()))?;
    if name.contains('/') || artifact::check_path(name).is_err() {
        return Err(not_a_skill(format!(
            "its name `{}` cannot name a folder",
            artifact::shown(name)
        )));
    }
    Ok(name.to_string())
}

async fn pull_oci(at: &OciRef, options: &RegistryOptions) -> Result<Pulled, DistributeError> {
    let client = Registry::new(&at.registry, options)?;
    let (manifest, digest) = client.pull_manifest(at).await?;
    let pinned = at.at(&digest);
    let layers = artifact::layers(&manifest)?;
    let mut files = Vec::with_capacity(layers.len());
    for layer in &layers {
        let bytes = client
            .pull_blob(
                &pinned,
                &format!("`{}`", layer.path),
                &layer.digest,
                layer.size,
            )
            .await?;
        files.push((layer.path.clone(), bytes));
    }
    let signature = pull_signature(&client, at, &digest).await?;
    Ok(Pulled {
        resolved: pinned.to_string(),
        files,
        manifest: Some(String::from_utf8_lossy(&manifest).into_owned()),
        signature,
    })
}

async fn pull_signature(
    client: &Registry,
    at: &OciRef,
    digest: &str,
) -> Result<Option<String>, DistributeError> {
    let tag = at.tagged(&signature_tag(digest));
    let Some(manifest) = client.pull_manifest_if_any(&tag).await? else {
        return Ok(None);
    };
    let value: serde_json::Value = serde_json::from_slice(&manifest).unwrap_or_default();
    let layer = &value["layers"][0];
    let refuse = |why: &str| DistributeError::BadSignatureArtifact(why.to_string());
    if value["subject"]["digest"].as_str() != Some(digest) {
        return Err(refuse(
            "it does not name the artifact it sits beside as its subject",
        ));
    }
    if layer["mediaType"].as_str() != Some(SIGNATURE_MEDIA_TYPE) {
        return Err(refuse("it holds no minisign signature"));
    }
    let size = layer["size"].as_u64().unwrap_or(u64::MAX);
    if size > MAX_SIGNATURE_BYTES {
        return Err(refuse("its signature is implausibly large"));
    }
    let bytes = client
        .pull_blob(
            &tag,
            "the signature",
            layer["digest"].as_str().unwrap_or_default(),
            size,
        )
        .await?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Who signed what was pulled, after every rule: a signature must verify
/// against a trusted (or the pinned) key; an unsigned skill needs
/// `--allow-unsigned`; a signer other than the pinned one needs
/// `--allow-signer-change`.
fn verify_signer(
    reference: &SkillRef,
    pulled: &Pulled,
    settings: &Settings,
    purpose: Purpose<'_>,
    previous: Option<&LockEntry>,
) -> Result<Option<Signer>, DistributeError> {
    let pinned = previous.and_then(|p| p.signer.as_ref());
    let restoring = matches!(purpose, Purpose::Restore(_));
    let signer = match (&pulled.manifest, &pulled.signature) {
        (Some(manifest), Some(signature)) => {
            // A restore fetches a pinned digest, so the pinned key is
            // enough; anything newer needs a key the user trusts now (a
            // key removed from trusted-keys is revoked for updates).
            let verified = match (restoring, pinned) {
                (true, Some(pinned)) => TrustedKeys::default()
                    .with_pinned(pinned)?
                    .verify(manifest.as_bytes(), signature),
                _ => settings.trusted.verify(manifest.as_bytes(), signature),
            };
            Some(verified?)
        }
        _ if settings.allow_unsigned || (restoring && pinned.is_none()) => None,
        _ => {
            return Err(DistributeError::Unsigned {
                reference: reference.to_string(),
                git: matches!(reference, SkillRef::Git(_)),
            });
        }
    };
    if let Some(pinned) = pinned
        && signer.as_ref().map(|s| &s.fingerprint) != Some(&pinned.fingerprint)
        && !settings.allow_signer_change
    {
        return Err(DistributeError::SignerChanged {
            pinned: pinned.label(),
            now: signer.as_ref().map_or("unsigned".into(), Signer::label),
        });
    }
    Ok(signer)
}

/// The plan that moves an installed skill to what its reference names now
/// (a moved tag, a branch's new head).
pub async fn plan_update(
    name: &str,
    settings: &Settings,
    sandbox: &Arc<Sandbox>,
) -> Result<Plan, DistributeError> {
    let locked = LockFile::read(&settings.root)?;
    let entry = locked
        .skills
        .get(name)
        .ok_or_else(|| DistributeError::NotInstalled(name.to_string()))?;
    let reference: SkillRef = entry
        .reference
        .parse()
        .map_err(|e: super::reference::RefError| DistributeError::Io(e.to_string()))?;
    let busy = install::hold(&settings.root)?;
    let mut plan = plan_for(&reference, settings, sandbox, Purpose::Update(name)).await?;
    plan._busy = Some(busy);
    Ok(plan)
}

/// One locked skill, as `sync` found it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SyncItem {
    pub name: String,
    pub resolved: String,
    /// `ok`, `drifted`, `missing`, `bad-signature` or `restored`.
    pub state: &'static str,
    /// The files that differ from the lock.
    pub files: Vec<String>,
    pub detail: Option<String>,
}

/// Checks every locked skill in `settings.root` offline: its files against
/// the lock, and the stored signature against the pinned key (and the
/// signed manifest against the lock's files). With `restore`, a drifted or
/// missing skill is fetched again by its pinned digest or commit and
/// reinstalled.
pub async fn sync(
    settings: &Settings,
    restore: bool,
    sandbox: &Arc<Sandbox>,
) -> Result<(Recovery, Vec<SyncItem>), DistributeError> {
    let _busy = match restore {
        true => Some(install::hold(&settings.root)?),
        false => None,
    };
    let recovered = if restore {
        install::recover(&settings.root)?
    } else {
        Recovery::Nothing
    };
    let locked = LockFile::read(&settings.root)?;
    let mut items = Vec::new();
    for (name, entry) in &locked.skills {
        let mut item = SyncItem {
            name: name.clone(),
            resolved: entry.resolved.clone(),
            state: "ok",
            files: Vec::new(),
            detail: None,
        };
        if let Err(why) = lock::verify_signature(entry) {
            item.state = "bad-signature";
            item.detail = Some(why);
            items.push(item);
            continue;
        }
        let dir = settings.root.join(name);
        let drift = if dir.is_dir() {
            lock::drift(entry, &dir).map_err(|e| DistributeError::Io(e.to_string()))?
        } else {
            item.state = "missing";
            Drift::default()
        };
        if !drift.is_clean() {
            item.state = "drifted";
            item.files = drift.paths().cloned().collect();
            item.detail = Some(drift.describe());
        }
        if restore && item.state != "ok" {
            match restore_one(name, entry, settings, sandbox).await {
                Ok(()) => item.state = "restored",
                Err(e) => {
                    item.state = "restore-failed";
                    item.detail = Some(e.to_string());
                }
            }
        }
        items.push(item);
    }
    Ok((recovered, items))
}

/// Fetches `entry` again by its pinned digest or commit and reinstalls it,
/// if it still holds exactly the locked files.
async fn restore_one(
    name: &str,
    entry: &LockEntry,
    settings: &Settings,
    sandbox: &Arc<Sandbox>,
) -> Result<(), DistributeError> {
    let pinned: SkillRef = entry
        .resolved
        .parse()
        .map_err(|e: super::reference::RefError| DistributeError::Io(e.to_string()))?;
    let plan = plan_for(&pinned, settings, sandbox, Purpose::Restore(name)).await?;
    if plan.entry.content_digest != entry.content_digest {
        return Err(DistributeError::Io(format!(
            "{} no longer holds the files the lock pins for `{name}`; nothing was changed",
            entry.resolved
        )));
    }
    plan.install()
}

/// Uninstalls `name` from `settings.root`.
pub fn remove(root: &Path, name: &str) -> Result<Recovery, DistributeError> {
    let _busy = install::hold(root)?;
    let recovered = install::recover(root)?;
    let locked = LockFile::read(root)?;
    if !locked.skills.contains_key(name) {
        return Err(DistributeError::NotInstalled(name.to_string()));
    }
    install::remove(root, name)?;
    Ok(recovered)
}
