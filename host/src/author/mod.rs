//! For skill authors: start a skill with a tool in one command, and build
//! its tools into the places its manifest names.
//!
//! ```text
//! new_skill  ──> SKILL.md + skillbox.yaml + tool/ (a Rust crate, its WIT world)
//! build      ──> cargo build --target wasm32-wasip2 ──> tools/<name>.wasm
//! ```

// Internal: reachable to embedders only through `skillbox::unstable`; the
// stable types defined here carry their own `deny(missing_docs)`.
#![allow(missing_docs)]

mod build;
mod scaffold;

pub use build::{TOOL_CRATE, build};
pub use scaffold::{NewSkill, new_skill};
