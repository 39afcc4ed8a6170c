//! The agent loop as an embedder runs it: [`Agent::builder`] with a
//! [`Skillbox`] and a [`Model`], then [`Agent::run`] a task.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::approve::{AgentClient, Approver};
use super::control::{AgentLoop, LoopOptions, Timeouts};
use super::mcp_config::McpConfig;
use super::memory::{MemoryStore, MemoryTools, Scope};
use super::provider::Model;
use super::stop::Outcome;
use super::tools::{HubError, ToolHub};
use super::trace::Trace;
use crate::skill::{invoke, meta};
use skillbox_call::Skillbox;
use skillbox_mcp::Server;

/// Why an agent run could not start or went wrong outside the loop itself
/// (a stop inside the loop is an [`Outcome`] with its [`super::Stop`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// What the embedder or user configured is wrong: an external MCP
    /// server that cannot be started, two tools with one name, a task that
    /// invokes a skill that does not exist.
    #[error("{0}")]
    Config(String),
    /// An MCP server (skillbox's own or an external one) failed while the
    /// run went on.
    #[error("{0}")]
    Server(String),
    /// The trace file cannot be created.
    #[error("the trace file cannot be created ({reason}); name a file in a writable folder")]
    Trace {
        /// Why, in words (the OS's reason, without a path).
        reason: String,
    },
}

impl From<HubError> for AgentError {
    fn from(e: HubError) -> Self {
        match e {
            HubError::Config(why) => AgentError::Config(why),
            HubError::Server(why) => AgentError::Server(why),
        }
    }
}

/// A finished run: how it ended and the trace of every step.
#[non_exhaustive]
pub struct Run {
    /// Why the loop stopped, the answer, steps, tool calls and tokens.
    pub outcome: Outcome,
    /// Every model call and tool call; [`Trace::table`] renders it.
    pub trace: Trace,
    /// What the run's calls changed, when the host runs dry
    /// ([`crate::Builder::dry_run`]): nothing of it reached the workspace.
    pub dry_run: skillbox_call::DryRun,
    /// The run's id, as its trace and the memory entries it saved record it.
    pub run_id: String,
}

/// The agent loop over a [`Skillbox`]'s skills, external MCP servers and a
/// model. Built once, it runs one task per [`Agent::run`].
///
/// The model is any [`Model`]: the built-in [`super::Provider`]
/// (OpenAI-compatible or Anthropic), or a client of the application's own.
///
/// ```no_run
/// use skillbox::agent::{Agent, Model, ModelRequest, ModelResponse, ProviderError};
///
/// /// A stand-in for the application's own model client.
/// struct Gateway;
///
/// impl Model for Gateway {
///     async fn complete(&self, _: &ModelRequest<'_>) -> Result<ModelResponse, ProviderError> {
///         Ok(ModelResponse::answer("done"))
///     }
///
///     fn describe(&self) -> String {
///         "gateway".into()
///     }
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let skillbox = skillbox::Skillbox::builder().skills_dir("skills").build()?;
/// let agent = Agent::builder(&skillbox, Gateway).max_steps(10).build();
/// let run = agent.run("Summarise the errors in logs/app.log").await?;
/// println!("{}", run.outcome.answer);
/// # Ok(())
/// # }
/// ```
pub struct Agent<M: Model> {
    skillbox: Skillbox,
    model: M,
    max_steps: usize,
    budget_tokens: Option<u64>,
    context_tokens: usize,
    summary_tokens: u32,
    memory: Option<(Arc<MemoryStore>, Scope)>,
    /// Whether `memory_save` and `memory_forget` run (not in a replay).
    memory_writes: bool,
    timeouts: Timeouts,
    catalog_budget: usize,
    servers: Option<McpConfig>,
    approver: Approver,
    trace_file: Option<PathBuf>,
    progress: bool,
}

/// Configures an [`Agent`]. Start with [`Agent::builder`].
pub struct AgentBuilder<M: Model> {
    agent: Agent<M>,
}

