//! Checks of the user's policy before anything runs: grants that name no
//! loaded skill or cannot be used, an environment key several skills
//! request, and a write grant over the host's own state. Each is a [`PolicyError`] that says
//! what to change.

use std::path::{Path, PathBuf};

use super::grants::UserPolicy;
use crate::skill::catalog::Catalog;

/// Why the user's policy cannot start: each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum PolicyError {
    /// `--allow-net SKILL:…` names a skill that is not loaded (most often
    /// a typo, which would otherwise silently grant nothing).
    #[error("--allow-net {skill}:{rule}: no skill named `{skill}` is loaded")]
    NetGrantForUnknownSkill {
        /// The skill the grant names.
        skill: String,
        /// The host and port it grants.
        rule: String,
    },
    /// `--allow-env SKILL:KEY` names a skill that is not loaded.
    #[error("--allow-env {skill}:{key}: no skill named `{skill}` is loaded")]
    EnvGrantForUnknownSkill {
        /// The skill the grant names.
        skill: String,
        /// The environment variable.
        key: String,
    },
    /// `--grant SKILL:…` (a grant by name for this run) names a skill that
    /// is not loaded.
    #[error(
        "--grant {skill}:…: no skill named `{skill}` is loaded (skills list shows the skills \
         found)"
    )]
    GrantForUnknownSkill {
        /// The skill the grant names.
        skill: String,
    },
    /// A grant that cannot be used (a host that is not `host[:port]`, a key
    /// that is not a variable name, a limit out of range).
    #[error("the grant for skill `{skill}` cannot be used: {why}")]
    InvalidGrant {
        /// The skill the grant names.
        skill: String,
        /// What is wrong, for a person.
        why: String,
    },
    /// A bare `--allow-env KEY` that more than one skill requests.
    #[error(
        "--allow-env {key}: {} skills request {key} ({}); give it to one with --allow-env \
         SKILL:{key}",
        skills.len(),
        skills.join(", ")
    )]
    AmbiguousEnvGrant {
        /// The environment variable.
        key: String,
        /// The skills that request it.
        skills: Vec<String>,
    },
    /// A writable workspace that contains, or sits inside, the host's own
    /// state.
    #[error(
        "write access refused (--allow-write, or a skill granted workspace write): the \
         workspace {relation} {what} ({}). A tool with write access there could change code \
         the host runs. Choose a workspace that does not overlap it, drop the write grant \
         (--allow-write; --no-user-grants for a skill's), or move that folder (for the cache: SKILLBOX_CACHE_DIR; for the \
         state folder: SKILLBOX_STATE_DIR; for the audit log: --audit FILE).",
        path.display()
    )]
    WriteOverHostState {
        /// `contains` or `sits inside`.
        relation: &'static str,
        /// What the state is, in words.
        what: String,
        /// Where it is.
        path: PathBuf,
    },
}

/// Refuses a grant that cannot be used, and a grant by name for this run
/// that names no loaded skill (most often a typo). A grant bound to a
/// folder (the user's grants file) may name a skill this run does not
/// load: it waits for that skill.
pub fn check_skill_grants(catalog: &Catalog, policy: &UserPolicy) -> Result<(), PolicyError> {
    for (skill, grant) in policy
        .skill_grants
        .iter()
        .flat_map(|(skill, grants)| grants.iter().map(move |g| (skill, g)))
    {
        grant.check().map_err(|why| PolicyError::InvalidGrant {
            skill: skill.clone(),
            why,
        })?;
        if grant.folder.is_none() && catalog.get(skill).is_none() {
            return Err(PolicyError::GrantForUnknownSkill {
                skill: skill.clone(),
            });
        }
    }
    Ok(())
}

/// Refuses an `--allow-net` grant naming a skill that is not loaded (most
/// often a typo, which would otherwise silently grant nothing).
pub fn check_net_grants(catalog: &Catalog, policy: &UserPolicy) -> Result<(), PolicyError> {
    match policy
        .allow_net
        .iter()
        .find(|g| catalog.get(&g.skill).is_none())
    {
        Some(g) => Err(PolicyError::NetGrantForUnknownSkill {
            skill: g.skill.clone(),
            rule: g.rule.to_string(),
        }),
        None => Ok(()),
    }
}

