//! skillbox's skills layer, above the sandbox: what a skill is (SKILL.md,
//! its manifest, its files and lock), where skills come from and which
//! wins (discovery, the catalog), what a skill may do (grants and limits
//! from its manifest and the user's policy), the interpreters for the
//! scripts skills ship (`runtime`), and the authoring commands (`author`).
//!
//! A crate of its own, so Cargo holds the layering: nothing here can reach
//! the call path or the protocols above it. Its modules keep the paths the
//! layers above name them by (`skill`, `runtime`, `author`).

// Internal: reachable to embedders only through
// the stable re-exports of `skillbox`.
#![allow(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

pub mod author;
pub mod runtime;
pub mod skill;

// The layer below keeps the paths this crate names it by.
use skillbox_sandbox as sandbox;
use skillbox_sandbox::{digest, dirs, schema};
