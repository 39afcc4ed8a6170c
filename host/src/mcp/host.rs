//! The state every MCP session shares: the catalog (swapped on reload),
//! the sandbox, resolved tools, the call limit and the audit log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::Semaphore;

use super::audit::{AuditLog, Record, now_rfc3339};
use crate::sandbox::{Sandbox, SandboxError};
use crate::skill::policy::{LimitOverrides, UserPolicy};
use crate::skill::tools::{self, SkillTool};
use crate::skill::{Catalog, Skill, SourceOptions};

/// Whether skill tools are listed up front or after `load_skill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ToolsMode {
    /// List a skill's tools once `load_skill` activates it, then send
    /// `notifications/tools/list_changed`.
    #[default]
    Lazy,
    /// List every skill's tools from the start, for clients without
    /// `listChanged`.
    All,
}

/// How `serve` was configured.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub sources: SourceOptions,
    pub policy: UserPolicy,
    pub overrides: LimitOverrides,
    pub tools_mode: ToolsMode,
    /// Calls that may run at once; the rest wait.
    pub max_concurrency: usize,
    /// Bytes of a tool result put into the model's context.
    pub output_budget: usize,
    /// How often skill folders are checked for changes; `None` disables reload.
    pub reload_interval: Option<Duration>,
}

/// A skill's resolved tools, valid while its digests are unchanged.
struct ResolvedTools {
    /// SKILL.md's digest and the components' digests it was resolved from.
    digest: String,
    components: Vec<(String, String)>,
    tools: Arc<Vec<SkillTool>>,
}

pub struct Host {
    catalog: RwLock<Arc<Catalog>>,
    pub sandbox: Arc<Sandbox>,
    pub options: ServeOptions,
    resolved: Mutex<HashMap<String, ResolvedTools>>,
    calls: Semaphore,
    audit: Option<AuditLog>,
    /// Connected clients, told when the catalog changes.
    peers: Mutex<Vec<Peer<RoleServer>>>,
}

/// Context of one call, for the audit record.
pub struct CallRecord<'a> {
    pub client: Option<String>,
    pub tool: &'a str,
    pub skill: Option<&'a Skill>,
    pub component: Option<(&'a str, &'a str)>,
    pub grants: Option<String>,
    pub arguments: &'a Value,
    pub idempotency_key: Option<String>,
}

impl Host {
    pub fn new(options: ServeOptions, sandbox: Arc<Sandbox>, audit: Option<AuditLog>) -> Self {
        let catalog = Catalog::build(&options.sources);
        Host {
            catalog: RwLock::new(Arc::new(catalog)),
            sandbox,
            calls: Semaphore::new(options.max_concurrency.max(1)),
            options,
            resolved: Mutex::new(HashMap::new()),
            audit,
            peers: Mutex::new(Vec::new()),
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the catalog; returns the new one.
    pub fn reload(&self) -> Arc<Catalog> {
        let fresh = Arc::new(Catalog::build(&self.options.sources));
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        fresh
    }

    pub fn register_peer(&self, peer: Peer<RoleServer>) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(peer);
    }

    /// Tells every connected client that tools, resources and prompts may
    /// have changed, forgetting clients that are gone.
    pub async fn broadcast_list_changed(&self) {
        let peers: Vec<Peer<RoleServer>> =
            self.peers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut alive = Vec::with_capacity(peers.len());
        for peer in peers {
            let ok = peer.notify_tool_list_changed().await.is_ok()
                && peer.notify_resource_list_changed().await.is_ok()
                && peer.notify_prompt_list_changed().await.is_ok();
            if ok {
                alive.push(peer);
            }
        }
        *self.peers.lock().unwrap_or_else(|e| e.into_inner()) = alive;
    }

    pub fn audit_path(&self) -> Option<&std::path::Path> {
        self.audit.as_ref().map(|a| a.path())
    }

    /// A skill's tools, compiling its components on first use and again
    /// only when the skill changes.
    pub fn tools_of(&self, skill: &Skill) -> Arc<Vec<SkillTool>> {
        if let Some(hit) = self.lock_resolved().get(skill.name())
            && hit.digest == skill.digest
            && hit.components == skill.components
        {
            return hit.tools.clone();
        }
        let (tools, diags) = tools::resolve(skill, &self.sandbox);
        for d in diags.iter().filter(|d| d.is_error()) {
            tracing::warn!("{d}");
        }
        let tools = Arc::new(tools);
        self.lock_resolved().insert(
            skill.name().to_string(),
            ResolvedTools {
                digest: skill.digest.clone(),
                components: skill.components.clone(),
                tools: tools.clone(),
            },
        );
        tools
    }

    fn lock_resolved(&self) -> std::sync::MutexGuard<'_, HashMap<String, ResolvedTools>> {
        self.resolved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a call slot: at most `max_concurrency` calls run at once.
    pub async fn call_slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, SandboxError> {
        self.calls
            .acquire()
            .await
            .map_err(|_| SandboxError::Host("the server is shutting down".into()))
    }

    /// Records a finished call in the audit log.
    pub fn record(
        &self,
        call: &CallRecord<'_>,
        outcome: &str,
        started: Instant,
        fuel: Option<u64>,
    ) {
        let Some(audit) = &self.audit else { return };
        audit.append(&Record {
            time: now_rfc3339(),
            client: call.client.clone(),
            tool: call.tool.to_string(),
            skill: call.skill.map(|s| s.name().to_string()),
            source: call.skill.map(|s| s.source.as_str().to_string()),
            component: call.component.map(|(path, _)| path.to_string()),
            component_digest: call.component.map(|(_, digest)| digest.to_string()),
            grants: call.grants.clone(),
            argument_bytes: serde_json::to_vec(call.arguments)
                .map(|v| v.len())
                .unwrap_or(0),
            outcome: outcome.to_string(),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            fuel,
            idempotency_key: call.idempotency_key.clone(),
        });
    }
}
