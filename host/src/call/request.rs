//! What a call is: the target, who is calling and what they have been
//! allowed so far, and what comes back.

use std::collections::BTreeSet;

use serde_json::Value;

use super::confirm::Approval;
use super::trace::TraceContext;
use crate::sandbox::{NetRequest, ScriptOutcome, Usage};
use crate::skill::tools::{SkillTool, split_tool_name};

/// The audit log's tool name for script runs.
pub(super) const SCRIPT_LABEL: &str = "run_script";

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
}

/// Who is calling, and what they have been allowed so far.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's name and version, for the audit log.
    pub client: Option<String>,
    pub idempotency_key: Option<String>,
    pub access: Access,
    /// The user's answer to a confirmation question, if one was asked.
    pub approval: Approval,
    /// Who this is for the fair share of call slots: an authenticated
    /// subject or a network address. `None` is not limited by a share.
    pub principal: Option<String>,
    /// The distributed trace the request arrived in (W3C `traceparent`).
    pub trace: Option<TraceContext>,
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
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Value(Value),
    Script(ScriptOutcome),
}

impl Target {
    /// The skill the target names (empty when a tool name has no `__`).
    pub fn skill(&self) -> &str {
        match self {
            Target::Tool { name, .. } => split_tool_name(name).map_or("", |(skill, _)| skill),
            Target::Script { skill, .. } => skill,
        }
    }
}