impl<M: Model> Agent<M> {
    /// Starts configuring an agent over `skillbox`'s skills, asking `model`.
    /// Defaults: 20 steps, no token budget, a 32 000-token context,
    /// confirmations refused (nobody to ask), no trace file, no progress.
    pub fn builder(skillbox: &Skillbox, model: M) -> AgentBuilder<M> {
        AgentBuilder {
            agent: Agent {
                skillbox: skillbox.clone(),
                model,
                max_steps: 20,
                budget_tokens: None,
                context_tokens: 32_000,
                summary_tokens: super::summary::DEFAULT_SUMMARY_TOKENS,
                memory: None,
                memory_writes: true,
                timeouts: Timeouts::around_sandbox_defaults(),
                catalog_budget: crate::skill::resident::DEFAULT_BUDGET_TOKENS,
                servers: None,
                approver: Approver::Refuse,
                trace_file: None,
                progress: false,
            },
        }
    }

    /// The model this agent asks.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// Runs `task` to a stop. A task that starts with `/skill:NAME args`
    /// (or `/NAME args` naming a skill) invokes that skill explicitly: its
    /// prompt becomes the first message and it is loaded up front.
    pub async fn run(&self, task: &str) -> Result<Run, AgentError> {
        let mut trace = Trace::open(self.trace_file.as_deref(), self.progress).map_err(|e| {
            AgentError::Trace {
                reason: crate::sandbox::io_reason(&e),
            }
        })?;
        let run_id = new_run_id();
        trace.event(
            "run",
            serde_json::json!({
                "run_id": run_id,
                "task": task,
                "model": self.model.describe(),
                "max_steps": self.max_steps,
                "context_tokens": self.context_tokens,
                "summary_tokens": self.summary_tokens,
                "memory_scope": self.memory.as_ref().map(|(_, scope)| scope.to_string()),
            }),
        );
        let catalog = self.skillbox.host().catalog();
        let (task, invoked) = explicit_invocation(&catalog, task)?;
        let server = Server::builder(&self.skillbox)
            .catalog_budget(self.catalog_budget)
            .build()
            .map_err(|e| AgentError::Server(format!("cannot start skillbox's MCP server: {e}")))?;
        let dry_run = skillbox_call::DryRun::default();
        let hub = ToolHub::connect(
            server.shared().clone(),
            self.servers.as_ref(),
            AgentClient::new(self.approver),
            dry_run.clone(),
        )
        .await?;
        // The user invoked this skill: say so to the session (as a client
        // does by fetching the skill's prompt), so that a skill the model
        // may not pick on its own can still run its tools in this run.
        if let Some(name) = &invoked {
            hub.invoke_skill(name).await?;
        }
        // Listing once up front refuses name clashes before any model call.
        let tools = hub.list().await?;
        if let (Some(name), Some(load)) =
            (&invoked, tools.get(skillbox_mcp::host_tools::LOAD_SKILL))
        {
            let mut args = Map::new();
            args.insert("name".into(), Value::from(name.as_str()));
            hub.call(load, args, Duration::from_secs(30), None).await;
        }
        let options = LoopOptions {
            max_steps: self.max_steps,
            budget_tokens: self.budget_tokens,
            context_tokens: self.context_tokens,
            summary_tokens: self.summary_tokens,
            timeouts: self.timeouts,
        };
        let memory = self.memory.as_ref().map(|(store, scope)| {
            let tools = MemoryTools::new(store.clone(), scope.clone(), run_id.clone());
            if self.memory_writes {
                tools
            } else {
                tools.without_writes()
            }
        });
        let resident = catalog.resident(self.catalog_budget).text();
        let agent = AgentLoop::new(&self.model, &hub, options, trace, &resident, task, memory);
        let (outcome, trace) = agent.run().await;
        hub.close().await;
        Ok(Run {
            outcome,
            trace,
            dry_run,
            run_id,
        })
    }
}

impl<M: Model> AgentBuilder<M> {
    /// Model calls allowed before the loop stops (at least 1).
    pub fn max_steps(mut self, steps: usize) -> Self {
        self.agent.max_steps = steps.max(1);
        self
    }

    /// Provider-reported tokens (in + out) allowed; a warning at 80 %, a
    /// stop at 100 %.
    pub fn budget_tokens(mut self, tokens: Option<u64>) -> Self {
        self.agent.budget_tokens = tokens;
        self
    }

