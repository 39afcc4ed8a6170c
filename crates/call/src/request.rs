//! What a call is: the target, who is calling and what they have been
//! allowed so far, and what comes back.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

use super::confirm::Asker;
use super::trace::TraceContext;
use crate::sandbox::stage::{ChangeSet, Stage};
use crate::sandbox::{CallOutcome, NetRequest, Usage};
use crate::skill::tools::{SkillTool, split_tool_name};

/// The audit log's tool name for script runs.
pub(super) const SCRIPT_LABEL: &str = "run_script";
/// The audit log's tool name for code runs.
pub(super) const CODE_LABEL: &str = "run_code";

/// What to run.
#[derive(Debug, Clone)]
pub enum Target {
    /// A skill tool, `<skill>__<function>`, with JSON arguments.
    Tool { name: String, arguments: Value },
    /// A skill's script (command component) with argv and stdin.
    Script {
        skill: String,
        script: String,
        args: Vec<String>,
        stdin: Vec<u8>,
    },
    /// Python code a model or the user wrote (`run_code`), with argv and
    /// stdin: as `skill`'s own code (its folder, packages, grants and
    /// limits), or, without one, with the host's own grants and no
    /// network.
    Code {
        skill: Option<String>,
        code: String,
        args: Vec<String>,
        stdin: Vec<u8>,
    },
    /// A function of a component file the user named (`skillbox call
    /// --component`), served as a one-tool skill of its own with the
    /// user's grants.
    ComponentTool {
        path: PathBuf,
        function: String,
        arguments: Value,
    },
    /// A command component file the user named (`skillbox run-script
    /// --component`), with argv and stdin.
    ComponentScript {
        path: PathBuf,
        args: Vec<String>,
        stdin: Vec<u8>,
    },
}

/// Who is calling, and what they have been allowed so far.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's name and version, for the audit log.
    pub client: Option<String>,
    pub idempotency_key: Option<String>,
    pub access: Access,
    /// Who puts a confirmation question to the user; without one, a call
    /// that needs the user's yes is refused with its question.
    pub asker: Option<Asker>,
    /// Who this is for the fair share of call slots: an authenticated
    /// subject or a network address. `None` is not limited by a share.
    pub principal: Option<String>,
    /// The distributed trace the request arrived in (W3C `traceparent`).
    pub trace: Option<TraceContext>,
    /// Where a dry run keeps the changes of this caller's calls so far
    /// (one MCP session, one agent run), when the host runs dry.
    pub dry_run: Option<DryRun>,
}

impl Caller {
    /// Tells the caller's asker that this call will ask nothing more.
    pub(super) fn asks_nothing_more(&self) {
        if let Some(asker) = &self.asker {
            asker.0.asks_nothing_more();
        }
    }
}

/// A dry run's staged workspace changes so far. Each call starts from
/// them, and a call that succeeds leaves its changes on top; nothing ever
/// reaches the workspace. Clones share the changes.
#[derive(Debug, Clone, Default)]
pub struct DryRun(pub(crate) std::sync::Arc<tokio::sync::Mutex<Option<Stage>>>);

impl DryRun {
    /// What the workspace would have changed by now.
    pub async fn changes(&self) -> ChangeSet {
        self.0
            .lock()
            .await
            .as_ref()
            .map(Stage::changes)
            .unwrap_or_default()
    }

    /// Writes the changes into the workspace at last, wholly or not at all
    /// (a run that stages everything and lands it at the end).
    pub async fn commit(&self) -> Result<ChangeSet, crate::sandbox::SandboxError> {
        let stage = self.0.lock().await.take();
        match stage {
            Some(stage) => {
                crate::sandbox::commit(&crate::sandbox::PendingChanges::holding(stage)).await
            }
            None => Ok(ChangeSet::default()),
        }
    }

    /// The changes as a git-format patch; `Err` names the files that are
    /// binary or too large for one.
    pub async fn patch(&self) -> Result<String, Vec<String>> {
        let stage = self.0.lock().await;
        match stage.as_ref() {
            Some(stage) => stage.patch(&stage.changes()),
            None => Ok(String::new()),
        }
    }
}

