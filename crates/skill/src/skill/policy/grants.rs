//! The user's grants (`--allow-env`, `--allow-net`, the workspace), and
//! what one call of a skill gets of them.

use std::path::PathBuf;

use super::limits::Ceilings;
use crate::sandbox::{Grants, NetRule, WorkspaceGrant};
use crate::skill::manifest::{ANY_HOST, Effect, RequestedGrants, WorkspaceAccess};
use crate::skill::model::Skill;

/// One `--allow-env` grant: a key for one skill, or (bare) for the only
/// skill that requests it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[deny(missing_docs)]
pub struct EnvGrant {
    /// The skill it is for; `None` for the one skill that requests the key.
    pub skill: Option<String>,
    /// The environment variable.
    pub key: String,
}

impl std::str::FromStr for EnvGrant {
    type Err = String;

    /// `SKILL:KEY` or `KEY`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (skill, key) = match text.split_once(':') {
            Some((skill, key)) => (Some(skill.to_string()), key),
            None => (None, text),
        };
        let valid_key = !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !key.starts_with(|c: char| c.is_ascii_digit());
        if !valid_key || skill.as_deref() == Some("") {
            return Err(format!(
                "`{text}` is not SKILL:KEY or KEY (for example log-inspect:GITHUB_TOKEN)"
            ));
        }
        Ok(EnvGrant {
            skill,
            key: key.to_string(),
        })
    }
}

/// One `--allow-net SKILL:HOST[:PORT]` grant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[deny(missing_docs)]
pub struct NetGrant {
    /// The skill it is for.
    pub skill: String,
    /// The host and port it may reach.
    pub rule: NetRule,
}

impl std::str::FromStr for NetGrant {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (skill, rest) = text.split_once(':').ok_or_else(|| {
            format!("`{text}` is not SKILL:HOST[:PORT] (for example web-peek:api.example.com:443)")
        })?;
        if skill.is_empty() {
            return Err(format!("`{text}` names no skill; use SKILL:HOST[:PORT]"));
        }
        Ok(NetGrant {
            skill: skill.to_string(),
            rule: rest.parse()?,
        })
    }
}

/// What the user allows, from the command line.
#[derive(Debug, Clone, Default)]
pub struct UserPolicy {
    pub workspace: Option<PathBuf>,
    pub allow_write: bool,
    /// Environment variables the user gives to skills that request them.
    pub allow_env: Vec<EnvGrant>,
    /// Hosts the user lets named skills reach, where they request them.
    pub allow_net: Vec<NetGrant>,
    /// The most a skill's manifest may ask for.
    pub ceilings: Ceilings,
}

/// The grants in force for a skill, and notes on requests not granted.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub grants: Grants,
    pub notes: Vec<String>,
}

/// What `skill` asks for: its manifest's grants, or, for a skill without
/// one, the workspace read-only (see [`grants`]). What a user is shown
/// before installing is computed from this, so it says what the skill will
/// really get.
pub fn requested(skill: &Skill) -> RequestedGrants {
    match &skill.manifest {
        Some(manifest) => manifest.grants.clone(),
        None => RequestedGrants {
            workspace: WorkspaceAccess::Read,
            ..RequestedGrants::default()
        },
    }
}

/// The grants of a component file the user names at the command line. It
/// has no manifest to ask with, so it gets what the user's flags give: the
/// workspace as granted, every network rule, and the environment keys
/// granted without a skill (`--allow-env KEY`).
pub fn bare_grants(policy: &UserPolicy) -> Resolved {
    let env = policy
        .allow_env
        .iter()
        .filter(|g| g.skill.is_none())
        .filter_map(|g| std::env::var(&g.key).ok().map(|v| (g.key.clone(), v)))
        .collect();
    Resolved {
        grants: Grants {
            workspace: policy.workspace.as_ref().map(|dir| WorkspaceGrant {
                host_dir: dir.clone(),
                writable: policy.allow_write,
            }),
            env,
            network: policy.allow_net.iter().map(|g| g.rule.clone()).collect(),
            ..Grants::default()
        },
        notes: Vec::new(),
    }
}

