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

#[cfg(feature = "agent")]
pub mod agent;
mod call;
mod embed;
mod fuzz;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(any(feature = "http", feature = "agent"))]
mod net;

// The lower layers are crates of their own; their modules keep the
// paths the layers above name them by.
use skillbox_sandbox as sandbox;
use skillbox_sandbox::{digest, dirs, schema, text};
use skillbox_skill::{runtime, skill};
// Distribution stands beside the call path, on the skills layer.
#[cfg(feature = "distribute")]
use skillbox_distribute as distribute;

pub use call::{CallError, ConfirmPolicy, WorkspaceChanges, WorkspaceStatus};
pub use embed::{
    BuildError, Builder, CompileOutcome, Compiled, ScriptOutput, SkillInfo, Skillbox, ToolInfo,
    ToolOutput,
};
// The sandbox crate's types an embedder sees, documented here as
// `skillbox`'s own.
#[doc(inline)]
pub use sandbox::stage::{Change, ChangeKind, ChangeSet, Kind as EntryKind};
#[doc(inline)]
pub use sandbox::{EngineError, Mount, NetRequest, NetRule, QuotaKind, SandboxError, Usage};
#[doc(inline)]
pub use schema::ArgError;
pub use skill::Effect;
pub use skill::policy::{Ceilings, EnvGrant, LimitOverrides, NetGrant, PolicyError};
pub use tokio_util::sync::CancellationToken;

/// The call path's and the server's internals the `skillbox` binary and its
/// benchmarks reach into, each listed by name (the lower layers' own
/// crates, `skillbox-sandbox`, `skillbox-skill` and `skillbox-distribute`,
/// they use directly). **No stability promise**: anything
/// here may change or go in any release. An embedder who needs something
/// from here should ask for it in the stable API instead.
#[allow(missing_docs)]
pub mod unstable {
    /// The parsers of untrusted bytes, as the fuzz targets in `fuzz/` call
    /// them.
    pub mod fuzz {
        pub use crate::fuzz::*;
    }

    /// The call path's pieces the benchmarks measure.
    pub mod call {
        pub use crate::call::DryRun;
        pub mod audit {
            pub use crate::call::audit::Record;
        }
        pub mod metrics {
            pub use crate::call::metrics::Metrics;
        }
        pub mod redact {
            pub use crate::call::redact::Redactor;
        }
    }
    /// The MCP server's tool definitions, as the catalog commands show them.
    #[cfg(feature = "mcp")]
    pub mod mcp {
        pub use crate::mcp::host_tools::{definitions, skill_tool_definition};
    }
}
