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

mod api;
pub(crate) mod banner;
mod calls;
pub(crate) mod confirm;
pub(crate) mod handler;
pub(crate) mod host_tools;
#[cfg(feature = "http")]
pub(crate) mod http;
#[cfg(feature = "http")]
pub(crate) mod http_guard;
#[cfg(feature = "http")]
pub(crate) mod http_listener;
#[cfg(feature = "http")]
pub(crate) mod http_principal;
#[cfg(feature = "http")]
pub(crate) mod http_streams;
#[cfg(feature = "http")]
mod lifecycle;
#[cfg(feature = "http")]
pub(crate) mod oauth;
#[cfg(feature = "http")]
pub(crate) mod ops;
mod peer;
pub(crate) mod prompts;
pub(crate) mod reload;
pub(crate) mod resources;
pub(crate) mod results;
pub(crate) mod server;
mod session;
pub(crate) mod skills_ext;
pub(crate) mod stdio;
pub(crate) mod tasks;

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
#[cfg(feature = "agent")]
pub(crate) use session::Session;
pub use tasks::{DEFAULT_MAX_TASKS, DEFAULT_TASK_AFTER, DEFAULT_TASK_TTL};
/// The default token budget of the resident skill catalog.
pub const DEFAULT_CATALOG_BUDGET: usize = crate::skill::resident::DEFAULT_BUDGET_TOKENS;
#[cfg(feature = "agent")]
pub(crate) use server::Shared;
pub use server::ToolsMode;
