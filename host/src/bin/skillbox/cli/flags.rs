//! Flags several commands share: grants, limits and skill sources.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use skillbox::{Builder, Skillbox};
use skillbox_sandbox::{MAX_MEMORY_BYTES, MIB};
use skillbox_skill::skill::SourceOptions;
use skillbox_skill::skill::policy::{
    Ceilings, EnvGrant, GrantFlag, GrantsError, LimitOverrides, NetGrant, SkillGrant, UserGrants,
    UserPolicy,
};

/// A flag that takes one of `names`, parsed with the library type's own
/// `FromStr`, so the library needs no command-line derive.
pub(super) fn one_of<T>(
    names: &'static [&'static str],
) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Debug,
{
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(names).map(|name| {
        name.parse::<T>()
            .expect("clap admits only the listed names")
    })
}

/// Grants and limits for commands that run guest code.
#[derive(Args, Debug)]
pub(super) struct SandboxFlags {
    /// Load compiled code from this folder, as `skillbox compile --cache
    /// DIR` filled it (default: $SKILLBOX_CACHE_DIR/components, else the
    /// user's cache folder). It may be read-only: what it lacks is
    /// compiled in memory.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Keep the compiled-code cache under this size, in MiB: the files
    /// used least recently are removed first (default: 2048).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub cache_max_mib: Option<u64>,
    /// Mount this folder at /workspace (read-only unless --allow-write, or
    /// a skill's own write grant).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Let the guest write to the workspace.
    #[arg(long, requires = "workspace")]
    pub allow_write: bool,
    /// Let tools write to the workspace, but never let anything reach it:
    /// their changes are staged, later calls see earlier ones (in one MCP
    /// session, one agent run), and each result says what would change.
    #[arg(long, requires = "workspace", conflicts_with = "read_only")]
    pub dry_run: bool,
    /// Serve only tools declared `read`: no write or destructive tools, no
    /// scripts, the workspace read-only, and run_code without network.
    #[arg(long, conflicts_with = "allow_write")]
    pub read_only: bool,
    /// Give an environment variable to the skill that requests it:
    /// SKILL:KEY for one skill, or a bare KEY when only one skill requests
    /// it (repeatable).
    #[arg(long, value_name = "SKILL:KEY")]
    pub allow_env: Vec<EnvGrant>,
    /// Let a skill reach a host over HTTP(S) where it requests it:
    /// SKILL:HOST[:PORT] (repeatable; without a port, 80 and 443). An
    /// internal address (loopback, private, link-local) is reachable only
    /// when named as an IP here. With --component, SKILL is not checked.
    #[arg(long, value_name = "SKILL:HOST[:PORT]")]
    pub allow_net: Vec<NetGrant>,
    /// Give a skill something whatever its skillbox.yaml asks, as
    /// `skillbox grant` does for good: SKILL:workspace=read|write|none,
    /// SKILL:net=HOST[:PORT], SKILL:env=KEY, or a limit
    /// (SKILL:timeout-ms=N, fuel, memory-mib, output-bytes). Repeatable.
    #[arg(long, value_name = "SKILL:WHAT=VALUE")]
    pub grant: Vec<GrantFlag>,
    /// Let a skill's scripts start a program of this host's, by name, in
    /// an OS sandbox with the call's workspace and limits: SKILL:NAME
    /// (repeatable; the same as --grant SKILL:program=NAME).
    #[arg(long, value_name = "SKILL:NAME", value_parser = program_flag)]
    pub allow_program: Vec<GrantFlag>,
    /// Ignore the grants kept in the user's configuration (grants.yaml,
    /// written by `skillbox grant`): only this command's flags grant.
    #[arg(long)]
    pub no_user_grants: bool,
    /// Outgoing HTTP requests one call may send (default: 16).
    #[arg(long, value_name = "N")]
    pub net_max_requests: Option<u32>,
    /// Response bytes one call may receive over HTTP, in MiB (default: 8).
    #[arg(long, value_name = "N")]
    pub net_max_response_mib: Option<u64>,
    /// Wall-clock limit in milliseconds (default: 10000 read, 30000 write, 60000 script).
    #[arg(long, value_name = "N")]
    pub timeout_ms: Option<u64>,
    /// CPU budget in fuel units, about one per instruction (default: 10^10).
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Memory cap in MiB (default: 64, at most 4096).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(MAX_MEMORY_BYTES / MIB) as u64))]
    pub memory_mib: Option<u64>,
    /// Cap on captured stdout, stderr and the result, each, in bytes (default: 1 MiB).
    #[arg(long, value_name = "N")]
    pub max_output_bytes: Option<usize>,
    /// Bytes a call may write into its /tmp, in MiB (default: 64).
    #[arg(long, value_name = "N")]
    pub scratch_quota_mib: Option<u64>,
    /// Files, folders and links a call may create in its /tmp (default: 10000).
    #[arg(long, value_name = "N")]
    pub scratch_quota_entries: Option<u64>,
    /// Bytes a call may write into a writable workspace, in MiB (default: 256).
    #[arg(long, value_name = "N")]
    pub workspace_quota_mib: Option<u64>,
    /// Files, folders and links a call may create in a writable workspace (default: 10000).
    #[arg(long, value_name = "N")]
    pub workspace_quota_entries: Option<u64>,
    /// The longest wall-clock limit a skill's manifest may ask for, in ms (default: 60000).
    #[arg(long, value_name = "N")]
    pub ceiling_timeout_ms: Option<u64>,
    /// The largest fuel budget a skill's manifest may ask for (default: 6*10^10).
    #[arg(long, value_name = "N")]
    pub ceiling_fuel: Option<u64>,
    /// The largest memory cap a skill's manifest may ask for, in MiB (default: 256).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(MAX_MEMORY_BYTES / MIB) as u64))]
    pub ceiling_memory_mib: Option<u64>,
    /// The largest output cap a skill's manifest may ask for, in bytes (default: 8 MiB).
    #[arg(long, value_name = "N")]
    pub ceiling_output_bytes: Option<usize>,
}