/// The grants of a call of `skill` to a function with `effect`. A function
/// declared `read` gets the workspace read-only even when the skill holds
/// a write grant: the declared effect is enforced, not trusted.
///
/// A skill without a manifest (a public skill as its authors ship it) can
/// only run Python scripts, and those read the user's files: it is taken
/// to request the workspace read-only. Writing needs a manifest that asks.
pub fn grants(skill: &Skill, policy: &UserPolicy, effect: Option<Effect>) -> Resolved {
    let mut notes = Vec::new();
    let requested = requested(skill);
    let workspace = match (requested.workspace, &policy.workspace) {
        (WorkspaceAccess::None, Some(_)) => {
            notes.push(format!(
                "skill `{}` does not request the workspace, so it is not mounted",
                skill.name()
            ));
            None
        }
        (_, None) => {
            if requested.workspace != WorkspaceAccess::None && skill.manifest.is_some() {
                notes.push(format!(
                    "skill `{}` requests the workspace; none was given (--workspace DIR)",
                    skill.name()
                ));
            }
            None
        }
        (access, Some(dir)) => {
            let wants_write = access == WorkspaceAccess::Write;
            if skill.manifest.is_none() && policy.allow_write {
                notes.push(format!(
                    "skill `{}` has no skillbox.yaml, so its scripts get the workspace read-only; \
                     --allow-write applies to skills whose manifest requests it \
                     (grants: {{workspace: write}})",
                    skill.name()
                ));
            }
            if wants_write && !policy.allow_write {
                notes.push(format!(
                    "skill `{}` requests write access; the workspace is read-only without --allow-write",
                    skill.name()
                ));
            }
            let declared_read = effect == Some(Effect::Read);
            Some(WorkspaceGrant {
                host_dir: dir.clone(),
                writable: wants_write && policy.allow_write && !declared_read,
            })
        }
    };
    let mut env = Vec::new();
    for key in &requested.env {
        match env_decision(skill.name(), key, policy) {
            Ok(()) => {
                if let Ok(value) = std::env::var(key) {
                    env.push((key.clone(), value));
                }
            }
            Err(note) => notes.push(note),
        }
    }
    let network = network_grants(
        skill.name(),
        &requested.network,
        &policy.allow_net,
        &mut notes,
    );
    Resolved {
        grants: Grants {
            skill_dir: Some(skill.mount()),
            workspace,
            env,
            network,
            skill_name: Some(skill.name().to_string()),
            packages: None,
        },
        notes,
    }
}

/// The hosts a skill may reach: each user grant for it that it requested
/// (or any, when it requests `*`). Requests not granted, and grants not
/// requested, become notes.
fn network_grants(
    skill: &str,
    requested: &[String],
    given: &[NetGrant],
    notes: &mut Vec<String>,
) -> Vec<NetRule> {
    let any = requested.iter().any(|r| r == ANY_HOST);
    let requested_rules: Vec<NetRule> = requested.iter().filter_map(|r| r.parse().ok()).collect();
    let covers = |asked: &NetRule, grant: &NetRule| {
        asked.host == grant.host
            && match (asked.port, grant.port) {
                (None, None) => true,
                (None, Some(p)) => p == 80 || p == 443,
                (Some(a), g) => g == Some(a),
            }
    };
    let mut out = Vec::new();
    for grant in given.iter().filter(|g| g.skill == skill) {
        if any
            || requested_rules
                .iter()
                .any(|asked| covers(asked, &grant.rule))
        {
            out.push(grant.rule.clone());
        } else {
            notes.push(format!(
                "--allow-net {skill}:{} is ignored: the skill does not request that host",
                grant.rule
            ));
        }
    }
    for asked in &requested_rules {
        if !out.iter().any(|g| covers(asked, g)) {
            notes.push(format!(
                "network access to {asked} is requested but not given (--allow-net {skill}:{asked})"
            ));
        }
    }
    if any && out.is_empty() {
        notes.push(format!(
            "skill `{skill}` can reach the hosts you grant it; none is given (--allow-net {skill}:HOST[:PORT])"
        ));
    }
    out
}

/// Whether the user gave `key` to `skill`. A bare `--allow-env KEY` counts
/// only while the policy was checked against the catalog
/// ([`check_env_grants`]), which refuses it when several skills request it.
fn env_decision(skill: &str, key: &str, policy: &UserPolicy) -> Result<(), String> {
    let given = policy
        .allow_env
        .iter()
        .any(|g| g.key == key && g.skill.as_deref().is_none_or(|s| s == skill));
    if given {
        Ok(())
    } else {
        Err(format!(
            "environment variable {key} is requested but not given (--allow-env {skill}:{key})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_grants_parse_both_forms() {
        assert_eq!(
            "log-inspect:TOKEN".parse::<EnvGrant>(),
            Ok(EnvGrant {
                skill: Some("log-inspect".into()),
                key: "TOKEN".into()
            })
        );
        assert_eq!(
            "TOKEN".parse::<EnvGrant>(),
            Ok(EnvGrant {
                skill: None,
                key: "TOKEN".into()
            })
        );
        assert!(":TOKEN".parse::<EnvGrant>().is_err());
        assert!("a:1X".parse::<EnvGrant>().is_err());
    }
}
