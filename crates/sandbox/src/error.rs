//! What can go wrong in a sandboxed call, as values callers branch on.
//!
//! Each message is written for the model and the person reading it: what
//! happened, why, and what to do next. Messages never carry host paths,
//! backtraces or environment values.

use std::time::Duration;

use super::mount::{Mount, QuotaKind};
use crate::schema::ArgError;

/// Why a sandboxed call failed, as a kind a caller can branch on. Each
/// message says what happened, why, and what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum SandboxError {
    #[error(
        "timeout: the tool was stopped after {} ms, its wall-clock limit. It was still running, \
         usually because the input is too large or the tool loops. Narrow the request (a smaller \
         file, fewer lines, a tighter pattern); if the work is legitimate, the user can raise the \
         limit (--timeout-ms).", limit.as_millis()
    )]
    /// The call ran past its wall-clock limit.
    Timeout {
        /// The limit it had.
        limit: Duration,
    },

    #[error(
        "out of fuel: the tool used its whole CPU budget of {fuel} instructions and was stopped. \
         It did more work than one call may, or it loops. Narrow the request; if the work is \
         legitimate, the user can raise the budget (--fuel)."
    )]
    /// The call used its whole CPU budget.
    OutOfFuel {
        /// The budget it had, in fuel units.
        fuel: u64,
    },

    #[error(
        "memory limit: the tool tried to grow its memory past {} MiB and was stopped. The input \
         is too large to hold at once, or the tool leaks. Narrow the request; if the work is \
         legitimate, the user can raise the cap (--memory-mib).", limit_bytes / (1024 * 1024)
    )]
    /// The guest tried to grow its memory past the cap.
    MemoryLimit {
        /// The cap, in bytes.
        limit_bytes: usize,
    },

    #[error(
        "stack overflow: the tool recursed deeper than its call stack allows and was stopped. \
         The input is nested too deeply for it, or the tool recurses without end. Try a smaller \
         or flatter input."
    )]
    /// The guest's call stack overflowed.
    StackOverflow,

    #[error(
        "output limit: the tool produced more than {limit} bytes of {stream} and was stopped. \
         Ask for less: a narrower range, fewer matches, a filter; the user can raise the cap \
         (--max-output-bytes)."
    )]
    /// The guest wrote more than the output cap.
    OutputLimit {
        /// `stdout`, `stderr` or `result`.
        stream: &'static str,
        /// The cap, in bytes.
        limit: usize,
    },

    #[error(
        "network response limit: the tool received more than {} MiB of HTTP response bodies in \
         this call and was stopped. Ask for less (a smaller page, fewer requests); if the work \
         is legitimate, the user can raise the cap (--net-max-response-mib).",
        limit_bytes.div_ceil(1024 * 1024)
    )]
    /// The guest received more HTTP response bytes than one call may.
    ResponseLimit {
        /// The cap, in bytes.
        limit_bytes: u64,
    },

    #[error("{}", quota_message(*mount, *what, *limit))]
    /// The guest went over a write quota of its `/tmp` or the workspace.
    Quota {
        /// Which mount.
        mount: Mount,
        /// Bytes or entries.
        what: QuotaKind,
        /// The quota.
        limit: u64,
    },

    /// The call succeeded, but a file it read or changed was changed by
    /// someone else while it ran, so its workspace changes were dropped.
    #[error("{0}")]
    Conflict(String),

    #[error(
        "invalid arguments: {0}. Nothing was run. Fix this argument to match the tool's \
         inputSchema and call again."
    )]
    /// The arguments do not match the tool's input schema; nothing ran.
    InvalidArguments(#[from] ArgError),

    #[error("the tool reported an error: {message}")]
    /// The tool ran and returned its own error (a `result::err`).
    ToolError {
        /// The error as text.
        message: String,
        /// The error value as JSON.
        value: serde_json::Value,
    },

    #[error(
        "the tool crashed: {message}. This is a fault in the tool, not in the request's form; \
         retrying the same call will crash again. Try different input, or report it to the \
         skill's author.{stderr}"
    )]
    /// The guest crashed (a trap, a panic).
    Trap {
        /// What the trap was.
        message: String,
        /// The end of what it printed on stderr, redacted.
        stderr: String,
    },

    #[error("denied: {what}.")]
    /// The guest asked for something not granted.
    Denied {
        /// What it asked for.
        what: String,
    },

    #[error("no function `{name}` in this component; it exports: {available}")]
    /// The component exports no function of this name.
    NoSuchFunction {
        /// The name asked for.
        name: String,
        /// What it exports.
        available: String,
    },

    #[error("cancelled: the call was cancelled before it finished; nothing it did is reported")]
    /// The caller cancelled the call.
    Cancelled,

    #[error("{cause}{printed}")]
    /// A command stopped by a limit (time, fuel, memory, stack) after it
    /// printed something: the limit, and what it printed before the stop,
    /// which a person debugging a long script needs.
    Stopped {
        /// The limit that stopped it.
        cause: Box<SandboxError>,
        /// What it printed, within the output cap.
        printed: Printed,
    },

    #[error("cannot load the component: {0}")]
    /// The component could not be read or compiled.
    Load(String),

    #[error("host error: {0}")]
    /// The host itself failed (it is shutting down, a resource ran out).
    Host(String),
}