impl SandboxFlags {
    /// The user's policy, with the workspace checked to exist.
    pub(super) fn policy(&self) -> Result<UserPolicy, CliError> {
        if let Some(dir) = &self.workspace
            && !dir.is_dir()
        {
            return Err(CliError::Usage(format!(
                "--workspace {}: not a folder; pass an existing directory",
                dir.display()
            )));
        }
        let mut ceilings = Ceilings::default();
        if let Some(ms) = self.ceiling_timeout_ms {
            ceilings.timeout = Duration::from_millis(ms);
        }
        if let Some(fuel) = self.ceiling_fuel {
            ceilings.fuel = fuel;
        }
        if let Some(mib) = self.ceiling_memory_mib {
            ceilings.memory_bytes = mib as usize * MIB;
        }
        if let Some(bytes) = self.ceiling_output_bytes {
            ceilings.output_bytes = bytes;
        }
        Ok(UserPolicy {
            workspace: self.workspace.clone(),
            allow_write: self.allow_write || self.dry_run,
            allow_env: self.allow_env.clone(),
            allow_net: self.allow_net.clone(),
            ceilings,
            skill_grants: self.skill_grants()?,
        })
    }

    /// What the user gives each skill: the grants file (unless
    /// --no-user-grants), then the --grant flags.
    fn skill_grants(&self) -> Result<BTreeMap<String, Vec<SkillGrant>>, CliError> {
        let mut grants: BTreeMap<String, Vec<SkillGrant>> = BTreeMap::new();
        if let (false, Some(file)) = (self.no_user_grants, UserGrants::default_path()) {
            for (skill, grant) in UserGrants::load(&file).map_err(grants_error)?.skills {
                grants.entry(skill).or_default().push(grant);
            }
        }
        for flag in self.grant.iter().chain(&self.allow_program) {
            grants
                .entry(flag.skill.clone())
                .or_default()
                .push(flag.grant.clone());
        }
        Ok(grants)
    }

