//! skillbox runs [Agent Skills] (SKILL.md folders) and tools compiled to
//! WebAssembly components in a capability-scoped wasmtime sandbox, and
//! serves them over MCP.
//!
//! This crate is the whole of it, as a library: the `skillbox` binary is a
//! thin command line over the same public API.
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
//! | `distribute` | publishing skills to OCI registries and installing them from registries and git, signed and locked (reachable only through the unstable API, for the binary) | oci-client, reqwest |
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
mod author;
mod call;
#[cfg(feature = "distribute")]
mod distribute;
mod embed;
mod fuzz;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(any(feature = "http", feature = "agent"))]
mod net;
mod runtime;
mod skill;

// The lowest layer is a crate of its own; its modules keep the paths the
// layers above name them by.
use skillbox_sandbox as sandbox;
use skillbox_sandbox::{digest, dirs, schema, text};

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

/// Internals the `skillbox` binary, its benchmarks and the end-to-end tests
/// reach into, each listed by name. **No stability promise**: anything
/// here may change or go in any release. An embedder who needs something
/// from here should ask for it in the stable API instead.
#[allow(missing_docs)]
pub mod unstable {
    pub use crate::skill::discover::Limits as DiscoveryLimits;

    /// The parsers of untrusted bytes, as the fuzz targets in `fuzz/` call
    /// them.
    pub mod fuzz {
        pub use crate::fuzz::*;
    }

    /// Scaffolding a new skill and building its tool.
    pub mod author {
        pub use crate::author::{
            NativeCode, NewSkill, TOOL_CRATE, ToolLanguage, build, created_here, new_skill,
            tool_language,
        };
    }
    /// Publishing, installing and verifying skills (`publish`, `add`,
    /// `sync`, `update`, `remove`, `key new`).
    #[cfg(feature = "distribute")]
    pub mod distribute {
        pub use crate::distribute::install::Recovery;
        pub use crate::distribute::lifecycle::{
            SyncItem, permissions_of, plan, plan_update, remove, sync,
        };
        pub use crate::distribute::permissions::Permissions;
        pub use crate::distribute::publish::{Published, publish};
        pub use crate::distribute::reference::{OciRef, SkillRef};
        pub use crate::distribute::registry::RegistryOptions;
        pub use crate::distribute::sign::{
            SigningKey, TrustedKeys, new_key_pair, trusted_keys_dir,
        };
        pub use crate::distribute::{DistributeError, Plan, Settings};
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
    /// The script runtimes: Python, and the packages `prepare` installs.
    pub mod runtime {
        pub use crate::runtime::packages::{Installed, PrepareError, declared_by, prepare};
        pub use crate::runtime::python::{packages_dir, runtime_path};
    }
    /// The sandbox itself: engine, components, grants, limits.
    pub mod sandbox {
        pub use crate::sandbox::{
            CompileOrigin, DiskCache, EngineOptions, Entry, Grants, GuestCall, Limits,
            LoadedComponent, MAX_MEMORY_BYTES, MIB, PendingChanges, PinnedDir, Sandbox,
            SandboxError, SideEffect, WorkspaceGrant, commit,
        };
        /// Staged workspace writes: the transaction a write-granted call is.
        pub mod stage {
            pub use crate::sandbox::stage::{CommitError, Recovered, Stage, recover};
        }
    }
    /// WIT types to JSON Schema.
    pub mod schema {
        pub use crate::schema::output_schema;
    }
    /// SKILL.md, manifests, discovery, the catalog, checks.
    pub mod skill {
        pub use crate::skill::{Catalog, Diagnostic, Skill, Source, SourceKind, SourceOptions};
        pub mod check {
            pub use crate::skill::check::{check_folder, skill_folders};
        }
        pub mod diagnostic {
            pub use crate::skill::diagnostic::has_errors;
        }
        pub mod discover {
            pub use crate::skill::discover::Limits;
        }
        pub mod invoke {
            pub use crate::skill::invoke::{parse, render, resolve};
        }
        pub mod lock {
            pub use crate::skill::lock::{
                LOCK_FILE, LockEntry, LockFile, Provenance, Signer, content_digest, tree_files,
            };
        }
        pub mod policy {
            pub use crate::skill::policy::{
                Ceilings, EnvGrant, LimitOverrides, NetGrant, UserPolicy, grants,
            };
        }
        pub mod resident {
            pub use crate::skill::resident::{DEFAULT_BUDGET_TOKENS, line};
        }
        pub mod source {
            pub use crate::skill::source::{Source, SourceKind, SourceOptions};
        }
        pub mod tokens {
            pub use crate::skill::tokens::{BODY_TOKEN_WARNING, count, description_problem};
        }
        pub mod tools {
            pub use crate::skill::tools::{resolve, split_tool_name};
        }
    }
    /// The MCP server's tool definitions, as the catalog commands show them.
    #[cfg(feature = "mcp")]
    pub mod mcp {
        pub use crate::mcp::host_tools::{definitions, skill_tool_definition};
    }
}
