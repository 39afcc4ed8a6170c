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

// Internal: reachable to embedders only through `skillbox::unstable`; the
// stable types defined here carry their own `deny(missing_docs)`.
#![allow(missing_docs)]
// A model's invocation policy, confirmation and host-tool audits serve the
// MCP server and the agent; a build without them has no caller for those
// parts, which are unused there, not dead.
#![cfg_attr(not(feature = "mcp"), allow(dead_code, unused_imports))]

pub(crate) mod audit;
mod authorize;
pub(crate) mod confirm;
mod error;
mod held;
mod host;
pub(crate) mod metrics;
mod pipeline;
mod prepare;
pub(crate) mod redact;
mod request;
mod slots;
pub(crate) mod trace;

#[cfg(test)]
mod tests;

pub use confirm::ConfirmPolicy;
pub(crate) use confirm::{Answer, Ask, Asker, Question};
pub use error::CallError;
pub(crate) use host::{Host, HostOptions, json_size};
pub(crate) use request::{Access, CallReply, Caller, Outcome, Target};
pub use request::{DryRun, WorkspaceChanges, WorkspaceStatus};
