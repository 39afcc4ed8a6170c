//! From a skill's requests and the user's policy to the grants and limits
//! of one call. Only the user's policy can widen what a call gets: a skill
//! *requests* grants and limits, the user *gives* them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::catalog::Catalog;
use super::manifest::{ANY_HOST, Effect, ManifestLimits, WorkspaceAccess};
use super::model::Skill;
use crate::sandbox::{Grants, Limits, MIB, NetRule, SideEffect, WorkspaceGrant};

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

/// The largest limits a skill's manifest may request. Requests above are
/// clamped to these; only the user raises them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[deny(missing_docs)]
pub struct Ceilings {
    /// The longest wall-clock limit.
    pub timeout: Duration,
    /// The largest CPU budget, in fuel units (about one per instruction).
    pub fuel: u64,
    /// The largest memory cap, in bytes.
    pub memory_bytes: usize,
    /// The largest output cap (stdout, stderr and the result, each), in bytes.
    pub output_bytes: usize,
}

pub const DEFAULT_CEILING_TIMEOUT: Duration = Duration::from_secs(60);
/// About a minute of work at the rate a tool spends fuel.
pub const DEFAULT_CEILING_FUEL: u64 = 60_000_000_000;
pub const DEFAULT_CEILING_MEMORY_BYTES: usize = 256 * MIB;
pub const DEFAULT_CEILING_OUTPUT_BYTES: usize = 8 * MIB;

impl Default for Ceilings {
    fn default() -> Self {
        Ceilings {
            timeout: DEFAULT_CEILING_TIMEOUT,
            fuel: DEFAULT_CEILING_FUEL,
            memory_bytes: DEFAULT_CEILING_MEMORY_BYTES,
            output_bytes: DEFAULT_CEILING_OUTPUT_BYTES,
        }
    }
}

/// Limits the user set explicitly; they override the skill's own and are
/// not clamped (they are the user's word).
#[derive(Debug, Clone, Default)]
#[deny(missing_docs)]
pub struct LimitOverrides {
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// CPU budget, in fuel units.
    pub fuel: Option<u64>,
    /// Memory cap, in bytes.
    pub memory_bytes: Option<usize>,
    /// Cap on stdout, stderr and the result, each, in bytes.
    pub output_bytes: Option<usize>,
    /// Bytes a call may write into its `/tmp`.
    pub scratch_bytes: Option<u64>,
    /// Files, folders and links a call may create in its `/tmp`.
    pub scratch_entries: Option<u64>,
    /// Bytes a call may write into a writable workspace.
    pub workspace_bytes: Option<u64>,
    /// Files, folders and links a call may create in a writable workspace.
    pub workspace_entries: Option<u64>,
    /// Outgoing HTTP requests one call may send.
    pub net_requests: Option<u32>,
    /// Response bytes one call may receive over HTTP.
    pub net_response_bytes: Option<u64>,
}

/// The grants in force for a skill, and notes on requests not granted.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub grants: Grants,
    pub notes: Vec<String>,
}

