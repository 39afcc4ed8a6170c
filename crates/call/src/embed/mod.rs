//! The embedding API: a [`Skillbox`] holds the skills, the user's policy
//! and the sandbox; every call goes through the host's one call path
//! (policy, grants, limits, audit, a fresh sandbox).

mod builder;
mod compile;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use builder::Builder;
pub use compile::{CompileOutcome, Compiled};

use crate::sandbox::{NetRequest, Usage};
use crate::skill::Effect;
use crate::{CallError, Caller, Host, Outcome, Target, WorkspaceChanges};

/// Skills and their sandboxed tools, ready to call. Cheap to clone: clones
/// share the catalog, the compiled components and the call slots.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use serde_json::json;
///
/// let skillbox = skillbox::Skillbox::builder()
///     .skills_dir("skills")
///     .workspace("examples/workspace")
///     .build()?;
/// let output = skillbox
///     .call_tool("log-inspect__grep", json!({"path": "logs/app.log", "pattern": "ERROR"}))
///     .await?;
/// println!("{}", output.value);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Skillbox {
    host: Arc<Host>,
    recovered: Vec<String>,
    /// The skill folders' fingerprint before the catalog was built, so a
    /// server's reload watcher misses no change made while it started.
    fingerprint: u64,
}

/// Why a [`Skillbox`] could not be built. Each message says what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The workspace given to [`Builder::workspace`] is not a folder.
    #[error("the workspace `{name}` is not a folder; pass an existing directory")]
    Workspace {
        /// The folder's last path component.
        name: String,
    },
    /// A call that died left changes pending for the workspace, and they
    /// could not be finished or dropped.
    #[error(
        "the workspace `{name}` has changes an interrupted call left pending, and they cannot \
         be settled ({reason}); check that the state folder (SKILLBOX_STATE_DIR or \
         XDG_STATE_HOME) is writable"
    )]
    Recovery {
        /// The folder's last path component.
        name: String,
        /// What failed, without paths.
        reason: String,
    },
    /// A grant does not fit the skills (an environment key several skills
    /// request, a network grant for a skill that does not request it), or
    /// a write grant covers the host's own state.
    #[error(transparent)]
    Policy(#[from] crate::skill::policy::PolicyError),
    /// The audit log cannot be opened for appending.
    #[error("the audit log `{name}` cannot be opened for appending ({reason})")]
    AuditLog {
        /// The file's name.
        name: String,
        /// Why, in words.
        reason: String,
    },
    /// The WebAssembly engine could not start (for example, the system
    /// refused the virtual memory it reserves).
    #[error(transparent)]
    Engine(#[from] crate::sandbox::EngineError),
}

/// One loaded skill, as a catalog lists it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SkillInfo {
    /// The skill's name (its folder's name).
    pub name: String,
    /// What it does and when to use it, from its frontmatter.
    pub description: String,
    /// Where it came from: `explicit`, `project`, `user` or `system`.
    pub source: &'static str,
    /// Its folder on this machine.
    pub dir: PathBuf,
    /// The names of its scripts (command components).
    pub scripts: Vec<String>,
    /// Whether a model may pick it on its own (not `disable-model-invocation`).
    pub model_invocable: bool,
}

/// One tool a skill exports, with its schemas.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolInfo {
    /// `SKILL__FUNCTION`, the name to call it by.
    pub name: String,
    /// The skill it belongs to.
    pub skill: String,
    /// What it does, from the skill's manifest.
    pub description: String,
    /// Its declared side effect.
    pub effect: Effect,
    /// JSON Schema of its arguments (an object, one property per parameter).
    pub input_schema: Value,
    /// JSON Schema of its result, when it returns one.
    pub output_schema: Option<Value>,
}

