//! What every MCP session of one server shares: the host, the serving
//! options and the connected clients.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::service::{Peer, RoleServer};

use super::confirm::StateSeal;
use super::shared_state::StateStore;
use super::tasks::Tasks;
use skillbox_call::Host;

/// Whether skill tools are listed up front or after `load_skill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolsMode {
    /// List a skill's tools once `load_skill` activates it, then send
    /// `notifications/tools/list_changed`. A skill's tools run only after
    /// `load_skill` in that session.
    #[default]
    Lazy,
    /// List every skill's tools from the start, for clients without
    /// `listChanged`.
    All,
}

impl ToolsMode {
    /// Every mode's name, as the `--tools` flag takes it.
    pub const NAMES: &'static [&'static str] = &["lazy", "all"];
}

impl std::str::FromStr for ToolsMode {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "lazy" => Ok(ToolsMode::Lazy),
            "all" => Ok(ToolsMode::All),
            _ => Err(format!("unknown tools mode `{name}`; use lazy or all")),
        }
    }
}

/// How `serve` was configured, beyond the host.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    pub tools_mode: ToolsMode,
    /// Bytes of a tool result put into the model's context.
    pub output_budget: usize,
    /// How often skill folders are checked for changes; `None` disables reload.
    pub reload_interval: Option<Duration>,
    /// A call still running after this long becomes a task, for clients
    /// that declare the tasks extension.
    pub task_after: Duration,
    /// How long a task and its result are kept.
    pub task_ttl: Duration,
    /// Tasks running at once.
    pub max_tasks: usize,
    /// Tokens the resident catalog (load_skill's description) may take.
    pub catalog_budget: usize,
    /// How long a person has to answer a confirmation, and how long a
    /// stateless client's answer stays good.
    pub confirm_timeout: Duration,
}

/// What every session of one server shares: the call path, the options,
/// tasks, the confirmation seal. The agent opens sessions over it.
pub struct Shared {
    pub host: Arc<Host>,
    pub(crate) options: ServeOptions,
    /// Connected clients, told when the catalog changes.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Catalog changes, for `subscriptions/listen` streams.
    changes: tokio::sync::broadcast::Sender<()>,
    pub(crate) tasks: Tasks,
    /// Seals the `requestState` of confirmation questions.
    pub(crate) seal: Arc<StateSeal>,
    /// What replicas share: the seal's key and the spent approvals.
    #[cfg(feature = "http")]
    pub(crate) state: Arc<StateStore>,
    /// Whether the reload watcher was started.
    watching: std::sync::atomic::AtomicBool,
    /// Whether the warm-up (loading every component) was started.
    #[cfg(feature = "http")]
    warming: std::sync::atomic::AtomicBool,
    /// What `/readyz` reports.
    #[cfg(feature = "http")]
    pub(crate) readiness: super::lifecycle::Readiness,
    /// HTTP requests being answered, for the drain on shutdown.
    #[cfg(feature = "http")]
    pub(crate) in_flight: Arc<super::lifecycle::InFlight>,
}

impl Shared {
    pub(crate) fn new(host: Arc<Host>, options: ServeOptions, state: Arc<StateStore>) -> Self {
        Shared {
            tasks: Tasks::new(
                options.task_after,
                options.task_ttl,
                options.max_tasks,
                state.clone(),
            ),
            seal: Arc::new(StateSeal::new(options.confirm_timeout, state.clone())),
            #[cfg(feature = "http")]
            state,
            host,
            options,
            peers: Mutex::new(Vec::new()),
            changes: tokio::sync::broadcast::channel(16).0,
            watching: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "http")]
            warming: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "http")]
            readiness: Default::default(),
            #[cfg(feature = "http")]
            in_flight: Default::default(),
        }
    }

    /// True once: for the caller that starts the reload watcher.
    pub(crate) fn claim_watcher(&self) -> bool {
        !self
            .watching
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// True once: for the caller that starts the warm-up.
    #[cfg(feature = "http")]
    pub(crate) fn claim_warm_up(&self) -> bool {
        !self.warming.swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// A receiver of catalog changes.
    pub(crate) fn changes(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.changes.subscribe()
    }

    pub(crate) fn register_peer(&self, peer: Peer<RoleServer>) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(peer);
    }

    /// Tells every connected client that tools, resources and prompts may
    /// have changed, forgetting clients that are gone.
    pub(crate) async fn broadcast_list_changed(&self) {
        let _ = self.changes.send(());
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
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            tools_mode: ToolsMode::Lazy,
            output_budget: super::results::DEFAULT_OUTPUT_BUDGET,
            reload_interval: None,
            task_after: super::tasks::DEFAULT_TASK_AFTER,
            task_ttl: super::tasks::DEFAULT_TASK_TTL,
            max_tasks: super::tasks::DEFAULT_MAX_TASKS,
            catalog_budget: crate::skill::resident::DEFAULT_BUDGET_TOKENS,
            confirm_timeout: super::confirm::DEFAULT_CONFIRM_TIMEOUT,
        }
    }
}
