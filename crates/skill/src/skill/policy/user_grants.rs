//! What the user gives one skill, kept with the user and not in the
//! skill's folder (where a `skillbox.yaml` would break an installed
//! skill's lock): `grants.yaml` in the user's configuration folder,
//! edited with `skillbox grant`, and `--grant` on the command line.
//!
//! A user grant is the user's word on its own: it needs no request in the
//! skill's manifest and no `--allow-*` flag. A workspace grant decides the
//! skill's access outright (`none` keeps a skill that asks away from the
//! workspace); hosts and environment keys are added to what the skill
//! asks for and the flags give; limits replace the manifest's, unclamped.
//! A `--read-only` server and a function declared `read` still get the
//! workspace read-only.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sandbox::NetRule;
use crate::skill::manifest::{ManifestLimits, WorkspaceAccess};

/// The file in the user's configuration folder.
pub const GRANTS_FILE: &str = "grants.yaml";

/// The largest grants file read: far more than any user writes.
const MAX_GRANTS_BYTES: u64 = 1024 * 1024;

const HEADER: &str = "# What you give each skill, beyond what its skillbox.yaml asks for.\n\
# Edit it with `skillbox grant SKILL ...`; list it with `skillbox grant --list`.\n";

/// What the user gives one skill.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct SkillGrant {
    /// The folder of the skill the user gave this to, as the catalog
    /// found it (`skillbox grant` records it). A skill of the same name
    /// from another folder (a project skill, `--skills DIR`, a different
    /// install) gets nothing of it. `None` for a grant by name for one
    /// command (`--grant`, the embedding API), which must name a loaded
    /// skill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<PathBuf>,
    /// The skill's workspace access, whatever its manifest asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceAccess>,
    /// Hosts it may reach, `host[:port]` (without a port: 80 and 443).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
    /// Environment variables it gets from the host's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Programs of the host's its scripts may start, by name (each runs
    /// in the OS sandbox with the call's grants and limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<String>,
    /// Limits that replace the manifest's (the user's word; not clamped).
    #[serde(default, skip_serializing_if = "ManifestLimits::is_empty")]
    pub limits: ManifestLimits,
}

impl SkillGrant {
    /// Whether it gives nothing (where it is bound does not count).
    pub fn is_empty(&self) -> bool {
        self.workspace.is_none()
            && self.network.is_empty()
            && self.env.is_empty()
            && self.programs.is_empty()
            && self.limits.is_empty()
    }

    /// Why this grant cannot be used, for a person: a host that is not
    /// `host[:port]`, an environment key that is not a variable name.
    pub fn check(&self) -> Result<(), String> {
        for host in &self.network {
            if host == "*" {
                return Err(
                    "network `*` is not a grant: name each host the skill may reach \
                     (host[:port])"
                        .into(),
                );
            }
            host.parse::<NetRule>()
                .map_err(|why| format!("network `{host}`: {why}"))?;
        }
        for key in &self.env {
            if !is_env_key(key) {
                return Err(format!(
                    "environment key `{key}` is not a variable name (like GITHUB_TOKEN)"
                ));
            }
        }
        for name in &self.programs {
            super::programs::check_name(name)?;
        }
        let max_mib = (crate::sandbox::MAX_MEMORY_BYTES / crate::sandbox::MIB) as u64;
        if let Some(mib) = self.limits.memory_mib
            && !(1..=max_mib).contains(&mib)
        {
            return Err(format!("memory-mib {mib} is not between 1 and {max_mib}"));
        }
        let zero = [
            ("timeout-ms", self.limits.timeout_ms),
            ("fuel", self.limits.fuel),
            ("output-bytes", self.limits.output_bytes.map(|b| b as u64)),
        ]
        .into_iter()
        .find(|(_, value)| *value == Some(0));
        if let Some((name, _)) = zero {
            return Err(format!(
                "{name} 0 would stop every call; give a positive number"
            ));
        }
        Ok(())
    }

    /// The hosts, parsed ([`SkillGrant::check`] passed).
    pub fn network_rules(&self) -> Vec<NetRule> {
        self.network.iter().filter_map(|h| h.parse().ok()).collect()
    }