/// A tool's result.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The tool's return value as JSON, with granted secrets redacted.
    pub value: Value,
    /// Grants requested but not given, limits clamped: what a reader of
    /// the result should know.
    pub notes: Vec<String>,
    /// What went wrong without failing the call (a refused network request).
    pub warnings: Vec<String>,
    /// Fuel and time the call used.
    pub usage: Usage,
    /// The HTTP requests the tool sent (or tried to).
    pub network: Vec<NetRequest>,
    /// For a write-granted call: what it changed in the workspace
    /// (committed), or would have (a dry run).
    pub workspace: Option<WorkspaceChanges>,
}

/// A script's run: its exit code and what it printed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScriptOutput {
    /// The script's exit code (WASI 0.2 reports any failure as 1).
    pub exit_code: i32,
    /// Its standard output, redacted.
    pub stdout: String,
    /// Its standard error, redacted.
    pub stderr: String,
    /// Grants requested but not given, limits clamped.
    pub notes: Vec<String>,
    /// Fuel and time the run used.
    pub usage: Usage,
    /// What the script changed in the workspace (or would have, in a dry
    /// run). A script that exits non-zero changes nothing.
    pub workspace: Option<WorkspaceChanges>,
}

impl Skillbox {
    /// The call path this handle runs, for the MCP server and the agent
    /// built over it. Not for embedders: hidden from the facade's API.
    #[doc(hidden)]
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// The skill folders' fingerprint before the catalog was built, for
    /// the MCP server's reload watcher. Hidden from the facade's API.
    #[doc(hidden)]
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Starts configuring a host. See [`Builder`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// What [`Builder::build`] settled for the workspace before anything
    /// ran: an interrupted commit finished, or an unfinished call's staged
    /// changes dropped, in words.
    pub fn recovered(&self) -> &[String] {
        &self.recovered
    }

    /// The skills loaded, in catalog order.
    pub fn skills(&self) -> Vec<SkillInfo> {
        self.host
            .catalog()
            .skills()
            .map(|skill| SkillInfo {
                name: skill.name().to_string(),
                description: skill.meta.description.clone(),
                source: skill.source.as_str(),
                dir: skill.dir.clone(),
                scripts: skill.script_names(),
                model_invocable: skill.model_invocable(),
            })
            .collect()
    }

    /// Problems found while loading skills (a malformed SKILL.md, a
    /// skipped folder), one line each, for logs.
    pub fn diagnostics(&self) -> Vec<String> {
        self.host
            .catalog()
            .diagnostics()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The host's metrics in the Prometheus text format: calls by tool and
    /// outcome, latency histograms, fuel, sandbox errors by kind, active
    /// calls, compiled-code cache hits and misses, network egress. Serve it
    /// at an application's own `/metrics`; the HTTP server does.
    pub fn metrics(&self) -> String {
        self.host.metrics_text()
    }

    /// Every tool the skills export and this host serves, compiling each
    /// skill's components on first use (on tokio's blocking pool, as many
    /// at once as there are cores; a compiled-code cache makes later starts
    /// cheap).
    pub async fn tools(&self) -> Vec<ToolInfo> {
        let skills: Vec<_> = self.host.catalog().skills().cloned().collect();
        let resolved = self.host.tools_of_many(&skills).await;
        resolved
            .iter()
            .flat_map(|tools| tools.iter())
            .filter(|tool| self.host.serves(tool))
            .map(|tool| ToolInfo {
                name: tool.name.clone(),
                skill: tool.skill.clone(),
                description: tool.description.clone(),
                effect: tool.effect,
                input_schema: tool.input_schema.clone(),
                output_schema: tool.output_schema.clone(),
            })
            .collect()
    }

    /// Calls a tool (`SKILL__FUNCTION`) with JSON arguments in a fresh
    /// sandbox. Dropping the future stops the guest at its next epoch tick.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolOutput, CallError> {
        self.call_tool_until(name, arguments, &CancellationToken::new())
            .await
    }

    /// [`Skillbox::call_tool`] that stops when `cancel` is cancelled, with
    /// the cancellation reported as an error and recorded in the audit log.
    pub async fn call_tool_until(
        &self,
        name: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, CallError> {
        let target = Target::Tool {
            name: name.to_string(),
            arguments,
        };
        self.call_for_value(target, cancel).await
    }

    /// Runs a skill's script with arguments and stdin in a fresh sandbox.
    pub async fn run_script(
        &self,
        skill: &str,
        script: &str,
        args: Vec<String>,
        stdin: Vec<u8>,
        cancel: &CancellationToken,
    ) -> Result<ScriptOutput, CallError> {
        let target = Target::Script {
            skill: skill.to_string(),
            script: script.to_string(),
            args,
            stdin,
        };
        self.call_for_script(target, cancel).await
    }

    /// Runs Python `code` (as `python -c` would) with arguments and stdin
    /// in a fresh sandbox: as `skill`'s own code (its folder at `/skill`
    /// and first on `sys.path`, its prepared packages, its grants and
    /// limits), or, with no skill, with the builder's workspace and
    /// environment grants and no network.
    pub async fn run_code(
        &self,
        skill: Option<&str>,
        code: &str,
        args: Vec<String>,
        stdin: Vec<u8>,
        cancel: &CancellationToken,
    ) -> Result<ScriptOutput, CallError> {
        let target = Target::Code {
            skill: skill.map(str::to_string),
            code: code.to_string(),
            args,
            stdin,
        };
        self.call_for_script(target, cancel).await
    }

    /// Calls `function` of the component file at `path`, as a one-tool
    /// skill of its own: the builder's workspace, environment and network
    /// grants, the limits of its class (a write when the workspace is
    /// writable), the same audit record and redaction as a skill's tool.
    pub async fn call_component(
        &self,
        path: &Path,
        function: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, CallError> {
        let target = Target::ComponentTool {
            path: path.to_path_buf(),
            function: function.to_string(),
            arguments,
        };
        self.call_for_value(target, cancel).await
    }

    /// Runs the command component file at `path` with arguments and stdin,
    /// with the builder's grants, as [`Skillbox::run_script`] runs a
    /// skill's script.
    pub async fn run_component(
        &self,
        path: &Path,
        args: Vec<String>,
        stdin: Vec<u8>,
        cancel: &CancellationToken,
    ) -> Result<ScriptOutput, CallError> {
        let target = Target::ComponentScript {
            path: path.to_path_buf(),
            args,
            stdin,
        };
        self.call_for_script(target, cancel).await
    }

    async fn call_for_value(
        &self,
        target: Target,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, CallError> {
        let reply = self.host.call(&Caller::default(), target, cancel).await?;
        match reply.outcome {
            Outcome::Value(value) => Ok(ToolOutput {
                value,
                notes: reply.notes,
                warnings: reply.warnings,
                usage: reply.usage,
                network: reply.network,
                workspace: reply.workspace,
            }),
            Outcome::Script(_) => unreachable!("a function call returns a value"),
        }
    }

    async fn call_for_script(
        &self,
        target: Target,
        cancel: &CancellationToken,
    ) -> Result<ScriptOutput, CallError> {
        let reply = self.host.call(&Caller::default(), target, cancel).await?;
        match reply.outcome {
            Outcome::Script(outcome) => Ok(ScriptOutput {
                exit_code: outcome.exit_code,
                stdout: outcome.stdout,
                stderr: outcome.stderr,
                notes: reply.notes.into_iter().chain(reply.warnings).collect(),
                usage: outcome.usage,
                workspace: reply.workspace,
            }),
            Outcome::Value(_) => unreachable!("a command run returns a script outcome"),
        }
    }

    /// Reads the skill folders again and swaps in the new catalog; calls
    /// already running finish with the skills they started with.
    pub async fn reload(&self) {
        self.host.reload_blocking().await;
    }
}

impl std::fmt::Debug for Skillbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skillbox")
            .field("skills", &self.host.catalog().len())
            .finish_non_exhaustive()
    }
}
