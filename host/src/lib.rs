//! skillbox: Agent Skills and WebAssembly component tools in a
//! capability-scoped sandbox, served over MCP.
//!
//! - [`sandbox`]: the wasmtime engine, per-call stores, limits and grants.
//! - [`schema`]: WIT types to JSON Schema; JSON to component values and back.
//! - [`skill`]: SKILL.md, skillbox.yaml, discovery, the catalog.
//! - [`call`]: the one call path: resolve, policy, grants, limits, audit, sandbox.
//! - [`mcp`]: the MCP server over stdio and Streamable HTTP.
//! - [`net`]: where secrets may travel (https, or this machine).
//! - [`agent`]: the agent loop over MCP tools and model providers.
//! - [`author`]: scaffolding a new skill and building its tool.

#[cfg(feature = "agent")]
pub mod agent;
pub mod author;
pub mod call;
pub mod dirs;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(any(feature = "http", feature = "agent"))]
pub mod net;
pub mod sandbox;
pub mod schema;
pub mod skill;