/// The grants of a call of `skill` to a function with `effect`. A function
/// declared `read` gets the workspace read-only even when the skill holds
/// a write grant: the declared effect is enforced, not trusted.
pub fn grants(skill: &Skill, policy: &UserPolicy, effect: Option<Effect>) -> Resolved {
    let mut notes = Vec::new();
    let requested = skill
        .manifest
        .as_ref()
        .map(|m| m.grants.clone())
        .unwrap_or_default();
    let workspace = match (requested.workspace, &policy.workspace) {
        (WorkspaceAccess::None, Some(_)) => {
            notes.push(format!(
                "skill `{}` does not request the workspace, so it is not mounted",
                skill.name()
            ));
            None
        }
        (_, None) => {
            if requested.workspace != WorkspaceAccess::None {
                notes.push(format!(
                    "skill `{}` requests the workspace; none was given (--workspace DIR)",
                    skill.name()
                ));
            }
            None
        }
        (access, Some(dir)) => {
            let wants_write = access == WorkspaceAccess::Write;
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

/// Refuses an `--allow-net` grant naming a skill that is not loaded (most
/// often a typo, which would otherwise silently grant nothing).
pub fn check_net_grants(catalog: &Catalog, policy: &UserPolicy) -> Result<(), String> {
    match policy
        .allow_net
        .iter()
        .find(|g| catalog.get(&g.skill).is_none())
    {
        Some(g) => Err(format!(
            "--allow-net {}:{}: no skill named `{}` is loaded",
            g.skill, g.rule, g.skill
        )),
        None => Ok(()),
    }
}

/// Refuses a bare `--allow-env KEY` that more than one skill requests: the
/// user must say which skill gets it. Also refuses a grant naming a skill
/// that is not loaded, which is most often a typo.
pub fn check_env_grants(catalog: &Catalog, policy: &UserPolicy) -> Result<(), String> {
    for grant in &policy.allow_env {
        match &grant.skill {
            Some(skill) if catalog.get(skill).is_none() => {
                return Err(format!(
                    "--allow-env {skill}:{}: no skill named `{skill}` is loaded",
                    grant.key
                ));
            }
            Some(_) => {}
            None => {
                let requesters: Vec<&str> = catalog
                    .skills()
                    .filter(|s| {
                        s.manifest
                            .as_ref()
                            .is_some_and(|m| m.grants.env.contains(&grant.key))
                    })
                    .map(|s| s.name())
                    .collect();
                if requesters.len() > 1 {
                    return Err(format!(
                        "--allow-env {key}: {} skills request {key} ({}); give it to one with --allow-env SKILL:{key}",
                        requesters.len(),
                        requesters.join(", "),
                        key = grant.key
                    ));
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
pub fn check_write_grant(policy: &UserPolicy, protected: &[HostState]) -> Result<(), String> {
    let (Some(workspace), true) = (&policy.workspace, policy.allow_write) else {
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
            return Err(format!(
                "--allow-write refused: the workspace {relation} {} ({}). A tool with write access \
                 there could change code the host runs. Choose a workspace that does not overlap it, \
                 drop --allow-write, or move that folder (for the cache: SKILLBOX_CACHE_DIR; for \
                 the audit log: --audit FILE).",
                state.what,
                state.path.display()
            ));
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

/// Limits for a call of `class`: the class defaults, then the skill's
/// manifest clamped to the user's ceilings, then the user's overrides.
/// Returns a note for every request that was clamped.
pub fn limits(
    skill: &Skill,
    class: SideEffect,
    policy: &UserPolicy,
    overrides: &LimitOverrides,
) -> (Limits, Vec<String>) {
    let mut limits = Limits::for_class(class);
    let mut notes = Vec::new();
    if let Some(m) = skill.manifest.as_ref().map(|m| &m.limits) {
        notes = apply_requests(&mut limits, m, &policy.ceilings)
            .into_iter()
            .map(|c| format!("skill `{}` {c}", skill.name()))
            .collect();
    }
    overrides.apply(&mut limits);
    (limits, notes)
}

/// Applies a manifest's limit requests, clamped; returns what was clamped.
pub fn apply_requests(limits: &mut Limits, m: &ManifestLimits, ceilings: &Ceilings) -> Vec<String> {
    let mut clamped = Vec::new();
    let mut clamp = |name: &str, asked: u128, ceiling: u128, unit: &str| -> u128 {
        if asked > ceiling {
            clamped.push(format!(
                "asks for {name} {asked}{unit}; clamped to the ceiling {ceiling}{unit} (the user can raise it with --ceiling-{name})"
            ));
            ceiling
        } else {
            asked
        }
    };
    if let Some(ms) = m.timeout_ms {
        let ms = clamp("timeout-ms", ms.into(), ceilings.timeout.as_millis(), " ms");
        limits.timeout = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    }
    if let Some(fuel) = m.fuel {
        limits.fuel = clamp("fuel", fuel.into(), ceilings.fuel.into(), "") as u64;
    }
    if let Some(mib) = m.memory_mib {
        let ceiling_mib = (ceilings.memory_bytes / MIB) as u128;
        let mib = clamp("memory-mib", mib.into(), ceiling_mib, " MiB");
        limits.memory_bytes = usize::try_from(mib)
            .ok()
            .and_then(|m| m.checked_mul(MIB))
            .unwrap_or(ceilings.memory_bytes);
    }
    if let Some(bytes) = m.output_bytes {
        let bytes = clamp(
            "output-bytes",
            bytes as u128,
            ceilings.output_bytes as u128,
            " bytes",
        );
        limits.output_bytes = usize::try_from(bytes).unwrap_or(ceilings.output_bytes);
        limits.result_bytes = limits.output_bytes;
    }
    clamped
}

impl LimitOverrides {
    pub fn apply(&self, limits: &mut Limits) {
        if let Some(t) = self.timeout {
            limits.timeout = t;
        }
        if let Some(f) = self.fuel {
            limits.fuel = f;
        }
        if let Some(m) = self.memory_bytes {
            limits.memory_bytes = m;
        }
        if let Some(o) = self.output_bytes {
            limits.output_bytes = o;
            limits.result_bytes = o;
        }
        if let Some(b) = self.scratch_bytes {
            limits.scratch_bytes = b;
        }
        if let Some(e) = self.scratch_entries {
            limits.scratch_entries = e;
        }
        if let Some(b) = self.workspace_bytes {
            limits.workspace_bytes = b;
        }
        if let Some(e) = self.workspace_entries {
            limits.workspace_entries = e;
        }
        if let Some(n) = self.net_requests {
            limits.net_requests = n;
        }
        if let Some(b) = self.net_response_bytes {
            limits.net_response_bytes = b;
        }
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

    #[test]
    fn requests_above_ceilings_are_clamped_and_reported() {
        let mut limits = Limits::default();
        let asked = ManifestLimits {
            timeout_ms: Some(3_600_000),
            fuel: Some(u64::MAX),
            memory_mib: Some(17_592_186_044_416),
            output_bytes: Some(100_000_000_000),
        };
        let ceilings = Ceilings::default();
        let notes = apply_requests(&mut limits, &asked, &ceilings);
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert_eq!(limits.timeout, ceilings.timeout);
        assert_eq!(limits.fuel, ceilings.fuel);
        assert_eq!(limits.memory_bytes, ceilings.memory_bytes);
        assert_eq!(limits.output_bytes, ceilings.output_bytes);
        assert!(notes[0].contains("--ceiling-timeout-ms"), "{}", notes[0]);
    }

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
            assert!(err.contains(&state.what), "{err}");
        }
        assert!(check_write_grant(&policy, &[elsewhere]).is_ok());
        let read_only = UserPolicy {
            allow_write: false,
            ..policy
        };
        assert!(check_write_grant(&read_only, &[inside]).is_ok());
    }
}
