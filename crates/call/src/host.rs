//! The state every caller shares: the catalog (swapped on reload), the
//! sandbox, resolved tools, the call limit and the audit log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde_json::Value;

use super::audit::{AuditLog, Record, now_rfc3339};
use super::metrics::Metrics;
use super::request::Target;
use super::slots::{CallSlots, Slot};
use super::trace::TraceContext;
use crate::sandbox::{PendingComponent, Sandbox, SandboxError};
use crate::skill::policy::{self, HostState, LimitOverrides, PolicyError, UserPolicy};
use crate::skill::tools::{self, SkillTool};
use crate::skill::{Catalog, Skill, SourceOptions};

/// How the host was configured: where skills come from and what the user
/// allows.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub sources: SourceOptions,
    pub policy: UserPolicy,
    pub overrides: LimitOverrides,
    /// Calls that may run at once; the rest wait.
    pub max_concurrency: usize,
    /// Calls one client may run at once (see [`Caller::principal`]).
    pub max_per_client: usize,
    /// Serve only `read` tools (no writes, no scripts; workspace read-only).
    pub read_only: bool,
    /// Which of a model's calls need the user's confirmation first.
    pub confirm: super::ConfirmPolicy,
    /// Nothing reaches the workspace: write-granted calls run staged, and
    /// their changes stay in the caller's [`super::DryRun`].
    pub dry_run: bool,
}

/// A skill's resolved tools, valid while its digests are unchanged.
struct ResolvedTools {
    /// SKILL.md's digest and the components' digests it was resolved from.
    digest: String,
    components: Vec<(String, String)>,
    tools: Arc<Vec<SkillTool>>,
    /// Script components by script name, described with the tools so a
    /// script run neither reads nor hashes its file again.
    scripts: Vec<(String, Arc<PendingComponent>)>,
    /// Why some of the skill's code could not be served (a component
    /// that changed, does not compile, …), for the error a caller sees.
    problems: Vec<String>,
}

pub struct Host {
    catalog: RwLock<Arc<Catalog>>,
    pub sandbox: Arc<Sandbox>,
    pub options: HostOptions,
    resolved: Mutex<HashMap<String, ResolvedTools>>,
    calls: CallSlots,
    audit: Option<AuditLog>,
    /// Counted where calls are audited, so the two always agree.
    pub metrics: Metrics,
    /// Staged calls waiting for the user's yes.
    pub(super) held: super::held::HeldCalls,
}

/// Context of one call, for the audit record.
pub(crate) struct CallRecord<'a> {
    pub client: Option<String>,
    pub tool: &'a str,
    pub skill: Option<&'a Skill>,
    pub component: Option<(&'a str, &'a str)>,
    pub grants: Option<String>,
    /// Size of the call's arguments as JSON text.
    pub argument_bytes: usize,
    /// Code run with `run_code`: its digest and size.
    pub code: Option<&'a CodeSeen>,
    pub idempotency_key: Option<String>,
    /// The distributed trace the call arrived in, if the client sent one.
    pub trace: Option<TraceContext>,
    /// Whether `tool` names a tool the catalog resolved (or a host tool),
    /// and so may be a metrics label; a client's made-up name may not.
    pub tool_resolved: bool,
    /// A script's exit code, once it has run.
    pub exit_code: Option<i32>,
    /// The programs it asked the host for, secrets redacted.
    pub programs: Vec<crate::sandbox::ProgramRun>,
}

/// What the audit keeps of code run with `run_code`.
#[derive(Debug, Clone)]
pub(crate) struct CodeSeen {
    /// `sha256:<hex>` of the code's UTF-8 bytes.
    pub digest: String,
    pub bytes: usize,
}

impl CodeSeen {
    /// The code `target` runs, if it is a `run_code` target.
    pub(crate) fn of(target: &Target) -> Option<Self> {
        match target {
            Target::Code { code, .. } => Some(CodeSeen {
                digest: crate::digest::sha256(code.as_bytes()),
                bytes: code.len(),
            }),
            _ => None,
        }
    }
}

