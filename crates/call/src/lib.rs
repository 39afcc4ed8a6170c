//! skillbox's call path, and the embedding API over it ([`Skillbox`]).
//!
//! The one way to run a skill's code. MCP, the command line and the agent
//! all come through [`Host::call`], whose stages run in order over one
//! call value (pipeline.rs):
//!
//! ```text
//! open        prepare.rs: resolve (skill, tool or script) ─> invocation
//!             policy (who may call it now) ─> folder still in place
//!             ─> component loaded ─> grants ─> limits
//! authorize   authorize.rs: the user's yes, asked through the caller's
//!             `Ask` when the policy confirms the call
//! run         call slot ─> sandbox (cancellable)
//! settle      changes committed, kept in the dry run, or held for the answer
//! record      audit record and metrics
//! reply       granted secrets redacted out of everything returned
//! ask after   a call that ran staged first asks with its diff (authorize.rs)
//! ```
//!
//! Every check lives here once; callers only translate their wire format
//! into a [`Target`] and a [`Caller`] (request.rs), with an [`Ask`] that
//! puts questions to their user, and the reply back.
//! Host tools that run no guest code (`load_skill`) are audited here too,
//! through [`Host::record_host_tool`].

// Internal: embedders reach it through the `skillbox` facade, which
// re-exports the stable types; the rest serves the crates above (MCP, the
// agent, the binary) with no stability promise.
#![allow(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

pub mod audit;
mod authorize;
pub mod confirm;
mod embed;
mod error;
mod held;
mod host;
pub mod metrics;
pub mod net;
mod pipeline;
mod prepare;
pub mod redact;
mod request;
mod slots;
pub mod trace;

#[cfg(test)]
mod tests;

pub use confirm::ConfirmPolicy;
pub use confirm::{Answer, Ask, Asker, Question};
pub use embed::{
    BuildError, Builder, CompileOutcome, Compiled, ScriptOutput, SkillInfo, Skillbox, ToolInfo,
    ToolOutput,
};
pub use error::CallError;
pub use host::{Host, HostOptions, json_size};
pub use request::{Access, CallReply, Caller, Outcome, Target};
pub use request::{DryRun, WorkspaceChanges, WorkspaceStatus};

// The layers below keep the paths this crate names them by.
use skillbox_sandbox as sandbox;
use skillbox_sandbox::{digest, dirs, text};
use skillbox_skill::{runtime, skill};
