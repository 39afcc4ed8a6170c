//! Long-term memory: facts an agent saves in one run and finds in a later
//! one, kept in SQLite (searched with FTS5) under a scope the user names.
//! Nothing from it is resident in the context: the model reaches it only
//! through the three host tools, and what it recalls comes back fenced as
//! untrusted data, since an earlier run may have saved injected text.

mod store;
mod tools;

pub use store::{Entry, Limits, MemoryError, MemoryStore, NewEntry, Scope, ScopeInfo};
pub(crate) use tools::MemoryTools;
pub use tools::{MEMORY_FORGET, MEMORY_SAVE, MEMORY_SEARCH, day, printable};
