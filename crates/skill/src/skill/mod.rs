//! Skills: SKILL.md parsing, the skillbox.yaml manifest, discovery across
//! sources, the catalog, invocation and token budgets.
//!
//! ```text
//! SourceOptions ─> sources ─> discover (skill folders) ─> model::load
//!   (files: bounded cap-std reads ─> frontmatter ─> meta rules ─> manifest)
//!   ─> Catalog (precedence, diagnostics, name index)
//! ```

// Internal: reachable to embedders only through `skillbox`'s re-exports; the
// stable types defined here carry their own `deny(missing_docs)`.
#![allow(missing_docs)]

pub mod catalog;
pub mod check;
pub mod diagnostic;
pub mod discover;
pub mod files;
pub mod fileset;
pub mod fingerprint;
pub mod frontmatter;
pub mod imports;
pub mod invoke;
pub mod lock;
pub mod manifest;
pub mod meta;
pub mod model;
pub mod policy;
pub mod programs;
pub mod resident;
pub mod search;
pub mod source;
pub mod tokens;
pub mod tools;

pub use catalog::Catalog;
pub use diagnostic::Diagnostic;
pub use manifest::Effect;
pub use model::Skill;
pub use source::{Source, SourceKind, SourceOptions};
