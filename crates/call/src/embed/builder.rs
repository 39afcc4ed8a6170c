//! [`Builder`]: a [`Skillbox`] from skill folders and the user's policy.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{BuildError, Skillbox};
use crate::audit::AuditLog;
use crate::sandbox::{DiskCache, EngineOptions, Sandbox};
use crate::skill::SourceOptions;
use crate::skill::policy::{Ceilings, EnvGrant, LimitOverrides, NetGrant, SkillGrant, UserPolicy};
use crate::{ConfirmPolicy, Host, HostOptions};

/// Where the host keeps something it owns (the compiled-code cache, the
/// audit log): the user's default location, a folder or file of the
/// embedder's choosing, or nowhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Place {
    #[default]
    Default,
    At(PathBuf),
    Nowhere,
}

/// Configures a [`Skillbox`]. Start with [`Skillbox::builder`].
///
/// Nothing is granted unless a method here grants it: no workspace, no
/// environment variable, no network host. Skills come only from the
/// folders given with [`Builder::skills_dir`] unless
/// [`Builder::installed_skills`] adds the user's and the bundled ones.
#[derive(Debug, Clone)]
pub struct Builder {
    sources: SourceOptions,
    policy: UserPolicy,
    overrides: LimitOverrides,
    read_only: bool,
    dry_run: bool,
    confirm: ConfirmPolicy,
    max_concurrency: usize,
    max_per_client: Option<usize>,
    cache: Place,
    cache_max_bytes: u64,
    audit: Place,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            sources: SourceOptions::default(),
            policy: UserPolicy::default(),
            overrides: LimitOverrides::default(),
            read_only: false,
            dry_run: false,
            confirm: ConfirmPolicy::Never,
            max_concurrency: 8,
            max_per_client: None,
            cache: Place::Default,
            cache_max_bytes: crate::sandbox::DEFAULT_CACHE_MAX_BYTES,
            audit: Place::Nowhere,
        }
    }
}

