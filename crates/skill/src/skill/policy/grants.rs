//! The user's grants (`--allow-env`, `--allow-net`, the workspace), and
//! what one call of a skill gets of them.

use std::path::PathBuf;

use super::limits::Ceilings;
use super::user_grants::{SkillGrant, is_env_key};
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
        if !is_env_key(key) || skill.as_deref() == Some("") {
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
    /// What the user gives each skill by name, beyond what it asks: the
    /// grants file's (bound to a folder) and this run's (`--grant`, by
    /// name alone), kept apart so that neither takes the other's binding.
    pub skill_grants: std::collections::BTreeMap<String, Vec<SkillGrant>>,
}

impl UserPolicy {
    /// The user's grant for `skill`: one given by name for this run, or one
    /// bound to the very folder `skill` was loaded from. A skill that only
    /// shares the name (a project skill shadowing an installed one, a
    /// `--skills DIR` copy) gets nothing of a grant bound elsewhere.
    pub fn grant_for(&self, skill: &Skill) -> Option<SkillGrant> {
        let mut applying = self
            .skill_grants
            .get(skill.name())?
            .iter()
            .filter(|g| g.folder.as_ref().is_none_or(|folder| *folder == skill.dir));
        let mut grant = applying.next()?.clone();
        for more in applying {
            grant.merge(more);
        }
        Some(grant)
    }

    /// Adds a grant for the skill named `skill`.
    pub fn add_grant(&mut self, skill: String, grant: SkillGrant) {
        self.skill_grants.entry(skill).or_default().push(grant);
    }

    /// Every grant, whichever skill it is for.
    pub fn all_grants(&self) -> impl Iterator<Item = &SkillGrant> {
        self.skill_grants.values().flatten()
    }

    /// Whether any call may get the workspace writable: `--allow-write`,
    /// or a skill the user granted write.
    pub fn may_write(&self) -> bool {
        self.allow_write
            || self
                .all_grants()
                .any(|g| g.workspace == Some(WorkspaceAccess::Write))
    }
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
/// to request the workspace read-only. Writing needs a manifest that asks,
/// or the user's own grant ([`SkillGrant`]), which decides the workspace
/// outright and adds hosts and environment keys to what the skill asks.
pub fn grants(skill: &Skill, policy: &UserPolicy, effect: Option<Effect>) -> Resolved {
    let mut notes = Vec::new();
    let requested = requested(skill);
    let given = policy.grant_for(skill);
    let given = given.as_ref();
    if given.is_none() && policy.skill_grants.contains_key(skill.name()) {
        notes.push(format!(
            "the user's grant for `{name}` is for a skill of that name in another folder, so \
             this one gets nothing of it; the user can give it its own with `skillbox grant \
             {name}`",
            name = skill.name()
        ));
    }
    let declared_read = effect == Some(Effect::Read);
    let workspace = match (given.and_then(|g| g.workspace), &policy.workspace) {
        (Some(WorkspaceAccess::None), _) => None,
        (Some(access), Some(dir)) => Some(WorkspaceGrant {
            host_dir: dir.clone(),
            writable: access == WorkspaceAccess::Write && !declared_read,
        }),
        (Some(_), None) => None,
        (None, _) => asked_workspace(skill, &requested, policy, declared_read, &mut notes),
    };
    let mut env = Vec::new();
    for key in &requested.env {
        if given.is_some_and(|g| g.env.contains(key)) {
            continue;
        }
        match env_decision(skill.name(), key, policy) {
            Ok(()) => {
                if let Ok(value) = std::env::var(key) {
                    env.push((key.clone(), value));
                }
            }
            Err(note) => notes.push(note),
        }
    }
    for key in given.map(|g| g.env.as_slice()).unwrap_or_default() {
        match std::env::var(key) {
            Ok(value) => env.push((key.clone(), value)),
            Err(_) => notes.push(format!(
                "environment variable {key} is granted to skill `{}` but not set where \
                 skillbox runs",
                skill.name()
            )),
        }
    }
    let network = network_grants(
        skill.name(),
        &requested.network,
        &policy.allow_net,
        given.map(SkillGrant::network_rules).unwrap_or_default(),
        &mut notes,
    );
    let programs = super::programs::granted(
        skill.name(),
        &requested.programs,
        given.map(|g| g.programs.as_slice()).unwrap_or_default(),
        &mut notes,
    );
    Resolved {
        grants: Grants {
            skill_dir: Some(skill.mount()),
            workspace,
            env,
            network,
            skill_name: Some(skill.name().to_string()),
            programs: Some(programs),
            ..Grants::default()
        },
        notes,
    }
}

/// The workspace a skill gets from what it asks and the flags, when the
/// user granted it nothing of its own.
fn asked_workspace(
    skill: &Skill,
    requested: &RequestedGrants,
    policy: &UserPolicy,
    declared_read: bool,
    notes: &mut Vec<String>,
) -> Option<WorkspaceGrant> {
    match (requested.workspace, &policy.workspace) {
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
                    "skill `{name}` has no skillbox.yaml, so its scripts get the workspace \
                     read-only; --allow-write applies to skills whose manifest requests it. \
                     The user can let it write with `skillbox grant {name} --workspace \
                     write` (or --grant {name}:workspace=write)",
                    name = skill.name()
                ));
            }
            if wants_write && !policy.allow_write {
                notes.push(format!(
                    "skill `{}` requests write access; the workspace is read-only without --allow-write",
                    skill.name()
                ));
            }
            Some(WorkspaceGrant {
                host_dir: dir.clone(),
                writable: wants_write && policy.allow_write && !declared_read,
            })
        }
    }
}