    /// Adds `other` to this grant: its workspace and limits replace, its
    /// hosts and keys are added.
    pub fn merge(&mut self, other: &SkillGrant) {
        if other.folder.is_some() {
            self.folder = other.folder.clone();
        }
        if other.workspace.is_some() {
            self.workspace = other.workspace;
        }
        // Hosts are kept as their rules spell them, so one host is one
        // entry however it was typed.
        for rule in other.network_rules() {
            if !self.network_rules().contains(&rule) {
                self.network.push(rule.to_string());
            }
        }
        for key in &other.env {
            if !self.env.contains(key) {
                self.env.push(key.clone());
            }
        }
        for name in &other.programs {
            if !self.programs.contains(name) {
                self.programs.push(name.clone());
            }
        }
        let (mine, theirs) = (&mut self.limits, &other.limits);
        mine.timeout_ms = theirs.timeout_ms.or(mine.timeout_ms);
        mine.fuel = theirs.fuel.or(mine.fuel);
        mine.memory_mib = theirs.memory_mib.or(mine.memory_mib);
        mine.output_bytes = theirs.output_bytes.or(mine.output_bytes);
    }

    /// Takes back the hosts and keys `other` names, hosts compared as
    /// rules (`API.example.com` is `api.example.com`); returns how many
    /// were taken back.
    pub fn take_back(&mut self, other: &SkillGrant) -> usize {
        let before = self.network.len() + self.env.len() + self.programs.len();
        let named: Vec<NetRule> = other.network_rules();
        self.network.retain(|host| {
            host.parse::<NetRule>()
                .map_or(true, |rule| !named.contains(&rule))
        });
        self.env.retain(|key| !other.env.contains(key));
        self.programs.retain(|name| !other.programs.contains(name));
        before - self.network.len() - self.env.len() - self.programs.len()
    }

    /// One short phrase per thing given, for lists and notes.
    pub fn phrases(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(access) = self.workspace {
            out.push(format!("workspace {}", access.as_str()));
        }
        if !self.network.is_empty() {
            out.push(format!("network {}", self.network.join(", ")));
        }
        if !self.env.is_empty() {
            out.push(format!("env {}", self.env.join(", ")));
        }
        if !self.programs.is_empty() {
            out.push(format!("programs {}", self.programs.join(", ")));
        }
        for (name, value) in self.limits.named() {
            if let Some(value) = value {
                out.push(format!("{} {value}", name.replace('_', "-")));
            }
        }
        out
    }
}

/// Whether `key` can name an environment variable: letters, digits and
/// `_`, not starting with a digit.
pub(super) fn is_env_key(key: &str) -> bool {
    !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit())
}

/// One `--grant SKILL:WHAT=VALUE` flag: `workspace=read|write|none`,
/// `net=HOST[:PORT]`, `env=KEY`, `program=NAME`, or a limit (`timeout-ms`, `fuel`,
/// `memory-mib`, `output-bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantFlag {
    pub skill: String,
    pub grant: SkillGrant,
}

impl std::str::FromStr for GrantFlag {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "`{text}` is not SKILL:WHAT=VALUE, where WHAT is workspace (read, write or \
                 none), net (HOST[:PORT]), env (KEY), program (NAME), timeout-ms, fuel, \
                 memory-mib or output-bytes; for example docx:workspace=write"
            )
        };
        let (skill, rest) = text.split_once(':').ok_or_else(usage)?;
        let (what, value) = rest.split_once('=').ok_or_else(usage)?;
        if skill.is_empty() || value.is_empty() {
            return Err(usage());
        }
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("`{text}`: {what} takes a whole number"))
        };
        let mut grant = SkillGrant::default();
        match what {
            "workspace" => grant.workspace = Some(value.parse()?),
            "net" => grant.network.push(value.to_string()),
            "env" => grant.env.push(value.to_string()),
            "program" => grant.programs.push(value.to_string()),
            "timeout-ms" => grant.limits.timeout_ms = Some(number()?),
            "fuel" => grant.limits.fuel = Some(number()?),
            "memory-mib" => grant.limits.memory_mib = Some(number()?),
            "output-bytes" => grant.limits.output_bytes = Some(number()? as usize),
            _ => return Err(usage()),
        }
        grant.check().map_err(|why| format!("`{text}`: {why}"))?;
        Ok(GrantFlag {
            skill: skill.to_string(),
            grant,
        })
    }
}

/// Every skill's grant, as the file keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserGrants {
    #[serde(default)]
    pub skills: BTreeMap<String, SkillGrant>,
}

