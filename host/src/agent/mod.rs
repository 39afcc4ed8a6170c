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

pub mod approve;
pub mod control;
pub mod conversation;
pub mod mcp_config;
pub mod provider;
pub mod tools;
pub mod trace;

pub use control::{LoopOptions, Outcome, Stop, Timeouts};