    /// A host builder for a component file the user names: no skills,
    /// and the grants and limits of the flags. Such a component has no
    /// skill, so an environment grant for a skill is a mistake.
    pub(super) fn bare_builder(&self) -> Result<Builder, CliError> {
        let policy = self.policy()?;
        if let Some(g) = policy.allow_env.iter().find(|g| g.skill.is_some()) {
            return Err(CliError::Usage(format!(
                "--allow-env {}:{}: a bare component has no skill; pass --allow-env {}",
                g.skill.as_deref().unwrap_or_default(),
                g.key,
                g.key
            )));
        }
        self.grants_onto(Skillbox::builder())
    }

    pub(super) fn overrides(&self) -> LimitOverrides {
        let mib = |m: u64| m.saturating_mul(MIB as u64);
        let mut o = LimitOverrides::default();
        o.timeout = self.timeout_ms.map(Duration::from_millis);
        o.fuel = self.fuel;
        o.memory_bytes = self.memory_mib.map(|m| m as usize * MIB);
        o.output_bytes = self.max_output_bytes;
        o.scratch_bytes = self.scratch_quota_mib.map(mib);
        o.scratch_entries = self.scratch_quota_entries;
        o.workspace_bytes = self.workspace_quota_mib.map(mib);
        o.workspace_entries = self.workspace_quota_entries;
        o.net_requests = self.net_max_requests;
        o.net_response_bytes = self.net_max_response_mib.map(mib);
        o
    }

    /// A host builder with the user's sources, grants and limits: the
    /// skills a `skillbox` command sees, and nothing granted beyond the
    /// flags.
    pub(super) fn builder(&self, sources: &SourceFlags) -> Result<Builder, CliError> {
        self.grants_onto(sources.apply(Skillbox::builder()))
    }

    /// The flags' grants, limits and host settings, onto `builder`.
    fn grants_onto(&self, builder: Builder) -> Result<Builder, CliError> {
        let policy = self.policy()?;
        let mut builder = builder.ceilings(policy.ceilings).limits(self.overrides());
        if self.read_only {
            builder = builder.read_only();
        }
        if self.dry_run {
            builder = builder.dry_run();
        }
        if let Some(dir) = &self.cache {
            builder = builder.cache_dir(dir);
        }
        if let Some(mib) = self.cache_max_mib {
            builder = builder.cache_max_bytes(mib.saturating_mul(MIB as u64));
        }
        builder = match (policy.workspace, policy.allow_write) {
            (Some(dir), true) => builder.writable_workspace(dir),
            (Some(dir), false) => builder.workspace(dir),
            (None, _) => builder,
        };
        for grant in policy.allow_env {
            builder = builder.allow_env(grant);
        }
        for grant in policy.allow_net {
            builder = builder.allow_net(grant);
        }
        for (skill, grants) in policy.skill_grants {
            for grant in grants {
                builder = builder.grant(skill.clone(), grant);
            }
        }
        Ok(builder)
    }
}

/// `--allow-program SKILL:NAME`, as the grant it stands for.
fn program_flag(text: &str) -> Result<GrantFlag, String> {
    let (skill, name) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not SKILL:NAME (for example pdf:pdftoppm)"))?;
    format!("{skill}:program={name}").parse()
}

/// A grants file that cannot be used: one the user must fix is a usage
/// error (exit 2), one that cannot be read or written is not (exit 1).
pub(super) fn grants_error(e: GrantsError) -> CliError {
    match e {
        GrantsError::Invalid { .. } | GrantsError::NoFolder => CliError::Usage(e.to_string()),
        e => CliError::Other(e.into()),
    }
}