/// The hosts a skill may reach: those the user granted the skill outright
/// (`outright`), and each `--allow-net` grant for it that it requested (or
/// any, when it requests `*`). Requests not granted, and `--allow-net`
/// grants not requested, become notes.
fn network_grants(
    skill: &str,
    requested: &[String],
    given: &[NetGrant],
    outright: Vec<NetRule>,
    notes: &mut Vec<String>,
) -> Vec<NetRule> {
    let any = requested.iter().any(|r| r == ANY_HOST);
    let requested_rules: Vec<NetRule> = requested.iter().filter_map(|r| r.parse().ok()).collect();
    let covers = |asked: &NetRule, grant: &NetRule| {
        asked.host == grant.host
            && match (asked.port, grant.port) {
                (None, None) => true,
                (None, Some(p)) => p == 80 || p == 443,
                (Some(a), None) => a == 80 || a == 443,
                (Some(a), Some(g)) => a == g,
            }
    };
    let mut out = outright;
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

    /// A skill as public skills ship, with no manifest, from a real
    /// folder.
    fn public_skill(root: &std::path::Path) -> Skill {
        let dir = root.join("docx");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: docx\ndescription: Edits documents. A unit-test fixture.\n---\nRun it.\n",
        )
        .unwrap();
        std::fs::write(dir.join("scripts/comment.py"), "print(1)\n").unwrap();
        let source = crate::skill::Source {
            kind: crate::skill::SourceKind::User,
            root: root.to_path_buf(),
            trusted: true,
        };
        let (skill, _) = crate::skill::model::load(
            &dir,
            &source,
            crate::skill::frontmatter::Strictness::Lenient,
        );
        skill.unwrap()
    }

    #[test]
    fn the_users_own_grant_decides_the_workspace_and_adds_hosts_and_keys() {
        let root = tempfile::tempdir().unwrap();
        let skill = public_skill(root.path());
        let mut policy = UserPolicy {
            workspace: Some(root.path().to_path_buf()),
            ..UserPolicy::default()
        };
        let writable = |policy: &UserPolicy, effect| {
            grants(&skill, policy, effect)
                .grants
                .workspace
                .map(|w| w.writable)
        };
        // As shipped: read-only, even with --allow-write, and told how.
        policy.allow_write = true;
        assert_eq!(writable(&policy, None), Some(false));
        let notes = grants(&skill, &policy, None).notes.join(" ");
        assert!(
            notes.contains("skillbox grant docx --workspace write"),
            "{notes}"
        );

        // Granted write: writable without --allow-write; a function
        // declared read still reads.
        policy.allow_write = false;
        policy.add_grant("docx".into(), SkillGrant::default());
        let grant = &mut policy.skill_grants.get_mut("docx").unwrap()[0];
        grant.workspace = Some(WorkspaceAccess::Write);
        grant.network = vec!["api.example.com:443".into()];
        grant.env = vec!["PATH".into(), "SKILLBOX_UNSET_FOR_TEST".into()];
        assert!(policy.may_write());
        assert_eq!(writable(&policy, None), Some(true));
        assert_eq!(writable(&policy, Some(Effect::Read)), Some(false));
        let resolved = grants(&skill, &policy, None);
        assert_eq!(resolved.grants.network.len(), 1);
        assert_eq!(resolved.grants.env_keys(), ["PATH"]);
        let notes = resolved.notes.join(" ");
        assert!(
            notes.contains("SKILLBOX_UNSET_FOR_TEST is granted to skill `docx` but not set"),
            "{notes}"
        );
        assert!(!notes.contains("api.example.com"), "{notes}");

        // Limits the user gives are the user's word: above the ceilings,
        // and below what a command's own flags say.
        let granted = &mut policy.skill_grants.get_mut("docx").unwrap()[0];
        granted.limits.fuel = Some(policy.ceilings.fuel * 2);
        granted.limits.memory_mib = Some(1024);
        let script = || crate::sandbox::Limits::for_class(crate::sandbox::SideEffect::Script);
        let mut overrides = super::super::LimitOverrides::default();
        let granted = policy.grant_for(&skill).map(|g| g.limits);
        let granted = granted.as_ref();
        let (limits, _) = super::super::limits(
            Some(&skill),
            script(),
            &policy.ceilings,
            granted,
            &overrides,
        );
        assert_eq!(limits.fuel, policy.ceilings.fuel * 2);
        assert_eq!(limits.memory_bytes, 1024 * crate::sandbox::MIB);
        overrides.fuel = Some(5);
        let (limits, _) = super::super::limits(
            Some(&skill),
            script(),
            &policy.ceilings,
            granted,
            &overrides,
        );
        assert_eq!(limits.fuel, 5);

        // `none` keeps it away from the workspace, whatever it asks.
        policy.skill_grants.get_mut("docx").unwrap()[0].workspace = Some(WorkspaceAccess::None);
        assert_eq!(writable(&policy, None), None);
    }
}
