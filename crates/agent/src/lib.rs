//! skillbox's agent loop, a crate of its own above the MCP server.
//!
//! The agent loop: `skillbox agent`, a bounded and traceable loop over MCP
//! tools.
//!
//! ```text
//! task ─> context (rules, catalog, tools, task) ─> provider (OpenAI / Anthropic)
//!      ─> tool calls ─> ToolHub (skillbox in-process over MCP, external MCP servers)
//!      ─> results ─> trim ─> … ─> answer, or a stop with an honest conclusion
//! ```
//!
//! Exit codes: 0 done, 2 usage, 3 step limit, 4 token budget, 5 model or
//! provider error, 6 tool failures left it stuck, 7 a call needed the
//! user's confirmation and no one could give it; with `--replay`, 8 a
//! tool's result differs from the recording, 9 the recording cannot be
//! followed (a tool it calls is gone, or it ran out of replies).
//!
//! Memory comes in three layers (docs/agent.md): the conversation
//! (working memory), the summary that replaces older turns when the
//! context is full (`summary`), and the long-term store a named scope
//! opens (`memory`).

// Internal: embedders reach it through the `skillbox` facade, which
// re-exports the stable types; the rest serves the crates above with no
// stability promise.
#![allow(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

mod api;
mod approve;
mod control;
mod conversation;
mod idempotency;
mod mcp_config;
pub mod memory;
mod prompt;
mod provider;
pub mod replay;
mod stop;
mod summary;
mod tools;
mod trace;

pub use api::{Agent, AgentBuilder, AgentError, Run};
pub use approve::Approver;
pub use conversation::{Message, ToolCall, ToolDef};
pub use mcp_config::{McpConfig, McpConfigError};
pub use provider::{
    Model, ModelRequest, ModelResponse, Provider, ProviderError, Purpose, RetryPolicy, TokenUsage,
};
pub use stop::{Outcome, Stop};
pub use summary::DEFAULT_SUMMARY_TOKENS;
pub use trace::Trace;

// The layers below keep the paths this crate names them by.
use skillbox_sandbox as sandbox;
use skillbox_sandbox::{dirs, text};
use skillbox_skill::skill;