/// Where the audit log goes, for commands that serve many calls.
#[derive(Args, Debug)]
pub(super) struct AuditFlags {
    /// Append one JSON line per tool call to this file (default: the
    /// user's state folder; /dev/stdout for a log pipeline over HTTP).
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Do not write an audit log.
    #[arg(long, conflicts_with = "audit")]
    pub no_audit: bool,
}

impl AuditFlags {
    /// The file named, else the default one, unless there is to be none.
    pub(super) fn apply(&self, builder: Builder) -> Builder {
        match (&self.audit, self.no_audit) {
            (Some(file), _) => builder.audit_log(file),
            (None, false) => builder.default_audit_log(),
            (None, true) => builder,
        }
    }
}

/// Where skills are found.
#[derive(Args, Debug, Clone)]
pub(super) struct SourceFlags {
    /// Also load the skills in this folder (repeatable; highest precedence).
    #[arg(long = "skills", value_name = "DIR")]
    pub skills: Vec<PathBuf>,
    /// Load the project's skills (./.agents/skills, ./.claude/skills).
    #[arg(long)]
    pub trust_project: bool,
    /// Serve only this skill (repeatable); the others are not loaded.
    #[arg(long = "skill", value_name = "NAME")]
    pub only: Vec<String>,
    /// Never serve this skill (repeatable).
    #[arg(long = "exclude-skill", value_name = "NAME")]
    pub exclude: Vec<String>,
    /// Skills taken from one source at most (default: 10000).
    #[arg(long, value_name = "N")]
    pub max_skills: Option<usize>,
    /// Directory entries examined in one source at most (default: 500000).
    #[arg(long, value_name = "N")]
    pub max_entries: Option<usize>,
}

impl SourceFlags {
    /// Adds these sources to a host builder: the installed skills, then
    /// each `--skills` folder (the later, the higher its precedence).
    pub(super) fn apply(&self, builder: Builder) -> Builder {
        let defaults = skillbox_skill::skill::discover::Limits::default();
        let builder = if self.trust_project {
            builder.trust_project_skills()
        } else {
            builder.installed_skills()
        };
        let mut builder = builder.discovery_limits(
            self.max_skills.unwrap_or(defaults.max_skills),
            self.max_entries.unwrap_or(defaults.max_entries),
        );
        for dir in &self.skills {
            builder = builder.skills_dir(dir.clone());
        }
        for name in &self.only {
            builder = builder.only_skill(name.clone());
        }
        for name in &self.exclude {
            builder = builder.exclude_skill(name.clone());
        }
        builder
    }

    /// The sources as the catalog reads them, for commands that list or
    /// compile skills without serving them.
    pub(super) fn options(&self) -> SourceOptions {
        let defaults = skillbox_skill::skill::discover::Limits::default();
        SourceOptions {
            only: self.only.clone(),
            exclude: self.exclude.clone(),
            limits: skillbox_skill::skill::discover::Limits {
                max_skills: self.max_skills.unwrap_or(defaults.max_skills),
                max_entries: self.max_entries.unwrap_or(defaults.max_entries),
                ..defaults
            },
            ..SourceOptions::from_environment(self.skills.clone(), self.trust_project)
        }
    }
}

/// Says on stderr what was settled for the workspace before anything ran.
pub(super) fn announce_recovery(skillbox: &Skillbox) {
    for message in skillbox.recovered() {
        eprintln!("skillbox: {message}");
    }
}

/// Says on stderr what a call did to the workspace.
pub(super) fn print_workspace(changes: Option<&skillbox::WorkspaceChanges>) {
    let Some(changes) = changes else { return };
    match changes.status {
        skillbox::WorkspaceStatus::Committed if !changes.changes.is_empty() => {
            eprintln!("workspace: committed {}", changes.changes.summary());
        }
        skillbox::WorkspaceStatus::Committed => return,
        _ => {
            if let Some(note) = changes.note() {
                eprintln!("{note}");
            }
            return;
        }
    }
    for line in changes.changes.lines() {
        eprintln!("  {line}");
    }
}
