//! The end-to-end tests, as one binary: the real `skillbox` binary, real
//! components, real files, real servers. One module per area; the shared
//! set-up (the built components, the binary, hermetic folders, MCP clients,
//! fake model providers) is the `skillbox_e2e` library in `tests/support`.
//!
//! The binary and the guest components are built before the tests run
//! (`scripts/test`; the components by this crate's build script), so no
//! test invokes cargo.

mod agent;
mod agent_job;
mod agent_memory;
mod authoring;
mod ci_agent;
mod cli;
mod distribution;
mod foreign;
mod host_boundary;
mod host_programs;
mod layering;
mod load_balancer;
mod mcp_confirm_tasks;
mod mcp_oauth;
mod mcp_revisions;
mod mcp_stdio;
mod mcp_wire;
mod network;
mod newcomer;
mod ops;
mod python_packages;
mod python_scripts;
mod red_team;
mod red_team_surfaces;
mod run_code;
mod sandbox_fs;
mod sandbox_limits;
mod script_http;
mod shared_state;
mod skills_catalog;
mod skills_cli;
mod skills_collections;
mod skills_corpus;
mod tools;
mod transactions;
mod type_kinds;
mod user_grants;
