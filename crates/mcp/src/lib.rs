//! skillbox's MCP server, a crate of its own above the call path.
//!
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

// Internal: embedders reach it through the `skillbox` facade, which
// re-exports the stable types; the rest serves the crates above with no
// stability promise.
#![allow(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

mod api;
mod banner;
mod calls;
pub mod confirm;
mod handler;
pub mod host_tools;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
mod http_guard;
#[cfg(feature = "http")]
mod http_listener;
#[cfg(feature = "http")]
mod http_principal;
#[cfg(feature = "http")]
mod http_streams;
#[cfg(feature = "http")]
mod lifecycle;
#[cfg(feature = "http")]
mod oauth;
#[cfg(feature = "http")]
mod ops;
mod peer;
mod prompts;
mod reload;
mod resources;
pub mod results;
mod server;
mod session;
mod shared_state;
mod skills_ext;
pub mod stdio;
mod tasks;

pub use api::{Server, ServerBuilder};
pub use confirm::DEFAULT_CONFIRM_TIMEOUT;
#[cfg(feature = "http")]
pub use http::{
    AddrError, DEFAULT_MAX_BODY_BYTES, DEFAULT_SHUTDOWN_GRACE, HttpOptions, parse_addr,
};
#[cfg(feature = "http")]
pub use http_guard::{BearerToken, DEFAULT_MAX_SESSIONS, TokenFileError};
#[cfg(feature = "http")]
pub use http_listener::DEFAULT_MAX_CONNECTIONS;
#[cfg(feature = "http")]
pub use http_streams::{DEFAULT_MAX_STREAMS_PER_CLIENT, STREAM_IDLE_TIMEOUT};
#[cfg(feature = "http")]
pub use oauth::{DocumentError, OAuthOptions, OAuthStartError, Verifier as OAuthVerifier};
pub use results::DEFAULT_OUTPUT_BUDGET;
pub use session::Session;
pub use shared_state::{StateError, StateStore};
pub use tasks::{DEFAULT_MAX_TASKS, DEFAULT_TASK_AFTER, DEFAULT_TASK_TTL};
/// The default token budget of the resident skill catalog.
pub const DEFAULT_CATALOG_BUDGET: usize = skill::resident::DEFAULT_BUDGET_TOKENS;
pub use server::Shared;
pub use server::ToolsMode;

// The layers below keep the paths this crate names them by.
use skillbox_sandbox as sandbox;
use skillbox_skill::{runtime, skill};