/// What became of a write-granted call's workspace changes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkspaceChanges {
    pub status: WorkspaceStatus,
    #[serde(flatten)]
    pub changes: ChangeSet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceStatus {
    /// Written to the workspace.
    Committed,
    /// Kept in the dry run; the workspace is untouched.
    DryRun,
    /// Dropped: a script that exited non-zero.
    Discarded,
}

impl WorkspaceStatus {
    /// The audit record's word for it.
    pub fn audit(self) -> &'static str {
        match self {
            WorkspaceStatus::Committed => "committed",
            WorkspaceStatus::DryRun => "dry-run",
            WorkspaceStatus::Discarded => "discarded",
        }
    }
}

impl WorkspaceChanges {
    /// The line a model and a person read under the result.
    pub fn note(&self) -> Option<String> {
        let lines = self.changes.lines().join("; ");
        match self.status {
            WorkspaceStatus::Committed => None,
            WorkspaceStatus::DryRun if self.changes.is_empty() => Some(
                "dry run: nothing is written to the workspace, and nothing would have changed \
                 so far"
                    .into(),
            ),
            WorkspaceStatus::DryRun => Some(format!(
                "dry run: nothing is written to the workspace; with the calls so far it would \
                 change {}: {lines}",
                self.changes.summary()
            )),
            WorkspaceStatus::Discarded => Some(
                "the script exited non-zero, so its workspace changes were discarded; the \
                 workspace is as it was"
                    .into(),
            ),
        }
    }
}

/// The invocation policy a caller is held to.
#[derive(Debug, Clone, Default)]
pub enum Access {
    /// The user at the command line: any loaded skill.
    #[default]
    User,
    /// A model through a session. A `disable-model-invocation` skill's code
    /// runs only after the user invoked that skill in the session (its
    /// prompt, or `/skill:` in the agent); with `require_loaded`, a skill's
    /// code runs only after `load_skill` in the session.
    Model {
        require_loaded: bool,
        loaded: BTreeSet<String>,
        user_invoked: BTreeSet<String>,
    },
}

/// A finished call.
#[derive(Debug, Clone)]
pub struct CallReply {
    pub outcome: Outcome,
    /// Grants requested but not given, limits clamped: what a model or
    /// person should know to read the result right.
    pub notes: Vec<String>,
    /// What went wrong during the call without failing it (a refused
    /// network request): worth a warning where the caller logs.
    pub warnings: Vec<String>,
    /// The tool that ran (absent for scripts).
    pub tool: Option<SkillTool>,
    /// What a tool printed on stderr (scripts carry theirs in the
    /// outcome), redacted; for debug logging.
    pub stderr: String,
    /// Fuel and time the call used.
    pub usage: Usage,
    /// The HTTP requests the guest sent or tried to send.
    pub network: Vec<NetRequest>,
    /// What the call changed in the workspace, for a write-granted call.
    pub workspace: Option<WorkspaceChanges>,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Value(Value),
    Script(CallOutcome),
}

impl Target {
    /// The skill the target names (empty when a tool name has no `__`,
    /// and for a component file).
    pub(crate) fn skill(&self) -> &str {
        match self {
            Target::Tool { name, .. } => split_tool_name(name).map_or("", |(skill, _)| skill),
            Target::Script { skill, .. } => skill,
            Target::Code { skill, .. } => skill.as_deref().unwrap_or_default(),
            Target::ComponentTool { .. } | Target::ComponentScript { .. } => "",
        }
    }

    /// The audit log's tool name: the tool or function, `run_script` or
    /// `run_code`.
    pub fn label(&self) -> &str {
        match self {
            Target::Tool { name, .. } => name,
            Target::ComponentTool { function, .. } => function,
            Target::Script { .. } | Target::ComponentScript { .. } => SCRIPT_LABEL,
            Target::Code { .. } => CODE_LABEL,
        }
    }
}
