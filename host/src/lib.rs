//! skillbox runs [Agent Skills] (SKILL.md folders) and tools compiled to
//! WebAssembly components in a capability-scoped wasmtime sandbox, and
//! serves them over MCP.
//!
//! This crate is its stable API: the call path, the embedding API, the MCP
//! server and the agent, over the lower layers' own crates (the sandbox,
//! the skills, distribution). The `skillbox` binary is a thin command line
//! over the same crates.
//!
//! # Quick start
//!
//! ```no_run
//! use serde_json::json;
//! use skillbox::{CallError, SandboxError, Skillbox};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Skills from one folder; the workspace read-only; nothing else granted.
//! let skillbox = Skillbox::builder()
//!     .skills_dir("skills")
//!     .workspace("examples/workspace")
//!     .build()?;
//!
//! for tool in skillbox.tools().await {
//!     println!("{}: {}", tool.name, tool.description);
//! }
//!
//! match skillbox
//!     .call_tool("log-inspect__grep", json!({"path": "logs/app.log", "pattern": "ERROR"}))
//!     .await
//! {
//!     Ok(output) => println!("{}", output.value),
//!     Err(CallError::Sandbox { error: SandboxError::Timeout { limit }, .. }) => {
//!         eprintln!("stopped after {limit:?}");
//!     }
//!     Err(other) => eprintln!("{other}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every call runs in a fresh sandbox: a private `/tmp`, the skill's own
//! folder read-only at `/skill`, and only what the builder granted. Errors
//! are values written for a model and a person alike: what happened, why,
//! and what to do next, with no host path and no secret.
//!
//! # Features
//!
//! | feature | adds | pulls in |
//! |---|---|---|
//! | (none) | [`Skillbox`]: skills, the sandbox, the call path, Prometheus metrics | wasmtime, cap-std, tokio, prometheus |
//! | `mcp` | [`mcp::Server`] over stdio or any async byte stream | rmcp |
//! | `http` | Streamable HTTP, mountable in an axum app | axum, jsonwebtoken, reqwest |
//! | `agent` | [`agent::Agent`], the agent loop, with any [`agent::Model`] | reqwest with rustls, backon |
//! | `tokens` | real token counts (o200k_base) for catalog budgets | tiktoken-rs |
//! | `tls` | `https://` for guests' granted network requests | rustls |
//! | `distribute` | the `skillbox-distribute` crate the binary publishes and installs skills with (OCI registries and git, signed and locked); nothing in this crate's API | oci-client, reqwest |
//! | `otlp` | calls' spans continue a caller's W3C trace as OpenTelemetry spans (the binary exports them over OTLP/HTTP) | opentelemetry, tracing-opentelemetry |
//! | `cli` (default) | the `skillbox` binary: all of the above | clap |
//!
//! An embedder usually wants `default-features = false` and the features
//! it uses. `docs/embedding.md` in the repository explains the threading
//! model, what the host owns on disk, and the security contract.
//!
//! [Agent Skills]: https://agentskills.io

#![deny(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

mod fuzz;

pub use skillbox_call::{
    BuildError, Builder, CallError, CompileOutcome, Compiled, ConfirmPolicy, ScriptOutput,
    SkillInfo, Skillbox, ToolInfo, ToolOutput, WorkspaceChanges, WorkspaceStatus,
};
// The sandbox crate's types an embedder sees, documented here as
// `skillbox`'s own.
#[doc(inline)]
pub use skillbox_sandbox::schema::ArgError;
#[doc(inline)]
pub use skillbox_sandbox::stage::{Change, ChangeKind, ChangeSet, Kind as EntryKind};
#[doc(inline)]
pub use skillbox_sandbox::{
    EngineError, Mount, NetRequest, NetRule, Printed, QuotaKind, SandboxError, Usage,
};
pub use skillbox_skill::skill::Effect;
pub use skillbox_skill::skill::manifest::ManifestLimits;
pub use skillbox_skill::skill::manifest::WorkspaceAccess;
pub use skillbox_skill::skill::policy::{
    Ceilings, EnvGrant, LimitOverrides, NetGrant, PolicyError, SkillGrant,
};
pub use tokio_util::sync::CancellationToken;

/// The MCP server: skills and sandboxed tools to any agent, over stdio and
/// Streamable HTTP. Build one with [`mcp::Server::builder`] over a
/// [`Skillbox`].
#[cfg(feature = "mcp")]
pub mod mcp {
    #[cfg(feature = "http")]
    pub use skillbox_mcp::{
        AddrError, BearerToken, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS,
        DEFAULT_MAX_SESSIONS, DEFAULT_MAX_STREAMS_PER_CLIENT, DEFAULT_SHUTDOWN_GRACE,
        DocumentError, HttpOptions, OAuthOptions, OAuthStartError, OAuthVerifier,
        STREAM_IDLE_TIMEOUT, TokenFileError, parse_addr,
    };
    pub use skillbox_mcp::{
        DEFAULT_CATALOG_BUDGET, DEFAULT_CONFIRM_TIMEOUT, DEFAULT_MAX_TASKS, DEFAULT_OUTPUT_BUDGET,
        DEFAULT_TASK_AFTER, DEFAULT_TASK_TTL, Server, ServerBuilder, StateError, StateStore,
        ToolsMode,
    };
}

/// The agent loop: a model, the host's skills and external MCP servers as
/// tools, with budgets, approvals, memory, traces and replay. Build one
/// with [`agent::Agent::builder`] over a [`Skillbox`] and a [`agent::Model`].
#[cfg(feature = "agent")]
pub mod agent {
    pub use skillbox_agent::{
        Agent, AgentBuilder, AgentError, Approver, DEFAULT_SUMMARY_TOKENS, McpConfig,
        McpConfigError, Message, Model, ModelRequest, ModelResponse, Outcome, Provider,
        ProviderError, Purpose, RetryPolicy, Run, Stop, TokenUsage, ToolCall, ToolDef, Trace,
        memory, replay,
    };
}

/// The parsers of untrusted bytes, as the fuzz targets in `fuzz/` call
/// them. **No stability promise**: the crates below the facade
/// (`skillbox-call`, `skillbox-mcp`, …) are what the binary and the
/// benchmarks use; this is here only so `fuzz/` needs one dependency.
#[allow(missing_docs)]
#[doc(hidden)]
pub mod unstable {
    pub mod fuzz {
        pub use crate::fuzz::*;
    }
}
