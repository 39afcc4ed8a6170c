//! Why a call did not run or did not produce a result.

use super::confirm::{ConfirmPolicy, Question};
use crate::sandbox::SandboxError;

/// Why a call did not produce a result. Each message says what happened,
/// why, and what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum CallError {
    #[error("unknown tool `{name}`: {why}")]
    /// No tool of that name is served.
    UnknownTool {
        /// The name asked for.
        name: String,
        /// Why it is not served.
        why: String,
    },
    #[error("tool `{name}` cannot run now: {why}")]
    /// The tool exists but cannot run now (its component does not load).
    Unavailable {
        /// The tool.
        name: String,
        /// Why.
        why: String,
    },
    #[error(
        "no skill named `{name}`. Loaded skills: {available}. Check the name in load_skill's list."
    )]
    /// No skill of that name is loaded.
    NoSuchSkill {
        /// The name asked for.
        name: String,
        /// The skills loaded.
        available: String,
    },
    #[error("script `{script}` cannot run here: {why}")]
    /// The skill has the file, but the sandbox has no way to run it (a
    /// shell script, JavaScript), or the runtime it needs is missing.
    CannotRun {
        /// The script, relative to its skill.
        script: String,
        /// Why, and what to do instead.
        why: String,
    },
    #[error("the code cannot run: {why}")]
    /// `run_code` was given code it cannot run: more than it takes, or no
    /// Python runtime is installed.
    CannotRunCode {
        /// Why, and what to do instead.
        why: String,
    },
    #[error("skill `{skill}` has no script `{script}`; its scripts: {available}")]
    /// The skill has no script of that name.
    NoSuchScript {
        /// The skill.
        skill: String,
        /// The script asked for.
        script: String,
        /// Its scripts.
        available: String,
    },
    #[error(
        "skill `{skill}` is not loaded in this session, so its tools and scripts cannot run yet. \
         Call load_skill {{\"name\": \"{skill}\"}} first and follow its steps."
    )]
    /// A model called a skill's code before `load_skill` in its session.
    NotLoaded {
        /// The skill.
        skill: String,
    },
    #[error(
        "skill `{skill}` can only be invoked by the user (disable-model-invocation), and the user \
         has not invoked it in this session; its tools do not run. Ask the user to invoke it."
    )]
    /// A model called a skill only the user may invoke.
    UserOnly {
        /// The skill.
        skill: String,
    },
    #[error(
        "skill `{skill}`'s folder was moved or replaced since it was loaded (renamed, or swapped \
         for a link); nothing was run. The skill is dropped until it is valid again; the catalog \
         is being reloaded."
    )]
    /// The skill's folder was moved or replaced since it was loaded.
    Moved {
        /// The skill.
        skill: String,
    },
    #[error(
        "`{what}` is not served: the user runs skillbox read-only (--read-only), which serves \
         only tools declared `read`. Use a read tool, or ask the user."
    )]
    /// The host is read-only and this is not a `read` tool.
    ReadOnly {
        /// The tool or script.
        what: String,
    },
    #[error(
        "{what} needs the user's confirmation before it runs (it is declared {class}, and the \
         user's policy is --confirm {policy}), and skillbox cannot ask the user through this \
         client: it declared no elicitation support, or gave no answer within five minutes. \
         Nothing ran. Tell the user \
         what you wanted to do; they can approve it from a client that asks, or choose another \
         --confirm policy.",
        class = question.class.as_str(),
        what = question.what,
        policy = policy.as_str()
    )]
    /// The call needs the user's confirmation and no one could give it.
    NeedsConfirmation {
        /// What the user would have been asked.
        question: Box<Question>,
        /// The policy that asked for it.
        policy: ConfirmPolicy,
    },
    #[error(
        "the user declined {what}; nothing ran. Do not call it again with the same arguments; \
         ask the user how to go on."
    )]
    /// The user declined the call.
    Declined {
        /// The call.
        what: String,
    },
    #[error("{error}")]
    /// The call ran in the sandbox and failed there.
    Sandbox {
        /// The sandbox's error kind.
        error: SandboxError,
        /// Grants requested but not given, limits clamped: what may explain it.
        notes: Vec<String>,
    },
}

impl CallError {
    /// A stable short code for audit records and machine-readable output.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. }
            | CallError::NoSuchSkill { .. }
            | CallError::NoSuchScript { .. } => "unknown",
            CallError::NotLoaded { .. }
            | CallError::UserOnly { .. }
            | CallError::ReadOnly { .. } => "refused",
            CallError::NeedsConfirmation { .. } => "unconfirmed",
            CallError::Declined { .. } => "declined",
            CallError::Moved { .. } => "moved",
            CallError::Unavailable { .. } => "unavailable",
            CallError::CannotRun { .. } | CallError::CannotRunCode { .. } => "unsupported",
            CallError::Sandbox { error, .. } => error.code(),
        }
    }

    /// Notes on grants and limits that may explain the failure.
    pub fn notes(&self) -> &[String] {
        match self {
            CallError::Sandbox { notes, .. } => notes,
            _ => &[],
        }
    }
}

impl From<SandboxError> for CallError {
    fn from(error: SandboxError) -> Self {
        CallError::Sandbox {
            error,
            notes: Vec::new(),
        }
    }
}
