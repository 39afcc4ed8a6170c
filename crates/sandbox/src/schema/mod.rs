//! From a component's WIT types to MCP tool schemas, and between JSON and
//! component values.

// Internal: reachable to embedders only through `skillbox`'s re-exports; the
// stable types defined here carry their own `deny(missing_docs)`.
#![allow(missing_docs)]

pub mod binary;
pub mod exports;
pub mod json_schema;
pub mod value;
pub mod wit;

pub use binary::read_exports_from_binary;
pub use exports::{ComponentExports, ExportedFunction, export_index, read_exports};
pub use json_schema::output_schema;
pub use value::{ArgError, args_from_json, to_json};
pub use wit::WitType;

#[cfg(test)]
mod tests;