impl Host {
    /// Builds the catalog and checks the user's policy against it: a bare
    /// `--allow-env` several skills request, and a write grant over the
    /// host's own state, are refused here, before anything runs.
    pub(crate) fn new(
        options: HostOptions,
        sandbox: Arc<Sandbox>,
        audit: Option<AuditLog>,
    ) -> Result<Self, PolicyError> {
        let catalog = Catalog::build_remembering(&options.sources, sandbox.digest_memo());
        // A host without skill sources serves only component files the
        // user names, which take every grant as given: there is no skill
        // to check a grant's skill against.
        if !options.sources.is_empty() {
            policy::check_env_grants(&catalog, &options.policy)?;
            policy::check_net_grants(&catalog, &options.policy)?;
            policy::check_skill_grants(&catalog, &options.policy)?;
        }
        let host = Host {
            catalog: RwLock::new(Arc::new(catalog)),
            sandbox,
            calls: CallSlots::new(options.max_concurrency, options.max_per_client),
            options,
            resolved: Mutex::new(HashMap::new()),
            audit,
            metrics: Metrics::new(),
            held: Default::default(),
        };
        // A read-only host writes nothing, whatever a grant says.
        if !host.options.read_only {
            policy::check_write_grant(&host.options.policy, &host.protected_state())?;
        }
        Ok(host)
    }