impl SandboxError {
    /// A stable short code for machine-readable output and audit records.
    pub fn code(&self) -> &'static str {
        match self {
            SandboxError::Timeout { .. } => "timeout",
            SandboxError::OutOfFuel { .. } => "out_of_fuel",
            SandboxError::MemoryLimit { .. } => "memory_limit",
            SandboxError::StackOverflow => "stack_overflow",
            SandboxError::OutputLimit { .. } => "output_limit",
            SandboxError::ResponseLimit { .. } => "response_limit",
            SandboxError::Quota { .. } => "quota",
            SandboxError::Conflict(_) => "conflict",
            SandboxError::InvalidArguments(_) => "invalid_arguments",
            SandboxError::ToolError { .. } => "tool_error",
            SandboxError::Trap { .. } => "trap",
            SandboxError::Denied { .. } => "denied",
            SandboxError::NoSuchFunction { .. } => "no_such_function",
            SandboxError::Cancelled => "cancelled",
            SandboxError::Load(_) => "load",
            SandboxError::Host(_) => "host",
            SandboxError::Stopped { cause, .. } => cause.code(),
        }
    }

    /// The error itself, without what the command printed before it.
    pub fn cause(&self) -> &SandboxError {
        match self {
            SandboxError::Stopped { cause, .. } => cause.cause(),
            other => other,
        }
    }

    /// `self` with what a command printed before it was stopped, when it
    /// is a stop by a limit and something was printed.
    pub(crate) fn with_printed(self, stdout: String, stderr: String) -> SandboxError {
        let stopped = matches!(
            self,
            SandboxError::Timeout { .. }
                | SandboxError::OutOfFuel { .. }
                | SandboxError::MemoryLimit { .. }
                | SandboxError::StackOverflow
        );
        if !stopped || (stdout.trim().is_empty() && stderr.trim().is_empty()) {
            return self;
        }
        SandboxError::Stopped {
            cause: Box::new(self),
            printed: Printed { stdout, stderr },
        }
    }
}

/// What a command printed before a limit stopped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Printed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let text = text.trim_end();
            if !text.is_empty() {
                write!(
                    f,
                    "\n\nWhat it printed on {name} before it was stopped:\n{text}"
                )?;
            }
        }
        Ok(())
    }
}

/// What a quota stopped, in words, with the flag that raises it.
fn quota_message(mount: Mount, what: QuotaKind, limit: u64) -> String {
    let (name, flag) = match mount {
        Mount::Scratch => ("scratch", "scratch"),
        Mount::Workspace => ("workspace", "workspace"),
    };
    let place = mount.guest_path();
    match what {
        QuotaKind::Bytes => format!(
            "{name} quota: the tool wrote more than {} MiB to {place} in this call and was \
             stopped. The quota counts bytes written; deleting files does not give them back. \
             Write less (smaller or fewer files); if the work is legitimate, the user can raise \
             the quota (--{flag}-quota-mib).",
            limit / (1024 * 1024)
        ),
        QuotaKind::Entries => format!(
            "{name} quota: the tool created more than {limit} files, folders and links in \
             {place} in this call and was stopped. Create fewer (write one file instead of \
             many); if the work is legitimate, the user can raise the quota \
             (--{flag}-quota-entries)."
        ),
    }
}
