//! For skill authors: start a skill with a tool in one command, and build
//! its tools into the places its manifest names.
//!
//! ```text
//! new_skill  ──> SKILL.md + skillbox.yaml + tool/ (Rust, Python or JavaScript, its WIT world)
//! build      ──> cargo / componentize-py / componentize-js, in the user's cache
//!                ──> tools/<name>.wasm
//! ```

// Internal: reachable to embedders only through `skillbox`'s re-exports; the
// stable types defined here carry their own `deny(missing_docs)`.
#![allow(missing_docs)]

mod build;
mod scaffold;
mod trust;

pub use build::{NativeCode, TOOL_CRATE, ToolLanguage, build, tool_language};
pub use scaffold::{NewSkill, new_skill};
pub use trust::created_here;
