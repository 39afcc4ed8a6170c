//! The MCP server: skills and sandboxed tools to any agent, over stdio and
//! Streamable HTTP.
//!
//! ```text
//! stdio (line gate) ─┐
//!                    ├─> Session (ServerHandler) ─> Server ─> call::Host (the one call path)
//! HTTP /mcp ─────────┘      load_skill · read_skill_file · run_script · <skill>__<fn>
//!                           resources skill://… · prompts · reload watcher
//!                           confirmation (elicitation / input_required) · tasks
//! ```

pub mod banner;
mod calls;
pub mod confirm;
pub mod handler;
pub mod host_tools;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
pub mod http_guard;
#[cfg(feature = "http")]
pub mod oauth;
pub mod prompts;
pub mod reload;
pub mod resources;
pub mod results;
pub mod server;
pub mod skills_ext;
pub mod stdio;
pub mod tasks;

pub use handler::Session;
pub use server::{ServeOptions, Server, ToolsMode};