/// The grants file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum GrantsError {
    #[error(
        "the grants file {} is not valid: {why}. Fix it, or remove it to start again \
         (skillbox grant rewrites it).",
        file.display()
    )]
    Invalid { file: PathBuf, why: String },
    #[error("cannot read the grants file {}: {why}", file.display())]
    Read { file: PathBuf, why: String },
    #[error("cannot write the grants file {}: {why}", file.display())]
    Write { file: PathBuf, why: String },
    #[error(
        "no configuration folder to keep grants in: set HOME, XDG_CONFIG_HOME or \
         SKILLBOX_CONFIG_DIR"
    )]
    NoFolder,
}

impl UserGrants {
    /// Where the user's grants live: `grants.yaml` in the configuration
    /// folder.
    pub fn default_path() -> Option<PathBuf> {
        crate::dirs::config_dir().map(|dir| dir.join(GRANTS_FILE))
    }

    /// The grants in `file`; none when it does not exist.
    pub fn load(file: &Path) -> Result<UserGrants, GrantsError> {
        let read_error = |why: String| GrantsError::Read {
            file: file.to_path_buf(),
            why,
        };
        let opened = match std::fs::File::open(file) {
            Ok(opened) => opened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(UserGrants::default());
            }
            Err(e) => return Err(read_error(e.to_string())),
        };
        let meta = opened.metadata().map_err(|e| read_error(e.to_string()))?;
        if !meta.is_file() {
            return Err(read_error("it is not a regular file".into()));
        }
        let mut bytes = Vec::new();
        opened
            .take(MAX_GRANTS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| read_error(e.to_string()))?;
        let invalid = |why: String| GrantsError::Invalid {
            file: file.to_path_buf(),
            why,
        };
        if bytes.len() as u64 > MAX_GRANTS_BYTES {
            return Err(invalid("it is larger than 1 MiB".into()));
        }
        let text = String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text".into()))?;
        if text.trim().is_empty() {
            return Ok(UserGrants::default());
        }
        let grants: UserGrants =
            serde_norway::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        for (skill, grant) in &grants.skills {
            grant
                .check()
                .map_err(|why| invalid(format!("skill `{skill}`: {why}")))?;
            if grant.folder.is_none() {
                return Err(invalid(format!(
                    "skill `{skill}` has no `folder:` naming the skill it is for (skillbox \
                     grant records it, so a skill that only shares the name gets nothing)"
                )));
            }
        }
        Ok(grants)
    }

    /// Changes the grants in `file` with `change`, one command at a time
    /// (a lock beside the file), and writes the result whole or not at
    /// all. Returns the grants as written.
    pub fn edit(
        file: &Path,
        change: impl FnOnce(&mut UserGrants),
    ) -> Result<UserGrants, GrantsError> {
        let write_error = |why: String| GrantsError::Write {
            file: file.to_path_buf(),
            why,
        };
        let dir = file.parent().ok_or(GrantsError::NoFolder)?;
        std::fs::create_dir_all(dir).map_err(|e| write_error(e.to_string()))?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!(".{GRANTS_FILE}.lock")))
            .map_err(|e| write_error(e.to_string()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| write_error(e.to_string()))?;
        let mut grants = UserGrants::load(file)?;
        change(&mut grants);
        grants.skills.retain(|_, grant| !grant.is_empty());
        let body = serde_norway::to_string(&grants).map_err(|e| write_error(e.to_string()))?;
        crate::skill::lock::write_atomically(file, format!("{HEADER}{body}").as_bytes())
            .map_err(|e| write_error(e.to_string()))?;
        Ok(grants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_each_kind_and_refuse_the_rest() {
        let flag = |text: &str| text.parse::<GrantFlag>();
        assert_eq!(
            flag("docx:workspace=write").unwrap().grant.workspace,
            Some(WorkspaceAccess::Write)
        );
        assert_eq!(
            flag("web:net=api.example.com:443").unwrap().grant.network,
            ["api.example.com:443"]
        );
        assert_eq!(flag("gh:env=GH_TOKEN").unwrap().grant.env, ["GH_TOKEN"]);
        assert_eq!(flag("pdf:fuel=7").unwrap().grant.limits.fuel, Some(7));
        for bad in [
            "docx",
            "docx:workspace",
            ":workspace=write",
            "docx:workspace=all",
            "web:net=*",
            "gh:env=1X",
            "pdf:fuel=lots",
            "pdf:colour=blue",
        ] {
            assert!(flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn edits_land_whole_and_a_bad_file_is_named_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config/grants.yaml");
        assert_eq!(UserGrants::load(&file).unwrap(), UserGrants::default());
        let written = UserGrants::edit(&file, |g| {
            g.skills
                .entry("docx".into())
                .or_default()
                .merge(&SkillGrant {
                    folder: Some("/skills/docx".into()),
                    workspace: Some(WorkspaceAccess::Write),
                    env: vec!["TOKEN".into()],
                    ..SkillGrant::default()
                });
        })
        .unwrap();
        assert_eq!(UserGrants::load(&file).unwrap(), written);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("# What you give each skill"), "{text}");
        assert!(text.contains("workspace: write"), "{text}");

        // An empty grant is removed, not kept as an empty entry.
        let emptied = UserGrants::edit(&file, |g| {
            g.skills.insert("docx".into(), SkillGrant::default());
        })
        .unwrap();
        assert!(emptied.skills.is_empty());

        std::fs::write(&file, "skills:\n  docx:\n    workspace: sometimes\n").unwrap();
        let error = UserGrants::load(&file).unwrap_err().to_string();
        assert!(error.contains("is not valid"), "{error}");
        assert!(UserGrants::edit(&file, |_| {}).is_err());
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("sometimes")
        );
        std::fs::write(&file, "skills:\n  web:\n    network: ['*']\n").unwrap();
        let error = UserGrants::load(&file).unwrap_err().to_string();
        assert!(error.contains("skill `web`: network `*`"), "{error}");

        // A grant names the folder of the skill it is for.
        std::fs::write(&file, "skills:\n  web:\n    workspace: read\n").unwrap();
        let error = UserGrants::load(&file).unwrap_err().to_string();
        assert!(error.contains("has no `folder:`"), "{error}");

        // Past 1 MiB the file is refused, not read on.
        let padding = format!("#{}\n", "x".repeat(MAX_GRANTS_BYTES as usize));
        std::fs::write(&file, padding).unwrap();
        let error = UserGrants::load(&file).unwrap_err().to_string();
        assert!(error.contains("larger than 1 MiB"), "{error}");
    }

    #[test]
    fn limits_out_of_range_are_refused() {
        let mut grant = SkillGrant::default();
        grant.limits.memory_mib = Some(4097);
        assert!(grant.check().unwrap_err().contains("between 1 and 4096"));
        grant.limits.memory_mib = Some(4096);
        assert!(grant.check().is_ok());
        for zero in [
            "pdf:timeout-ms=0",
            "pdf:fuel=0",
            "pdf:output-bytes=0",
            "pdf:memory-mib=0",
        ] {
            assert!(zero.parse::<GrantFlag>().is_err(), "{zero}");
        }
    }

    /// Commands that edit at once each land: none writes over another's
    /// change.
    #[test]
    fn edits_at_once_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("grants.yaml");
        std::thread::scope(|scope| {
            for n in 0..8 {
                let file = &file;
                scope.spawn(move || {
                    UserGrants::edit(file, |g| {
                        let host = SkillGrant {
                            folder: Some("/skills/web".into()),
                            network: vec![format!("h{n}.example.com")],
                            ..SkillGrant::default()
                        };
                        g.skills.entry("web".into()).or_default().merge(&host);
                    })
                    .unwrap();
                });
            }
        });
        let grants = UserGrants::load(&file).unwrap();
        assert_eq!(grants.skills["web"].network.len(), 8, "{grants:?}");
    }

    #[test]
    fn hosts_are_kept_and_taken_back_as_rules() {
        let named = |hosts: &[&str]| SkillGrant {
            network: hosts.iter().map(|h| h.to_string()).collect(),
            ..SkillGrant::default()
        };
        let mut grant = SkillGrant::default();
        grant.merge(&named(&[
            "API.example.com",
            "api.example.com",
            "b.example.com:8443",
        ]));
        assert_eq!(grant.network, ["api.example.com", "b.example.com:8443"]);
        assert_eq!(grant.take_back(&named(&["Api.Example.com"])), 1);
        assert_eq!(grant.take_back(&named(&["b.example.com"])), 0);
        assert_eq!(grant.network, ["b.example.com:8443"]);
    }
}
