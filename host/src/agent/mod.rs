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
//! user's confirmation and no one could give it.

mod api;
pub(crate) mod approve;
pub(crate) mod control;
pub(crate) mod conversation;
mod idempotency;
pub(crate) mod mcp_config;
mod prompt;
pub(crate) mod provider;
mod stop;
pub(crate) mod tools;
pub(crate) mod trace;

pub use api::{Agent, AgentBuilder, AgentError, Run};
pub use approve::Approver;
pub use conversation::{Message, ToolCall, ToolDef};
pub use mcp_config::{McpConfig, McpConfigError};
pub use provider::{
    Model, ModelRequest, ModelResponse, Provider, ProviderError, RetryPolicy, TokenUsage,
};
pub use stop::{Outcome, Stop};
pub use trace::Trace;