/// Refuses a bare `--allow-env KEY` that more than one skill requests: the
/// user must say which skill gets it. Also refuses a grant naming a skill
/// that is not loaded, which is most often a typo.
pub fn check_env_grants(catalog: &Catalog, policy: &UserPolicy) -> Result<(), PolicyError> {
    for grant in &policy.allow_env {
        match &grant.skill {
            Some(skill) if catalog.get(skill).is_none() => {
                return Err(PolicyError::EnvGrantForUnknownSkill {
                    skill: skill.clone(),
                    key: grant.key.clone(),
                });
            }
            Some(_) => {}
            None => {
                let requesters: Vec<String> = catalog
                    .skills()
                    .filter(|s| {
                        s.manifest
                            .as_ref()
                            .is_some_and(|m| m.grants.env.contains(&grant.key))
                    })
                    .map(|s| s.name().to_string())
                    .collect();
                if requesters.len() > 1 {
                    return Err(PolicyError::AmbiguousEnvGrant {
                        key: grant.key.clone(),
                        skills: requesters,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Something the host keeps for itself, that no write grant may cover.
#[derive(Debug, Clone)]
pub struct HostState {
    /// What it is, in words: "the compiled-code cache", "skill folder …".
    pub what: String,
    pub path: PathBuf,
}

/// Refuses a writable workspace that contains, or sits inside, any of the
/// host's own state: skill sources, the compiled-code cache, the audit log
/// or the state folder. A guest with that grant could rewrite a skill's
/// code or the host's compiled code.
pub fn check_write_grant(policy: &UserPolicy, protected: &[HostState]) -> Result<(), PolicyError> {
    let (Some(workspace), true) = (&policy.workspace, policy.may_write()) else {
        return Ok(());
    };
    let Ok(ws) = std::fs::canonicalize(workspace) else {
        return Ok(());
    };
    for state in protected {
        let Some(real) = resolve_existing(&state.path) else {
            continue;
        };
        let conflict = if real.starts_with(&ws) {
            Some("contains")
        } else if ws.starts_with(&real) {
            Some("sits inside")
        } else {
            None
        };
        if let Some(relation) = conflict {
            return Err(PolicyError::WriteOverHostState {
                relation,
                what: state.what.clone(),
                path: state.path.clone(),
            });
        }
    }
    Ok(())
}

/// The canonical form of `path`, or of its nearest existing ancestor joined
/// with the rest (a cache folder that is not created yet still counts).
fn resolve_existing(path: &Path) -> Option<PathBuf> {
    let mut missing = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&current) {
            return Some(missing.iter().rev().fold(real, |acc, part| acc.join(part)));
        }
        missing.push(current.file_name()?.to_os_string());
        current = current.parent()?.to_path_buf();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_grants_never_cover_host_state() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join("skills/a")).unwrap();
        let policy = UserPolicy {
            workspace: Some(ws.clone()),
            allow_write: true,
            ..UserPolicy::default()
        };
        let inside = HostState {
            what: "skill source".into(),
            path: ws.join("skills"),
        };
        let not_yet_created = HostState {
            what: "the compiled-code cache".into(),
            path: ws.join(".cache/skillbox/components"),
        };
        let above = HostState {
            what: "the state folder".into(),
            path: root.path().to_path_buf(),
        };
        let elsewhere = HostState {
            what: "the audit log".into(),
            path: root.path().join("audit.jsonl"),
        };
        for state in [&inside, &not_yet_created, &above] {
            let err = check_write_grant(&policy, std::slice::from_ref(state)).unwrap_err();
            assert!(err.to_string().contains(&state.what), "{err}");
        }
        assert!(check_write_grant(&policy, &[elsewhere]).is_ok());
        let read_only = UserPolicy {
            allow_write: false,
            ..policy
        };
        assert!(check_write_grant(&read_only, &[inside]).is_ok());
    }
}
