//! Staged workspace writes: every write-granted call is a transaction on
//! the workspace.
//!
//! ```text
//! overlay.rs      the call's view: workspace below, its changes above
//! changes.rs      what it changed: a list with sizes, a diff, a patch
//! transaction.rs  begin, commit through a journal, discard, recovery
//! turns.rs        commits that take turns with other machines' replicas
//! layer.rs        the view handed to a host program, its changes taken back
//! ```
//!
//! The guest's `wasi:filesystem` calls on `/workspace` go to the overlay
//! (see `fsguard/overlay.rs`); the caller of the sandbox decides whether
//! the [`Stage`] a call leaves is committed, held for a yes, or kept as a
//! dry run.

mod changes;
mod layer;
mod overlay;
mod path;
mod transaction;
mod turns;

pub use changes::{Change, ChangeKind, ChangeSet};
pub(crate) use layer::TakeInError;
pub use overlay::{Deny, Found};
pub use path::{Fingerprint, Kind, WsPath, join, rel};
pub use transaction::{CommitError, Recovered, Stage, recover};
pub use turns::{CommitTurn, SharedCommits, share_commits};
// The installer's and the memory store's test-only pause points are this
// module's.
pub use transaction::pause_point;
