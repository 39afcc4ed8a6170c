//! Commits that take turns across machines: replicas that write one
//! workspace on a shared volume, each with its own state folder.
//!
//! The lock file in the state folder serializes the commits of one
//! machine, and the journal there lets that machine finish its own commit
//! after a crash. Neither reaches another machine, so a process whose
//! workspace other machines write too ([`share_commits`]; `serve --state
//! redis://… --shared-workspace`) also takes the workspace's turn in the
//! shared store for each commit, and records the journal there, with the
//! bytes of every file it writes, before it changes anything. Whichever
//! replica takes the next turn finishes a journal a replica left behind
//! (it died, or lost its turn part-way), before it checks its own call
//! for conflicts.
//!
//! A turn is a lease: the store gives it to another replica once its
//! holder has not renewed it for a while, and the holder stops writing
//! before then ([`CommitTurn::keep`] before every change).

use std::io;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// Where commits to a shared workspace take turns and keep their journals.
pub trait SharedCommits: Send + Sync {
    /// Waits for the turn of the workspace named `workspace` (the name the
    /// operator gave it, the same on every replica that writes it), and
    /// holds it until the turn is finished or dropped. Called from a
    /// thread that may block.
    fn turn(&self, workspace: &str) -> io::Result<Box<dyn CommitTurn>>;
}

/// One replica's turn to commit to a workspace. Dropping it gives the turn
/// up and leaves any recorded journal for the next turn to finish.
pub trait CommitTurn: Send {
    /// The journal a turn before this one recorded and did not finish.
    fn pending(&mut self) -> io::Result<Option<Vec<u8>>>;
    /// File `n` of the pending journal, if the store has it.
    fn pending_file(&mut self, n: usize) -> io::Result<Option<Vec<u8>>>;
    /// Stores file `n` of the journal about to be recorded.
    fn put_file(&mut self, n: usize, bytes: &[u8]) -> io::Result<()>;
    /// Records the journal: from here the commit happens, by this replica
    /// or by the next turn. An error means it may or may not be recorded,
    /// except one of kind `PermissionDenied`: the turn was lost first.
    fn record(&mut self, journal: &[u8]) -> io::Result<()>;
    /// Forgets a pending journal that the next turn must not apply again
    /// (finished, or kept aside as unfinishable).
    fn clear(&mut self) -> io::Result<()>;
    /// `Ok` while the turn is surely still this replica's; an error (of
    /// kind `PermissionDenied`) once another replica may have taken it.
    /// Cheap: called before every change and rename.
    fn keep(&mut self) -> io::Result<()>;
    /// Forgets the journal this turn recorded and gives the turn up.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// The one workspace of this process that other machines write too.
struct Registered {
    /// Its transaction folder's name: a hash of its real path.
    key: String,
    /// Its name in the shared store.
    name: String,
    shared: Arc<dyn SharedCommits>,
}

static SHARED: RwLock<Option<Registered>> = RwLock::new(None);

/// Makes every later commit of this process to the workspace at
/// `workspace` take turns through `shared`, under `name`. A process
/// serves one deployment, as it keeps one state folder, so this is set
/// once, where the process learns that its workspace is shared; other
/// workspaces commit as on one machine.
pub fn share_commits(
    workspace: &Path,
    name: &str,
    shared: Arc<dyn SharedCommits>,
) -> io::Result<()> {
    let key = super::path::workspace_key(workspace)?;
    let registered = Registered {
        key,
        name: name.to_string(),
        shared,
    };
    *SHARED.write().unwrap_or_else(|e| e.into_inner()) = Some(registered);
    Ok(())
}

/// The store and the name the commits of the workspace whose transaction
/// folder is named `key` take turns under, if it is shared.
pub(super) fn shared_for(key: &str) -> Option<(String, Arc<dyn SharedCommits>)> {
    let registered = SHARED.read().unwrap_or_else(|e| e.into_inner());
    registered
        .as_ref()
        .filter(|r| r.key == key)
        .map(|r| (r.name.clone(), r.shared.clone()))
}