    /// Everything a write grant must not cover.
    pub(crate) fn protected_state(&self) -> Vec<HostState> {
        let mut out: Vec<HostState> = self
            .options
            .sources
            .sources()
            .into_iter()
            .map(|s| HostState {
                what: format!("the {} skills folder", s.kind.as_str()),
                path: s.root,
            })
            .collect();
        for skill in self.catalog().skills() {
            out.push(HostState {
                what: format!("the folder of skill `{}`", skill.name()),
                path: skill.dir.clone(),
            });
        }
        // The cache this host really loads from, which may not be the
        // default location.
        if let Some(cache) = self.sandbox.cache() {
            out.push(HostState {
                what: "the compiled-code cache".into(),
                path: cache.dir().to_path_buf(),
            });
        }
        // The state folder before the audit log: it holds the default log,
        // and it is what the user moves.
        if let Some(state) = crate::dirs::state_dir() {
            out.push(HostState {
                what: "the state folder".into(),
                path: state,
            });
        }
        if let Some(audit) = &self.audit {
            out.push(HostState {
                what: "the audit log".into(),
                path: audit.path().to_path_buf(),
            });
        }
        // Prepared packages and the runtimes: code other skills' scripts
        // import, with those skills' grants.
        if let Some(data) = crate::dirs::data_dir() {
            out.push(HostState {
                what: "the data folder (prepared packages and runtimes)".into(),
                path: data,
            });
        }
        // A skill that could write the user's grants or trusted keys could
        // give itself, or a signer, anything.
        if let Some(config) = crate::dirs::config_dir() {
            out.push(HostState {
                what: "the configuration folder (your grants and trusted keys)".into(),
                path: config,
            });
        }
        out
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Rebuilds the catalog from the sources and swaps it in; returns the
    /// new one. Reads every skill folder: call it off the async runtime.
    pub(crate) fn reload(&self) -> Arc<Catalog> {
        let fresh = Arc::new(Catalog::build_remembering(
            &self.options.sources,
            self.sandbox.digest_memo(),
        ));
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        fresh
    }

    /// [`Host::reload`] on a blocking thread.
    pub async fn reload_blocking(self: &Arc<Self>) -> Arc<Catalog> {
        let host = self.clone();
        match tokio::task::spawn_blocking(move || host.reload()).await {
            Ok(catalog) => catalog,
            Err(_) => self.catalog(),
        }
    }

    pub fn audit_path(&self) -> Option<&std::path::Path> {
        self.audit.as_ref().map(|a| a.path())
    }

    /// Whether the user's configuration serves this tool at all.
    pub fn serves(&self, tool: &SkillTool) -> bool {
        !self.options.read_only || tool.effect == crate::skill::Effect::Read
    }

    /// A skill's tools if they are resolved and current.
    fn cached_tools(&self, skill: &Skill) -> Option<Arc<Vec<SkillTool>>> {
        let resolved = self.lock_resolved();
        let hit = resolved.get(skill.name())?;
        (hit.digest == skill.digest && hit.components == skill.components)
            .then(|| hit.tools.clone())
    }

    /// The resolved tools of the skill named `name` in the current catalog,
    /// if they are resolved and current; never compiles.
    pub(crate) fn cached_tools_of(&self, name: &str) -> Option<Arc<Vec<SkillTool>>> {
        self.cached_tools(self.catalog().get(name)?)
    }

    /// The longest wall-clock limit any call can get under the user's
    /// policy: their override, else the larger of the ceiling and the
    /// longest class default.
    pub fn longest_call(&self) -> std::time::Duration {
        let policy = &self.options.policy;
        let granted = policy
            .all_grants()
            .filter_map(|g| g.limits.timeout_ms)
            .max()
            .map(std::time::Duration::from_millis)
            .unwrap_or_default();
        self.options.overrides.timeout.unwrap_or_else(|| {
            policy
                .ceilings
                .timeout
                .max(crate::sandbox::SideEffect::Script.default_timeout())
                .max(granted)
        })
    }

    /// A skill's tools, described on first use and again only when the
    /// skill changes; its components compile in the background. Reading
    /// and hashing the components blocks: async callers use
    /// [`Host::tools_of_blocking`].
    pub(crate) fn tools_of(&self, skill: &Skill) -> Arc<Vec<SkillTool>> {
        if let Some(hit) = self.cached_tools(skill) {
            return hit;
        }
        let resolution = tools::resolve(skill, &self.sandbox);
        let mut problems = Vec::new();
        for d in resolution.diagnostics.iter().filter(|d| d.is_error()) {
            tracing::warn!("{d}");
            problems.push(d.message.clone());
        }
        let tools = Arc::new(resolution.tools);
        self.lock_resolved().insert(
            skill.name().to_string(),
            ResolvedTools {
                digest: skill.digest.clone(),
                components: skill.components.clone(),
                tools: tools.clone(),
                scripts: resolution.scripts,
                problems,
            },
        );
        tools
    }

    /// The component of a skill's script (resolving the skill's code first
    /// if needed; call it off the async runtime).
    pub(crate) fn script_of(&self, skill: &Skill, script: &str) -> Option<Arc<PendingComponent>> {
        self.tools_of(skill);
        self.lock_resolved()
            .get(skill.name())
            .and_then(|r| r.scripts.iter().find(|(name, _)| name == script))
            .map(|(_, component)| component.clone())
    }

    /// Why the skill's last resolution could not serve all of its code.
    pub fn problems_of(&self, skill: &str) -> Vec<String> {
        self.lock_resolved()
            .get(skill)
            .map(|r| r.problems.clone())
            .unwrap_or_default()
    }

    /// [`Host::tools_of`] on a blocking thread, so a slow compile of one
    /// skill never stalls requests for the others.
    pub async fn tools_of_blocking(self: &Arc<Self>, skill: &Arc<Skill>) -> Arc<Vec<SkillTool>> {
        if let Some(hit) = self.cached_tools(skill) {
            return hit;
        }
        let (host, skill) = (self.clone(), skill.clone());
        tokio::task::spawn_blocking(move || host.tools_of(&skill))
            .await
            .unwrap_or_default()
    }

    /// The tools of each skill, in order. Skills not yet resolved are
    /// resolved on the blocking pool, as many at once as there are cores;
    /// none waits for a compile.
    pub async fn tools_of_many(
        self: &Arc<Self>,
        skills: &[Arc<Skill>],
    ) -> Vec<Arc<Vec<SkillTool>>> {
        use futures::StreamExt;
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let resolving: Vec<_> = skills
            .iter()
            .map(|skill| {
                let (host, skill) = (self.clone(), skill.clone());
                async move { host.tools_of_blocking(&skill).await }
            })
            .collect();
        futures::stream::iter(resolving)
            .buffered(cores)
            .collect()
            .await
    }

    /// Waits until every component of `skills` is compiled or has failed;
    /// returns how many failed. A failure joins the skill's problems, so a
    /// later call says why its tool cannot run. For the HTTP warm-up, after
    /// which `/readyz` says ready.
    pub async fn compiled(self: &Arc<Self>, skills: &[Arc<Skill>]) -> usize {
        self.tools_of_many(skills).await;
        let mut failed = 0;
        for skill in skills {
            let components: Vec<Arc<PendingComponent>> = {
                let resolved = self.lock_resolved();
                let Some(r) = resolved.get(skill.name()) else {
                    continue;
                };
                let mut all: Vec<Arc<PendingComponent>> = Vec::new();
                let every = r
                    .tools
                    .iter()
                    .map(|t| &t.component)
                    .chain(r.scripts.iter().map(|(_, c)| c));
                for c in every {
                    if !all.iter().any(|seen| Arc::ptr_eq(seen, c)) {
                        all.push(c.clone());
                    }
                }
                all
            };
            for component in components {
                if let Err(why) = component.compiled().await {
                    failed += 1;
                    if let Some(r) = self.lock_resolved().get_mut(skill.name())
                        && !r.problems.contains(&why)
                    {
                        r.problems.push(why);
                    }
                }
            }
        }
        failed
    }

    fn lock_resolved(&self) -> std::sync::MutexGuard<'_, HashMap<String, ResolvedTools>> {
        self.resolved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a call slot: at most `max_concurrency` calls run at once,
    /// and at most `max_per_client` for one principal.
    pub(crate) async fn call_slot(&self, principal: Option<&str>) -> Result<Slot, SandboxError> {
        let _waiting = self.metrics.waiting_call();
        self.calls
            .acquire(principal)
            .await
            .map_err(|_| SandboxError::Host("the server is shutting down".into()))
    }

    /// Records a finished call in the audit log and the metrics.
    pub(crate) fn record(
        &self,
        call: &CallRecord<'_>,
        outcome: &str,
        started: Instant,
        fuel: Option<u64>,
        network: &[crate::sandbox::NetRequest],
        workspace: Option<super::audit::WorkspaceRecord>,
    ) {
        let provenance = call.skill.and_then(|s| s.provenance.as_deref());
        let record = Record {
            time: now_rfc3339(),
            client: call.client.clone(),
            tool: call.tool.to_string(),
            skill: call.skill.map(|s| s.name().to_string()),
            source: call.skill.map(|s| s.source.as_str().to_string()),
            component: call.component.map(|(path, _)| path.to_string()),
            component_digest: call.component.map(|(_, digest)| digest.to_string()),
            skill_resolved: provenance.map(|p| p.resolved.clone()),
            skill_signer: provenance.map(|p| p.signer_label().to_string()),
            grants: call.grants.clone(),
            argument_bytes: call.argument_bytes,
            code_digest: call.code.map(|c| c.digest.clone()),
            code_bytes: call.code.map(|c| c.bytes),
            outcome: outcome.to_string(),
            exit_code: call.exit_code,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            fuel,
            idempotency_key: call.idempotency_key.clone(),
            trace_id: call.trace.as_ref().map(|t| t.trace_id.clone()),
            parent_span_id: call.trace.as_ref().map(|t| t.parent_id.clone()),
            network: network.to_vec(),
            programs: call.programs.clone(),
            workspace,
        };
        self.metrics.observe(&record, call.tool_resolved);
        if let Some(audit) = &self.audit {
            audit.append(&record);
        }
    }

    /// Audits a host tool that runs no guest code (`load_skill`) with the
    /// same record and metrics as every call.
    pub fn record_host_tool(
        &self,
        caller: &super::Caller,
        tool: &str,
        skill: Option<&Skill>,
        argument_bytes: usize,
        outcome: &str,
        started: Instant,
    ) {
        let record = CallRecord {
            client: caller.client.clone(),
            tool,
            skill,
            component: None,
            grants: None,
            argument_bytes,
            code: None,
            idempotency_key: caller.idempotency_key.clone(),
            trace: caller.trace.clone(),
            tool_resolved: true,
            exit_code: None,
            programs: Vec::new(),
        };
        self.record(&record, outcome, started, None, &[], None);
    }

    /// Syncs the audit log to disk, for the HTTP drain.
    pub fn sync_audit(&self) {
        if let Some(audit) = &self.audit {
            audit.sync();
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let (from_cache, compiled) = self.sandbox.load_counts();
        self.metrics.render(from_cache, compiled)
    }
}

/// Size of `value` as JSON text, for audit records.
pub fn json_size(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}