impl Builder {
    /// Loads the skills in this folder (each subfolder with a `SKILL.md`).
    /// Folders given later take precedence over earlier ones when two hold
    /// a skill of the same name.
    pub fn skills_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sources.explicit.push(dir.into());
        self
    }

    /// Also loads the skills a `skillbox` command would: the bundled ones
    /// and the user's (`~/.skillbox/skills`, `~/.agents/skills`). The
    /// current folder's `.agents/skills` and `.claude/skills` are found but
    /// not loaded (a diagnostic says so) unless
    /// [`Builder::trust_project_skills`] is given too. Folders given with
    /// [`Builder::skills_dir`] still take precedence.
    pub fn installed_skills(self) -> Self {
        self.installed(false)
    }

    /// [`Builder::installed_skills`], and the current folder's project
    /// skills loaded as trusted (what `--trust-project` does).
    pub fn trust_project_skills(self) -> Self {
        self.installed(true)
    }

    fn installed(mut self, trust_project: bool) -> Self {
        let found = SourceOptions::from_environment(Vec::new(), trust_project);
        self.sources.home = found.home;
        self.sources.project = found.project;
        self.sources.system = found.system;
        self.sources.trust_project = trust_project;
        self
    }

    /// Serves only the skills named here (call once per skill).
    pub fn only_skill(mut self, name: impl Into<String>) -> Self {
        self.sources.only.push(name.into());
        self
    }

    /// Never serves the skill of this name.
    pub fn exclude_skill(mut self, name: impl Into<String>) -> Self {
        self.sources.exclude.push(name.into());
        self
    }

    /// Bounds on discovery in each source: skills taken, and directory
    /// entries examined (defaults: 10 000 and 500 000).
    pub fn discovery_limits(mut self, max_skills: usize, max_entries: usize) -> Self {
        self.sources.limits.max_skills = max_skills;
        self.sources.limits.max_entries = max_entries;
        self
    }

    /// Mounts `dir` read-only at `/workspace` for the skills that request
    /// it.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.policy.workspace = Some(dir.into());
        self.policy.allow_write = false;
        self
    }

    /// Mounts `dir` at `/workspace`, writable for the skills that request
    /// write access (functions declared `read` still get it read-only).
    /// [`Builder::build`] refuses a writable workspace that covers the
    /// host's own state (skill folders, cache, audit log).
    pub fn writable_workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.policy.workspace = Some(dir.into());
        self.policy.allow_write = true;
        self
    }

    /// Gives an environment variable to the skill that requests it
    /// (`"SKILL:KEY"`, or a bare `"KEY"` when one skill requests it).
    pub fn allow_env(mut self, grant: EnvGrant) -> Self {
        self.policy.allow_env.push(grant);
        self
    }

    /// Lets a skill reach a host over HTTP where its manifest requests it
    /// (`"SKILL:HOST[:PORT]"`).
    pub fn allow_net(mut self, grant: NetGrant) -> Self {
        self.policy.allow_net.push(grant);
        self
    }

    /// Gives the skill named `skill` what `grant` says, whatever its
    /// manifest asks: its workspace access outright (write needs no
    /// [`Builder::writable_workspace`], but a read-only host and functions
    /// declared `read` still read), hosts and environment keys added to
    /// what it asks, and limits that replace its own. A grant with a
    /// `folder` applies only to the skill loaded from that folder; one
    /// without must name a loaded skill, or [`Builder::build`] refuses it.
    /// Grants for one skill add up; a later workspace or limit replaces an
    /// earlier one.
    pub fn grant(mut self, skill: impl Into<String>, grant: SkillGrant) -> Self {
        self.policy.add_grant(skill.into(), grant);
        self
    }

    /// The most a skill's manifest may ask for (time, fuel, memory, output).
    pub fn ceilings(mut self, ceilings: Ceilings) -> Self {
        self.policy.ceilings = ceilings;
        self
    }

    /// Limits that replace every skill's own (the user's word; not clamped).
    pub fn limits(mut self, overrides: LimitOverrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// Runs dry: tools may write to the workspace, but only into a staging
    /// area; each result says what would have changed, and nothing ever
    /// reaches the workspace.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Serves only tools declared `read`: no writes, no scripts, and the
    /// workspace read-only.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Which calls a *model* must have confirmed by the user first (see
    /// the MCP server and the agent; calls made through [`Skillbox`]
    /// directly are the user's own). Default: [`ConfirmPolicy::Never`].
    pub fn confirm(mut self, policy: ConfirmPolicy) -> Self {
        self.confirm = policy;
        self
    }

    /// Calls that may run at once (default 8), and at most `per_client`
    /// of them for one client of a shared server (default: half).
    pub fn max_concurrency(mut self, total: usize, per_client: Option<usize>) -> Self {
        self.max_concurrency = total.max(1);
        self.max_per_client = per_client;
        self
    }

    /// Keeps compiled components in this folder instead of the user's
    /// cache folder (`$SKILLBOX_CACHE_DIR`, `$XDG_CACHE_HOME/skillbox`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache = Place::At(dir.into());
        self
    }

    /// Keeps the compiled-code cache under `bytes`: after each store, the
    /// files used least recently are removed until it fits (default:
    /// 2 GiB). Files no process loaded for 30 days go at any size.
    pub fn cache_max_bytes(mut self, bytes: u64) -> Self {
        self.cache_max_bytes = bytes;
        self
    }

    /// Compiles in memory only; nothing is written to disk.
    pub fn no_cache(mut self) -> Self {
        self.cache = Place::Nowhere;
        self
    }

    /// Appends one JSON line per call to this file. Without this (or
    /// [`Builder::default_audit_log`]) nothing is logged.
    pub fn audit_log(mut self, file: impl Into<PathBuf>) -> Self {
        self.audit = Place::At(file.into());
        self
    }

    /// Appends the audit log to the user's state folder, as the `skillbox`
    /// commands do (`$SKILLBOX_STATE_DIR`, `$XDG_STATE_HOME/skillbox`).
    pub fn default_audit_log(mut self) -> Self {
        self.audit = Place::Default;
        self
    }

    /// Builds the catalog, compiles nothing yet, and checks the user's
    /// grants against the skills: an unknown or ambiguous grant, or a
    /// write grant over the host's own state, is refused here, before
    /// anything runs. Reads every skill folder: call it off the async
    /// runtime's worker threads (or in `spawn_blocking`) when there are
    /// many skills.
    pub fn build(self) -> Result<Skillbox, BuildError> {
        if let Some(dir) = &self.policy.workspace
            && !dir.is_dir()
        {
            return Err(BuildError::Workspace {
                name: shown_name(dir),
            });
        }
        // What a call that died left for the workspace is settled before
        // anything runs: a commit with a journal is finished, a stage
        // without one dropped.
        let recovered = match &self.policy.workspace {
            Some(dir) => crate::sandbox::stage::recover(dir)
                .map_err(|e| BuildError::Recovery {
                    name: shown_name(dir),
                    reason: crate::sandbox::io_reason(&e),
                })?
                .iter()
                .map(|r| r.message())
                .collect(),
            None => Vec::new(),
        };
        let cache = match self.cache {
            Place::Default => DiskCache::default_location(),
            Place::At(dir) => Some(DiskCache::new(dir)),
            Place::Nowhere => None,
        }
        .map(|cache| cache.with_max_bytes(self.cache_max_bytes));
        let audit = match self.audit {
            Place::Default => AuditLog::default_path(),
            Place::At(file) => Some(file),
            Place::Nowhere => None,
        };
        let audit = audit
            .map(|path| {
                AuditLog::open(&path).map_err(|e| BuildError::AuditLog {
                    name: shown_name(&path),
                    reason: crate::sandbox::io_reason(&e),
                })
            })
            .transpose()?;
        let fingerprint = crate::skill::fingerprint::fingerprint_sources(&self.sources);
        let sandbox = Sandbox::with_options(&EngineOptions::default(), cache)?;
        let options = HostOptions {
            sources: self.sources,
            policy: self.policy,
            overrides: self.overrides,
            max_concurrency: self.max_concurrency,
            max_per_client: self
                .max_per_client
                .unwrap_or(self.max_concurrency / 2)
                .max(1),
            read_only: self.read_only,
            confirm: self.confirm,
            dry_run: self.dry_run,
        };
        let host = Host::new(options, Arc::new(sandbox), audit)?;
        Ok(Skillbox {
            host: Arc::new(host),
            recovered,
            fingerprint,
        })
    }
}

/// A path's last component: errors name what the embedder passed without
/// printing the host's folder layout.
fn shown_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