    /// Context size in tokens. Past it, the turns before the recent ones
    /// are replaced by a summary, and old tool results are trimmed if that
    /// is not enough.
    pub fn context_tokens(mut self, tokens: usize) -> Self {
        self.agent.context_tokens = tokens;
        self
    }

    /// Tokens the summary of older turns may take (default
    /// [`super::DEFAULT_SUMMARY_TOKENS`]); 0 trims old tool results
    /// instead of summarizing.
    pub fn summary_tokens(mut self, tokens: u32) -> Self {
        self.agent.summary_tokens = tokens;
        self
    }

    /// Long-term memory: the model gets `memory_save`, `memory_search` and
    /// `memory_forget` on this store's `scope`. Off unless set.
    pub fn memory(mut self, store: Arc<MemoryStore>, scope: Scope) -> Self {
        self.agent.memory = Some((store, scope));
        self.agent.memory_writes = true;
        self
    }

    /// Long-term memory for a replay: `memory_search` reads `scope`, and
    /// `memory_save` and `memory_forget` answer without touching the
    /// store, so a recorded (or edited) trace never writes to memory.
    pub fn memory_for_replay(mut self, store: Arc<MemoryStore>, scope: Scope) -> Self {
        self.agent.memory = Some((store, scope));
        self.agent.memory_writes = false;
        self
    }

    /// How long the agent waits for a read tool, a write or destructive
    /// tool, and a script. Set them a little above the sandbox's own
    /// limits, so the sandbox's clearer message arrives first.
    pub fn tool_timeouts(mut self, read: Duration, write: Duration, script: Duration) -> Self {
        self.agent.timeouts = Timeouts {
            read,
            write,
            script,
        };
        self
    }

    /// Tokens the skill catalog in the system prompt may take; past it,
    /// the model searches with `find_skills`.
    pub fn catalog_budget(mut self, tokens: usize) -> Self {
        self.agent.catalog_budget = tokens;
        self
    }

    /// External MCP servers whose tools the model may also call, in the
    /// common `{"mcpServers": …}` form.
    pub fn mcp_servers(mut self, config: McpConfig) -> Self {
        self.agent.servers = Some(config);
        self
    }

    /// How confirmations are answered: approve all, ask on the terminal,
    /// or refuse (the default; the run stops with
    /// [`super::Stop::Unconfirmed`]).
    pub fn approver(mut self, approver: Approver) -> Self {
        self.agent.approver = approver;
        self
    }

    /// Writes one JSON line per event (model calls, tool calls, trims,
    /// stop) to this file.
    pub fn trace_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.agent.trace_file = Some(file.into());
        self
    }

    /// Prints one progress line per step on stderr (off by default: the
    /// library prints nothing unless asked).
    pub fn show_progress(mut self) -> Self {
        self.agent.progress = true;
        self
    }

    /// The configured agent.
    pub fn build(self) -> Agent<M> {
        self.agent
    }
}

/// A run id: unique enough to tell runs apart in traces and memory.
fn new_run_id() -> String {
    use sha2::Digest;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let digest = sha2::Sha256::digest(format!("{nanos}-{}", std::process::id()));
    format!("run-{}", &format!("{digest:x}")[..12])
}

/// `/skill:NAME args` (or `/NAME args` naming a skill) at the start of the
/// task: the first user message and the skill invoked.
fn explicit_invocation(
    catalog: &crate::skill::Catalog,
    task: &str,
) -> Result<(String, Option<String>), AgentError> {
    let Some(request) = invoke::parse(task) else {
        return Ok((task.to_string(), None));
    };
    let explicit = task.trim_start().starts_with("/skill:");
    let looks_like_skill = meta::name_format_problem(request.name).is_none();
    if !explicit && (!looks_like_skill || catalog.get(request.name).is_none()) {
        return Ok((task.to_string(), None));
    }
    let skill =
        invoke::resolve(catalog, &request).map_err(|e| AgentError::Config(e.to_string()))?;
    let prompt = invoke::render(
        skill,
        request.arguments,
        &skillbox_mcp::host_tools::skill_dir_uri(skill.name()),
    )
    .map_err(|e| AgentError::Config(e.to_string()))?;
    Ok((prompt, Some(skill.name().to_string())))
}
