//! A staged call as a transaction on the workspace: begin, commit through
//! a journal, discard, and recovery after a crash.
//!
//! Each workspace has a folder in the host's state folder (named by a hash
//! of its real path) with a lock file and one folder per live stage. A
//! stage folder is locked by the process that owns it for as long as it
//! lives, so recovery can tell an abandoned stage from a running call.
//!
//! A commit, under the workspace's lock:
//! 1. checks that nothing the call read or changed was changed by anyone
//!    else since (a conflict discards the stage and writes nothing);
//! 2. writes the journal (`commit.json`, the list of changes in the order
//!    they apply) and syncs it: from here on the commit will happen. A
//!    small commit's journal carries its files' bytes; a larger one's
//!    staged files are synced first (one `syncfs`), so that the journal
//!    never points at what is not on disk;
//! 3. applies each change: deletions, folders, then each file copied next
//!    to its final name and renamed over it;
//! 4. syncs the workspace's file system and deletes the stage.
//!
//! Every step of 3 can be done twice, so recovery finishes a commit that
//! has a journal by applying it again from the start, and discards a stage
//! without one. The workspace is never left between before and after.
//!
//! A process whose state is shared with replicas on other machines also
//! takes the workspace's turn in the shared store after the lock, and
//! records the journal there instead of in step 2 (see `turns.rs`).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;

use super::changes::{self, ChangeSet};
use super::overlay::{Base, Entry, Overlay};
use super::path::{Fingerprint, Kind, WsPath};
use super::turns::CommitTurn;

const JOURNAL: &str = "commit.json";
const JOURNAL_VERSION: u32 = 1;
const UPPER: &str = "upper";
/// In a stage folder whose journal went to the shared store.
const SHIPPED: &str = "shipped";

/// A call's staged changes to one workspace, not yet committed. Dropping
/// it discards them.
#[derive(Debug)]
pub struct Stage {
    pub(crate) overlay: Overlay,
    /// The workspace's transaction folder.
    txn: PathBuf,
    /// This stage's folder in it, once the call changed something.
    folder: Option<Owned>,
    finished: bool,
}

/// A stage folder, locked by this process for as long as it lives.
#[derive(Debug)]
struct Owned {
    path: PathBuf,
    id: String,
    _lock: std::fs::File,
}

/// Why a commit wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    #[error(
        "{} changed while the call ran; nothing was written; run it again",
        list(paths)
    )]
    Conflict { paths: Vec<WsPath> },
    #[error(
        "{} was moved or replaced by another call while this one ran, so its changes \
         would land somewhere else; nothing was written; run it again",
        list(paths)
    )]
    Replaced { paths: Vec<WsPath> },
    #[error("{0}; nothing was written")]
    Refused(String),
    #[error("the workspace changes could not be written ({0}); nothing was written")]
    Io(String),
    #[error(
        "the workspace commit stopped part-way ({0}); the next commit to this workspace \
         finishes it"
    )]
    Interrupted(String),
}

fn list(paths: &[WsPath]) -> String {
    let shown: Vec<String> = paths.iter().take(5).map(|p| format!("`{p}`")).collect();
    let more = paths.len().saturating_sub(5);
    let mut out = shown.join(", ");
    if more > 0 {
        out.push_str(&format!(" and {more} more"));
    }
    out
}

/// The journal: what a commit applies, in order.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Journal {
    version: u32,
    id: String,
    ops: Vec<Op>,
    /// The workspace folders above the changes, as the call staged below
    /// them: recovery applies nothing if one was replaced since.
    #[serde(default)]
    parents: std::collections::BTreeMap<WsPath, Fingerprint>,
    /// The target of every link it makes, in a journal kept in a shared
    /// store (whose files travel with it, by their op's index) or one that
    /// carries its files.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    links: std::collections::BTreeMap<WsPath, String>,
    /// The files a local journal carries itself, by their op's index: a
    /// small commit's, so that its staged files need not reach the disk
    /// before the journal does (`carry`). A release that does not know
    /// this field reads every file from the stage, which is right unless
    /// the machine lost power before the stage reached the disk.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    files: std::collections::BTreeMap<usize, Carried>,
    /// The id recovery names its temporary files by, when not `id`: a
    /// replica recovering another's journal uses its own, so the two never
    /// touch one file, and removes the other's.
    #[serde(skip)]
    tmp_id: Option<String>,
    /// When it was written, in nanoseconds since the epoch, rising within
    /// a process: recovery applies the journals it finds in this order. A
    /// journal whose removal a power loss undid must not be applied after
    /// a later commit's.
    #[serde(default)]
    written: u64,
}

/// A written file's bytes and permission bits, in its journal.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Carried {
    mode: u32,
    /// Base64.
    bytes: String,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
enum Op {
    Remove { path: WsPath },
    RemoveDir { path: WsPath },
    MakeDir { path: WsPath },
    Write { path: WsPath },
    Link { path: WsPath },
}

impl Op {
    fn path(&self) -> &str {
        match self {
            Op::Remove { path }
            | Op::RemoveDir { path }
            | Op::MakeDir { path }
            | Op::Write { path }
            | Op::Link { path } => path,
        }
    }
}

/// The transaction folder of the workspace at `workspace`: in the host's
/// state folder, which must lie outside the workspace. A folder a tool can
/// write to could hold a forged journal, which the next start would apply.
pub(super) fn txn_folder(workspace: &Path) -> io::Result<PathBuf> {
    let real = std::fs::canonicalize(workspace)?;
    let key = super::path::key_of(&real);
    let base = crate::dirs::state_dir().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "there is no state folder (set HOME, XDG_STATE_HOME or SKILLBOX_STATE_DIR)",
        )
    })?;
    create_private(&base)?;
    if std::fs::canonicalize(&base)?.starts_with(&real) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the state folder lies inside the workspace, where a tool could write to it; set \
             SKILLBOX_STATE_DIR to a folder outside the workspace",
        ));
    }
    Ok(base.join("transactions").join(key))
}

fn create_private(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Opens `path` and locks it; `None` when another owner holds it.
fn lock_folder(path: &Path, wait: bool) -> io::Result<Option<std::fs::File>> {
    use rustix::fs::FlockOperation as F;
    let file = std::fs::File::open(path)?;
    let op = if wait {
        F::LockExclusive
    } else {
        F::NonBlockingLockExclusive
    };
    match rustix::fs::flock(&file, op) {
        Ok(()) => Ok(Some(file)),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The workspace's lock: commits and recovery of one workspace take turns,
/// across processes.
fn lock_workspace(txn: &Path) -> io::Result<std::fs::File> {
    create_private(txn)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(txn.join("lock"))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(file)
}

/// Now, in nanoseconds since the epoch, and later than any earlier answer
/// in this process.
fn written_now() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut next = now;
    let _ = LAST.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
        next = now.max(last.saturating_add(1));
        Some(next)
    });
    next
}

fn new_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new stage folder in the transaction folder `txn`, locked. Recovery
/// in another process may take a folder in the moment between its
/// creation and its lock for an abandoned one; then it is gone or locked,
/// and another is made.
fn make_folder(txn: &Path) -> io::Result<Owned> {
    let stages = txn.join("stages");
    if let Some(owned) = take_idle(&stages) {
        return Ok(owned);
    }
    create_private(&stages)?;
    for _ in 0..8 {
        let id = new_id();
        let path = stages.join(&id);
        std::fs::create_dir(&path)?;
        let lock = match lock_folder(&path, false) {
            Ok(Some(lock)) => lock,
            Ok(None) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        match std::fs::create_dir(path.join(UPPER)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
        // The journal's sync covers what is in the folder; this, the
        // folder itself, which a power loss must not take with a journal
        // in it. Reused folders pay it once.
        std::fs::File::open(&stages)?.sync_all()?;
        return Ok(Owned {
            path,
            id,
            _lock: lock,
        });
    }
    Err(io::Error::other("no stage folder could be made"))
}

/// Stage folders emptied after a commit or a discard, still locked by
/// this process, for the next call that writes to the same workspace:
/// making two folders and removing them again took about 0.16 ms of a
/// small commit's 1.2 ms here (ext4's `rmdir` alone about 55 µs).
static IDLE: std::sync::Mutex<Vec<Owned>> = std::sync::Mutex::new(Vec::new());

/// At most this many emptied stage folders wait for reuse.
const MAX_IDLE: usize = 8;

fn idle() -> std::sync::MutexGuard<'static, Vec<Owned>> {
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// An emptied stage folder of the transaction folder whose stages are in
/// `stages`, if one waits and is still there (one removed meanwhile is
/// dropped, and its lock with it).
fn take_idle(stages: &Path) -> Option<Owned> {
    let mut idle = idle();
    while let Some(at) = idle.iter().position(|o| o.path.parent() == Some(stages)) {
        let owned = idle.swap_remove(at);
        if owned.path.join(UPPER).is_dir() {
            return Some(owned);
        }
    }
    None
}

/// Done with a stage folder whose commit is complete or whose changes are
/// discarded: emptied for reuse, or removed.
fn recycle(owned: Owned) {
    if emptied(&owned.path).unwrap_or(false) {
        let mut idle = idle();
        if idle.len() < MAX_IDLE {
            idle.push(owned);
            return;
        }
    }
    let _ = std::fs::remove_dir_all(&owned.path);
}

/// Empties a stage folder for reuse, its journal first (a stage without
/// one is never applied), then what its upper folder holds. Whether the
/// folder now holds an empty upper folder alone; if it holds anything
/// else (a program's layer, the mark of a shared journal), it is left for
/// removal.
fn emptied(folder: &Path) -> io::Result<bool> {
    match std::fs::remove_file(folder.join(JOURNAL)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    if !holds_upper_alone(folder)? {
        return Ok(false);
    }
    for item in std::fs::read_dir(folder.join(UPPER))? {
        let item = item?;
        if item.file_type()?.is_dir() {
            std::fs::remove_dir_all(item.path())?;
        } else {
            std::fs::remove_file(item.path())?;
        }
    }
    Ok(true)
}

impl Stage {
    /// Starts staging changes to the workspace at `workspace`. Nothing is
    /// made on disk until the call's first change ([`Stage::prepare`]).
    pub fn begin(workspace: &Path) -> io::Result<Stage> {
        let lower = Dir::open_ambient_dir(workspace, cap_std::ambient_authority())?;
        Ok(Stage {
            overlay: Overlay::new(lower, None),
            txn: txn_folder(workspace)?,
            folder: None,
            finished: false,
        })
    }

    /// A new stage that starts with this one's changes (for a dry run,
    /// whose next call sees what the earlier ones left).
    pub fn fork(&self, workspace: &Path) -> io::Result<Stage> {
        let txn = txn_folder(workspace)?;
        let owned = make_folder(&txn)?;
        let upper = Dir::open_ambient_dir(owned.path.join(UPPER), cap_std::ambient_authority())?;
        let overlay = if self.overlay.upper.is_some() {
            self.overlay.fork(upper)?
        } else {
            let mut fresh = Overlay::new(self.overlay.lower.try_clone()?, Some(upper));
            fresh.reads = self.overlay.reads.clone();
            fresh
        };
        Ok(Stage {
            overlay,
            txn,
            folder: Some(owned),
            finished: false,
        })
    }

    /// Makes the staging folder, before the call's first change.
    pub fn prepare(&mut self) -> io::Result<()> {
        if self.overlay.upper.is_some() {
            return Ok(());
        }
        let owned = make_folder(&self.txn)?;
        self.overlay.upper = Some(Dir::open_ambient_dir(
            owned.path.join(UPPER),
            cap_std::ambient_authority(),
        )?);
        self.folder = Some(owned);
        Ok(())
    }

    /// An empty folder in this stage's own, for a host program's overlay
    /// (`stage/layer.rs`): on the staged files' file system, so that the
    /// layer can link them, and deleted with the stage.
    pub(crate) fn program_folder(&mut self, name: &str) -> io::Result<PathBuf> {
        self.prepare()?;
        let owned = self
            .folder
            .as_ref()
            .ok_or_else(|| io::Error::other("the call's staging folder was not made"))?;
        let folder = owned.path.join(name);
        match std::fs::remove_dir_all(&folder) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::create_dir(&folder)?;
        Ok(folder)
    }

    /// Whether the call changed nothing.
    pub fn is_empty(&self) -> bool {
        self.overlay.is_empty()
    }

    /// What the call changed so far.
    pub fn changes(&self) -> ChangeSet {
        changes::of(&self.overlay)
    }

    /// A unified diff of the changes, cut at `max_bytes`.
    pub fn excerpt(&self, set: &ChangeSet, max_bytes: usize) -> String {
        changes::excerpt(&self.overlay, set, max_bytes)
    }

    /// A digest of every byte the changes would write, so an approval can
    /// bind to exactly what was staged.
    pub fn content_digest(&self, set: &ChangeSet) -> String {
        changes::content_digest(&self.overlay, set)
    }

    /// The changes as a git-format patch; binary files cannot be in one.
    pub fn patch(&self, set: &ChangeSet) -> Result<String, Vec<String>> {
        changes::patch(&self.overlay, set)
    }

    /// Paths the call read or changed that someone else changed since.
    fn conflicts(&self) -> Vec<WsPath> {
        let now = |path: &str| self.overlay.lower_meta(path).map(|m| Fingerprint::of(&m));
        let mut out = BTreeSet::new();
        for (path, entry) in &self.overlay.entries {
            let moved = match (entry.base(), now(path)) {
                (Base::Absent, None) => false,
                (Base::Absent, Some(_)) | (Base::Was(_), None) => true,
                (Base::Was(before), Some(now)) => !before.still(&now),
            };
            if moved {
                out.insert(path.clone());
            }
        }
        for (path, before) in &self.overlay.reads {
            if !now(path).is_some_and(|n| before.still(&n)) {
                out.insert(path.clone());
            }
        }
        out.into_iter().collect()
    }

    /// The workspace's folders above the call's changes that are no longer
    /// the folders the call staged below: removed, replaced by another
    /// folder, or by a link. Writing by path would then follow the link
    /// (into a skill folder, or out of the workspace) or land where the
    /// call never looked.
    fn replaced_parents(&self) -> Vec<WsPath> {
        replaced(&self.overlay.lower, &self.overlay.parents)
    }

    /// Judges every change once more where it will really land, after the
    /// folders above it were checked: no change in a project skill folder,
    /// and no link that leads out of the workspace or into such a folder.
    fn check_landing(&self, ops: &[Op]) -> Result<(), CommitError> {
        landing(&self.overlay, ops).map_err(CommitError::Refused)
    }

    /// Writes the changes into the workspace, wholly, or refuses and
    /// writes nothing.
    pub fn commit(mut self) -> Result<ChangeSet, CommitError> {
        let io_error = |e: io::Error| CommitError::Io(e.kind().to_string());
        if self.overlay.is_empty() {
            // Nothing to write: nothing can conflict either.
            return Ok(ChangeSet::default());
        }
        let set = self.changes();
        let _lock = lock_workspace(&self.txn).map_err(io_error)?;
        // A commit another process left half-done lands first, so that it
        // counts as someone else's change here.
        for recovered in recover_locked(&self.txn, &self.overlay.lower).map_err(io_error)? {
            tracing::warn!("{}", recovered.message());
        }
        let mut turn = match super::turns::shared_for(&txn_key(&self.txn)) {
            Some((name, shared)) => Some(
                shared
                    .turn(&name)
                    .map_err(|e| CommitError::Io(reason(&e)))?,
            ),
            None => None,
        };
        if let Some(turn) = turn.as_mut() {
            // So does one another replica left half-done.
            let recovered = recover_shared(&self.txn, &self.overlay.lower, turn.as_mut())
                .map_err(|e| CommitError::Io(reason(&e)))?;
            if let Some(recovered) = recovered {
                tracing::warn!("{}", recovered.message());
            }
        }
        let replaced = self.replaced_parents();
        if !replaced.is_empty() {
            return Err(CommitError::Replaced { paths: replaced });
        }
        let conflicts = self.conflicts();
        if !conflicts.is_empty() {
            return Err(CommitError::Conflict { paths: conflicts });
        }
        let ops = ops_of(&self.overlay);
        self.check_landing(&ops)?;
        let upper = self.overlay.up().map_err(io_error)?;
        let folder = self
            .folder
            .as_ref()
            .ok_or_else(|| CommitError::Io("the call's staging folder is missing".into()))?;
        let mut journal = Journal {
            version: JOURNAL_VERSION,
            id: folder.id.clone(),
            ops,
            parents: self.overlay.parents.clone(),
            links: Default::default(),
            files: Default::default(),
            tmp_id: None,
            written: written_now(),
        };
        // What the journal points at is on disk before the journal, unless
        // the journal carries it.
        let carried = turn.is_none() && carry(upper, &mut journal).map_err(io_error)?;
        if !carried {
            sync_file_system(upper).map_err(io_error)?;
        }
        match turn.as_mut() {
            None => write_journal(&folder.path, &journal).map_err(io_error)?,
            Some(turn) => {
                // So that this machine's next start, finding the folder
                // after a crash, knows the store holds its journal.
                std::fs::write(folder.path.join(SHIPPED), b"").map_err(io_error)?;
                ship(upper, &mut journal, turn.as_mut())?;
            }
        }
        pause_point("commit-after-journal");
        // From here the commit happens: now, or at the next recovery, from
        // this folder's journal, or the store's (then this folder, which
        // has none, goes with the stage).
        self.finished = turn.is_none();
        let keeping = turn.as_mut().map(|t| &mut **t as &mut dyn CommitTurn);
        apply(&self.overlay.lower, upper, &journal, keeping)
            .map_err(|e| CommitError::Interrupted(reason(&e)))?;
        if let Some(turn) = turn
            && let Err(e) = turn.finish()
        {
            // Every change is in; the next turn applies them again, which
            // leaves the same files.
            tracing::warn!(
                "a workspace commit is complete, but the shared store did not forget its \
                 journal ({}); the next commit to the workspace applies it again",
                reason(&e)
            );
        }
        if let Some(owned) = self.folder.take() {
            recycle(owned);
        }
        Ok(set)
    }
}

/// What an I/O error says to a person: its own message when the host made
/// it (the shared store's say what happened), its kind otherwise, which
/// never names a host path.
fn reason(e: &io::Error) -> String {
    match e.get_ref() {
        Some(inner) => inner.to_string(),
        None => e.kind().to_string(),
    }
}

/// The workspace's key: the name of its transaction folder `txn`.
fn txn_key(txn: &Path) -> String {
    txn.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Records `journal` in the shared store, with every file it writes and
/// the target of every link it makes. If the store cannot say whether it
/// was recorded, the journal is taken back; failing that, the commit may
/// still happen at the next turn, and the error says so.
fn ship(upper: &Dir, journal: &mut Journal, turn: &mut dyn CommitTurn) -> Result<(), CommitError> {
    let nothing = |e: io::Error| CommitError::Io(reason(&e));
    for (n, op) in journal.ops.iter().enumerate() {
        match op {
            Op::Write { path } => {
                let bytes = upper.read(path).map_err(nothing)?;
                turn.keep().map_err(nothing)?;
                turn.put_file(n, &bytes).map_err(nothing)?;
            }
            Op::Link { path } => {
                let target = upper.read_link_contents(path).map_err(nothing)?;
                journal
                    .links
                    .insert(path.clone(), target.to_string_lossy().into_owned());
            }
            _ => {}
        }
    }
    let bytes = serde_json::to_vec(journal).map_err(|e| CommitError::Io(e.to_string()))?;
    turn.keep().map_err(nothing)?;
    if let Err(e) = turn.record(&bytes) {
        if e.kind() == io::ErrorKind::PermissionDenied {
            // The turn was lost before the journal could be recorded.
            return Err(nothing(e));
        }
        return Err(match turn.clear() {
            Ok(()) => nothing(e),
            Err(_) => CommitError::Interrupted(format!(
                "the shared store did not confirm its journal: {}; if it was recorded, the \
                 next commit to this workspace applies it",
                reason(&e)
            )),
        });
    }
    Ok(())
}

/// Finishes the journal a replica recorded in the shared store and left
/// unfinished: its files are written to a stage folder of this process,
/// and it is applied as recovery applies a local one, renewing the turn
/// as it goes. One that can never be finished (it names a path no commit
/// writes, or the workspace moved on under it) is kept aside here, like a
/// local one, and forgotten by the store, so the workspace is not refused
/// for ever. On any other error (the store, the disk) the journal stays
/// for the next turn, and this commit writes nothing.
fn recover_shared(
    txn: &Path,
    lower: &Dir,
    turn: &mut dyn CommitTurn,
) -> io::Result<Option<Recovered>> {
    let Some(bytes) = turn.pending()? else {
        return Ok(None);
    };
    #[derive(serde::Deserialize)]
    struct Version {
        version: u32,
    }
    // The version first: a newer journal may not parse as this one.
    let version = serde_json::from_slice::<Version>(&bytes).map(|v| v.version);
    if version.as_ref().is_ok_and(|v| *v != JOURNAL_VERSION) {
        return Err(io::Error::other(
            "a replica of another version left a commit to this workspace that this one \
             cannot finish; run the call on a replica of that version",
        ));
    }
    let mut journal = match serde_json::from_slice::<Journal>(&bytes) {
        Ok(journal) if version.is_ok() => journal,
        _ => {
            let why = "its journal could not be read".to_string();
            return keep_aside(txn, None, &bytes, turn, why);
        }
    };
    if let Some(why) = unfinishable(&journal) {
        return keep_aside(txn, None, &bytes, turn, why);
    }
    journal.tmp_id = Some(new_id());
    let owned = make_folder(txn)?;
    std::fs::write(owned.path.join(SHIPPED), b"")?;
    let finished = unpack(&owned.path, &journal, turn)
        .and_then(|()| finish(lower, &owned.path, &journal, Some(turn)));
    match finished {
        Ok(()) => {
            std::fs::remove_dir_all(&owned.path)?;
            turn.clear()?;
            Ok(Some(Recovered::Finished {
                changes: journal.ops.len(),
            }))
        }
        Err(Unfinished::Refused(why)) => keep_aside(txn, Some(owned), &bytes, turn, why),
        Err(Unfinished::Stopped(e)) => {
            let _ = std::fs::remove_dir_all(&owned.path);
            Err(e)
        }
    }
}

/// Why a shared journal can never be applied, judged before anything of
/// it is written here: a path no commit writes, a link without a target,
/// or an id that is not one a host makes (it names the temporary files
/// next to every change).
fn unfinishable(journal: &Journal) -> Option<String> {
    let id_ok = !journal.id.is_empty()
        && journal.id.len() <= 64
        && journal
            .id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-');
    if !id_ok {
        return Some("its journal's id is not one this host makes".into());
    }
    if let Some(why) = bad_path(journal) {
        return Some(why);
    }
    if !journal.files.is_empty() {
        // A shared journal's files travel beside it in the store.
        return Some("its journal carries files, which a shared journal never does".into());
    }
    journal
        .ops
        .iter()
        .find(|op| matches!(op, Op::Link { path } if !journal.links.contains_key(path)))
        .map(|op| format!("its journal has no target for the link `{}`", op.path()))
}

/// Keeps a shared journal that can never be finished aside in this state
/// folder, with its files if they were unpacked, and has the store forget
/// it, so the workspace is not refused for ever.
fn keep_aside(
    txn: &Path,
    unpacked: Option<Owned>,
    journal: &[u8],
    turn: &mut dyn CommitTurn,
    why: String,
) -> io::Result<Option<Recovered>> {
    let failed = txn.join("failed");
    create_private(&failed)?;
    let (folder, id) = match &unpacked {
        Some(owned) => (owned.path.clone(), owned.id.clone()),
        None => {
            let id = new_id();
            let folder = failed.join(&id);
            create_private(&folder)?;
            (folder, id)
        }
    };
    std::fs::write(folder.join(JOURNAL), journal)?;
    if unpacked.is_some() {
        std::fs::rename(&folder, failed.join(&id))?;
    }
    turn.clear()?;
    Ok(Some(Recovered::Failed { why }))
}

/// Writes the files of a shared journal into the stage folder `folder`,
/// by the journal's paths (already judged: [`unfinishable`]); its links
/// are placed by [`restore`], as [`finish`] applies it.
fn unpack(folder: &Path, journal: &Journal, turn: &mut dyn CommitTurn) -> Result<(), Unfinished> {
    let upper = Dir::open_ambient_dir(folder.join(UPPER), cap_std::ambient_authority())
        .map_err(Unfinished::Stopped)?;
    fill(&upper, journal, |n, path| {
        turn.keep().map_err(Unfinished::Stopped)?;
        let bytes = turn.pending_file(n).map_err(Unfinished::Stopped)?;
        match bytes {
            Some(bytes) => Ok(Some((bytes, None))),
            None => Err(Unfinished::Refused(format!(
                "the shared store lacks its file `{path}`"
            ))),
        }
    })
}

/// Writes into `upper` the files and links a journal carries, so that
/// applying it does not depend on what of the stage reached the disk.
fn restore(upper: &Dir, journal: &Journal) -> Result<(), Unfinished> {
    use base64::Engine as _;
    for op in &journal.ops {
        if let (Op::Link { path }, Some(target)) = (op, journal.links.get(op.path())) {
            make_parent(upper, path)?;
            remove_if_there(upper, path)?;
            upper.symlink(target, path).map_err(Unfinished::Stopped)?;
        }
    }
    fill(upper, journal, |n, path| {
        let Some(carried) = journal.files.get(&n) else {
            return Ok(None);
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&carried.bytes)
            .map_err(|_| {
                Unfinished::Refused(format!("its journal's copy of `{path}` is not base64"))
            })?;
        // Set-id bits are not carried.
        Ok(Some((bytes, Some(carried.mode & 0o777))))
    })
}

fn make_parent(upper: &Dir, path: &str) -> Result<(), Unfinished> {
    match path.rsplit_once('/') {
        Some((parent, _)) => upper.create_dir_all(parent).map_err(Unfinished::Stopped),
        None => Ok(()),
    }
}

fn remove_if_there(upper: &Dir, path: &str) -> Result<(), Unfinished> {
    match upper.remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Unfinished::Stopped(e)),
        _ => Ok(()),
    }
}

/// Writes each file of `journal` whose bytes `bytes_of` gives (with its
/// permission bits, if known) into `upper`.
fn fill(
    upper: &Dir,
    journal: &Journal,
    mut bytes_of: impl FnMut(usize, &str) -> Result<Option<(Vec<u8>, Option<u32>)>, Unfinished>,
) -> Result<(), Unfinished> {
    use cap_std::fs::PermissionsExt;
    for (n, op) in journal.ops.iter().enumerate() {
        let Op::Write { path } = op else { continue };
        let Some((bytes, mode)) = bytes_of(n, path)? else {
            continue;
        };
        make_parent(upper, path)?;
        // What is there may be read-only (a staged copy keeps the
        // workspace file's mode), or half-written.
        remove_if_there(upper, path)?;
        upper.write(path, bytes).map_err(Unfinished::Stopped)?;
        if let Some(mode) = mode {
            let permissions = cap_std::fs::Permissions::from_mode(mode);
            upper
                .set_permissions(path, permissions)
                .map_err(Unfinished::Stopped)?;
        }
    }
    Ok(())
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.finished
            && let Some(owned) = self.folder.take()
        {
            recycle(owned);
        }
    }
}

fn ops_of(overlay: &Overlay) -> Vec<Op> {
    let mut removals = Vec::new();
    let mut rest = Vec::new();
    for (path, entry) in overlay.plan() {
        let was = match entry.base() {
            Base::Was(b) => Some(b.kind),
            Base::Absent => None,
        };
        let path_op = |kind: Option<Kind>| match kind {
            Some(Kind::Dir) => Some(Op::RemoveDir { path: path.clone() }),
            Some(_) => Some(Op::Remove { path: path.clone() }),
            None => None,
        };
        match entry {
            Entry::Gone { base } => removals.extend(path_op(Some(base.kind))),
            Entry::Dir { .. } => {
                if was.is_some_and(|k| k != Kind::Dir) {
                    removals.extend(path_op(was));
                }
                rest.push(Op::MakeDir { path });
            }
            Entry::File { .. } | Entry::Link { .. } => {
                if was == Some(Kind::Dir) {
                    removals.extend(path_op(was));
                }
                rest.push(if matches!(entry, Entry::File { .. }) {
                    Op::Write { path }
                } else {
                    Op::Link { path }
                });
            }
        }
    }
    removals.into_iter().chain(rest).collect()
}

/// The folders of `parents` that are no longer the folders recorded:
/// removed, replaced by another folder, or by a link.
fn replaced(lower: &Dir, parents: &std::collections::BTreeMap<WsPath, Fingerprint>) -> Vec<WsPath> {
    parents
        .iter()
        .filter(|(path, before)| {
            let now = lower
                .symlink_metadata(super::path::rel(path))
                .ok()
                .map(|m| Fingerprint::of(&m));
            !now.is_some_and(|now| now.kind == Kind::Dir && now.ino == before.ino)
        })
        .map(|(path, _)| path.clone())
        .collect()
}

/// Where each change lands, judged once more: no change in a project
/// skill folder (as written and as resolved), and every link by the rule
/// that held when it was staged ([`Overlay::link_refusal`]). `Err` says
/// which, for the person.
fn landing(overlay: &Overlay, ops: &[Op]) -> Result<(), String> {
    use crate::protect::{self, Last};
    let lower = &overlay.lower;
    let root = protect::fd_path(lower);
    for op in ops {
        let path = op.path();
        if !journal_path_ok(path) {
            return Err(format!(
                "refused to write `{path}`: a workspace's .agents/skills and .claude/skills \
                 folders are protected from tools"
            ));
        }
        protect::check_change(lower, path, Last::Link).map_err(|r| r.message("change"))?;
        if let Op::Link { .. } = op {
            let target = overlay
                .up()
                .and_then(|upper| upper.read_link_contents(path))
                .map_err(|e| format!("the staged link `{path}` cannot be read ({})", e.kind()))?;
            if let Some(why) =
                overlay.link_refusal(root.as_deref(), path, &target.to_string_lossy())
            {
                return Err(why);
            }
        }
    }
    Ok(())
}

/// The folder that holds `path`, opened one name at a time without
/// following a link, and the last name. A commit writes through this
/// handle, so a folder on the way that became a link since the checks
/// (a local program racing the commit) stops it instead of leading it
/// elsewhere.
fn parent_of<'p>(lower: &Dir, path: &'p str) -> io::Result<(Dir, &'p str)> {
    use rustix::fs::{Mode, OFlags};
    let (folder, name) = path.rsplit_once('/').unwrap_or(("", path));
    let mut dir = lower.try_clone()?;
    for part in folder.split('/').filter(|p| !p.is_empty()) {
        let fd = rustix::fs::openat(
            &dir,
            part,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        dir = Dir::from_std_file(std::fs::File::from(fd));
    }
    Ok((dir, name))
}

/// The most a journal carries of the files a commit writes; a larger
/// commit's files are synced to disk before its journal instead.
const CARRY_MAX_BYTES: u64 = 256 * 1024;

/// Puts into `journal` the bytes of every file it writes and the target
/// of every link it makes, if they come to at most [`CARRY_MAX_BYTES`]:
/// then nothing of the stage need be on disk before the journal, and the
/// commit saves the sync of the stage's file system, which flushes
/// everything written there (other programs' files too). Returns whether
/// the journal carries everything; if not, it carries nothing.
fn carry(upper: &Dir, journal: &mut Journal) -> io::Result<bool> {
    use base64::Engine as _;
    use cap_std::fs::PermissionsExt;
    use io::Read as _;
    let mut total = 0u64;
    for op in &journal.ops {
        if let Op::Write { path } = op {
            total += upper.symlink_metadata(path)?.len();
            if total > CARRY_MAX_BYTES {
                return Ok(false);
            }
        }
    }
    let mut files = std::collections::BTreeMap::new();
    let mut links = std::collections::BTreeMap::new();
    for (n, op) in journal.ops.iter().enumerate() {
        match op {
            Op::Write { path } => {
                let mut file = upper.open(path)?;
                let mode = file.metadata()?.permissions().mode();
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)?;
                let bytes = base64::engine::general_purpose::STANDARD.encode(bytes);
                files.insert(n, Carried { mode, bytes });
            }
            Op::Link { path } => {
                let target = upper.read_link_contents(path)?;
                let Some(target) = target.to_str() else {
                    return Ok(false);
                };
                links.insert(path.clone(), target.to_string());
            }
            _ => {}
        }
    }
    journal.files = files;
    journal.links = links;
    Ok(true)
}

fn write_journal(folder: &Path, journal: &Journal) -> io::Result<()> {
    use std::io::Write;
    let tmp = folder.join(format!("{JOURNAL}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&serde_json::to_vec(journal).map_err(io::Error::other)?)?;
    file.sync_all()?;
    std::fs::rename(&tmp, folder.join(JOURNAL))?;
    std::fs::File::open(folder)?.sync_all()
}

/// Applies a journal to the workspace. Safe to run again after a crash
/// part-way: every step leaves the same result when done twice.
fn apply(
    lower: &Dir,
    upper: &Dir,
    journal: &Journal,
    mut turn: Option<&mut dyn CommitTurn>,
) -> io::Result<()> {
    for (n, op) in journal.ops.iter().enumerate() {
        if let Some(turn) = turn.as_deref_mut() {
            turn.keep()?;
        }
        let done = parent_of(lower, op.path()).and_then(|(parent, name)| match op {
            Op::Remove { .. } => parent.remove_file(name),
            Op::RemoveDir { .. } => parent.remove_dir(name),
            Op::MakeDir { .. } => parent.create_dir(name),
            Op::Write { path } | Op::Link { path } => {
                let tmp = format!(
                    ".skillbox-commit-{}-{n}",
                    journal.tmp_id.as_deref().unwrap_or(&journal.id)
                );
                if journal.tmp_id.is_some() {
                    let _ = parent.remove_file(format!(".skillbox-commit-{}-{n}", journal.id));
                }
                let _ = parent.remove_file(&tmp);
                if matches!(op, Op::Write { .. }) {
                    upper.copy(path, &parent, &tmp)?;
                } else {
                    parent.symlink(upper.read_link_contents(path)?, &tmp)?;
                }
                // A large copy can outlast the turn; the rename is the write
                // that counts.
                if let Some(turn) = turn.as_deref_mut()
                    && let Err(e) = turn.keep()
                {
                    let _ = parent.remove_file(&tmp);
                    return Err(e);
                }
                parent.rename(&tmp, &parent, name)
            }
        });
        match done {
            Ok(()) => {}
            Err(e) if already_done(lower, op, &e) => {}
            Err(e) => return Err(e),
        }
        if n == 0 {
            pause_point("commit-mid");
        }
    }
    // Once, for every file and folder changed: the journal is deleted only
    // after this, so a power loss before it is finished by recovery.
    sync_file_system(lower)
}

/// Whether `op` failed because it was applied before (a journal applied
/// again after a crash part-way), or because the workspace moved on in a
/// way that leaves nothing for it to do.
fn already_done(lower: &Dir, op: &Op, e: &io::Error) -> bool {
    let now = lower.symlink_metadata(op.path()).ok();
    match op {
        Op::Remove { .. } => e.kind() == io::ErrorKind::NotFound || now.is_some_and(|m| m.is_dir()),
        // A folder someone else filled since is left with their files.
        Op::RemoveDir { .. } => {
            matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) || now.is_some_and(|m| !m.is_dir())
        }
        Op::MakeDir { .. } => e.kind() == io::ErrorKind::AlreadyExists,
        Op::Write { .. } | Op::Link { .. } => false,
    }
}

/// Flushes the file system that holds `dir` (one call for every file a
/// commit wrote, instead of one per file). The handle cap-std keeps may
/// not be open for reading, so the folder is opened again.
fn sync_file_system(dir: &Dir) -> io::Result<()> {
    let handle = dir.open(".")?;
    rustix::fs::syncfs(&handle)?;
    Ok(())
}

/// What recovery did to one abandoned stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// A commit had begun: it was finished, with this many changes.
    Finished { changes: usize },
    /// A call had not finished: its staged changes were dropped.
    Discarded,
    /// A commit had begun and could not be finished: its stage is kept
    /// aside in the state folder.
    Failed { why: String },
}

impl Recovered {
    pub fn message(&self) -> String {
        match self {
            Recovered::Finished { changes } => format!(
                "finished a workspace commit that was interrupted ({changes} {}): the \
                 workspace now has all of that call's changes",
                if *changes == 1 { "change" } else { "changes" }
            ),
            Recovered::Discarded => "discarded the staged changes of a call that did not \
                                     finish: the workspace is as it was before that call"
                .into(),
            Recovered::Failed { why } => format!(
                "could not finish a workspace commit that was interrupted ({why}); the \
                 workspace may hold part of that call's changes, and its staged files are \
                 kept in the state folder (transactions/*/failed)"
            ),
        }
    }
}

/// Finishes or undoes what calls that died left for the workspace at
/// `workspace`: a commit with a journal is finished, a stage without one
/// is dropped. Stages of calls still running (in any process) are left.
pub fn recover(workspace: &Path) -> io::Result<Vec<Recovered>> {
    let txn = match txn_folder(workspace) {
        Ok(txn) => txn,
        // No state folder, or one inside the workspace: no call could have
        // staged anything for it.
        Err(e)
            if e.get_ref().is_some()
                && matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) =>
        {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    if !txn.join("stages").is_dir() {
        return Ok(Vec::new());
    }
    let _lock = lock_workspace(&txn)?;
    let lower = Dir::open_ambient_dir(workspace, cap_std::ambient_authority())?;
    recover_locked(&txn, &lower)
}

/// [`recover`] with the workspace's lock held.
fn recover_locked(txn: &Path, lower: &Dir) -> io::Result<Vec<Recovered>> {
    let stages = txn.join("stages");
    let Ok(items) = std::fs::read_dir(&stages) else {
        return Ok(Vec::new());
    };
    let mut done = Vec::new();
    let mut journals = Vec::new();
    for item in items.flatten() {
        let folder = item.path();
        let Some(owner) = lock_folder(&folder, false)? else {
            continue;
        };
        if folder.join(SHIPPED).exists() && !folder.join(JOURNAL).exists() {
            // Its commit is the shared store's to finish, at the next
            // commit to the workspace on any replica.
            std::fs::remove_dir_all(&folder)?;
            continue;
        }
        let journal = std::fs::read(folder.join(JOURNAL)).ok();
        match journal.and_then(|j| serde_json::from_slice::<Journal>(&j).ok()) {
            Some(journal) if journal.version == JOURNAL_VERSION => {
                journals.push((journal, folder, item.file_name(), owner));
            }
            _ => {
                // An emptied folder a process kept for reuse held no
                // changes to discard.
                if !holds_nothing(&folder) {
                    done.push(Recovered::Discarded);
                }
                std::fs::remove_dir_all(&folder)?;
            }
        }
    }
    // Oldest first: each lands as its commit did, before the next.
    journals.sort_by_key(|(journal, ..)| journal.written);
    for (journal, folder, name, _owner) in journals {
        match finish(lower, &folder, &journal, None).map_err(Unfinished::why) {
            Ok(()) => {
                done.push(Recovered::Finished {
                    changes: journal.ops.len(),
                });
                std::fs::remove_dir_all(&folder)?;
            }
            Err(why) => {
                // Kept aside, so the workspace is not refused for ever,
                // and the staged files are not lost.
                let failed = txn.join("failed");
                create_private(&failed)?;
                std::fs::rename(&folder, failed.join(name))?;
                done.push(Recovered::Failed { why });
            }
        }
    }
    Ok(done)
}

/// Whether a stage folder holds nothing but its upper folder (no
/// journal, no program's layer, no mark of a shared journal).
fn holds_upper_alone(folder: &Path) -> io::Result<bool> {
    for item in std::fs::read_dir(folder)? {
        if item?.file_name() != UPPER {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether a stage folder holds no journal and nothing staged.
fn holds_nothing(folder: &Path) -> bool {
    holds_upper_alone(folder).unwrap_or(false)
        && std::fs::read_dir(folder.join(UPPER)).is_ok_and(|mut items| items.next().is_none())
}

/// Applies an abandoned stage's journal, after checking that it is one
/// this host wrote: a folder of this user, not a link, and only paths
/// inside the workspace that no tool may change.
fn finish(
    lower: &Dir,
    folder: &Path,
    journal: &Journal,
    turn: Option<&mut dyn CommitTurn>,
) -> Result<(), Unfinished> {
    checked(lower, folder, journal).map_err(Unfinished::Refused)?;
    let upper = Dir::open_ambient_dir(folder.join(UPPER), cap_std::ambient_authority())
        .map_err(Unfinished::Stopped)?;
    restore(&upper, journal)?;
    // The landing is judged again, as at commit, against the workspace as
    // it is now.
    let view = Overlay::new(lower.try_clone().map_err(Unfinished::Stopped)?, Some(upper));
    landing(&view, &journal.ops).map_err(Unfinished::Refused)?;
    let upper = view.up().map_err(Unfinished::Stopped)?;
    apply(lower, upper, journal, turn).map_err(Unfinished::Stopped)
}

/// Why recovery did not finish a journal.
#[derive(Debug)]
enum Unfinished {
    /// It never will: the journal or the workspace says so.
    Refused(String),
    /// Not now: the shared store or a file system failed here, which
    /// another replica, or a later turn, may not; a shared journal stays
    /// for the next turn.
    Stopped(io::Error),
}

impl Unfinished {
    fn why(self) -> String {
        match self {
            Unfinished::Refused(why) => why,
            Unfinished::Stopped(e) => reason(&e),
        }
    }
}

/// Whether an abandoned stage's journal is one this host wrote: in a
/// folder of this user, not a link, naming only paths inside the workspace
/// that no tool may change, below folders that are still the ones the call
/// staged below.
fn checked(lower: &Dir, folder: &Path, journal: &Journal) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let upper_path = folder.join(UPPER);
    let mine = [folder, upper_path.as_path()].iter().all(|p| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == rustix::process::getuid().as_raw())
    });
    if !mine {
        return Err("its staging folder is not one this host made".into());
    }
    if let Some(why) = bad_path(journal) {
        return Err(why);
    }
    // A folder the call itself removes or replaces may already be gone
    // when a commit stopped part-way; its own change covers it.
    let parents = journal
        .parents
        .iter()
        .filter(|(path, _)| !journal.ops.iter().any(|op| op.path() == path.as_str()))
        .map(|(path, fingerprint)| (path.clone(), *fingerprint))
        .collect();
    let moved = replaced(lower, &parents);
    if !moved.is_empty() {
        return Err(format!(
            "{} was moved or replaced since the call staged its changes",
            list(&moved)
        ));
    }
    Ok(())
}

/// The first path of `journal` that no commit writes, said for a person.
fn bad_path(journal: &Journal) -> Option<String> {
    let bad = journal
        .ops
        .iter()
        .map(Op::path)
        .find(|p| !journal_path_ok(p))?;
    Some(format!("its journal names `{bad}`, which no commit writes"))
}

/// A path a journal may name: inside the workspace, as written, and not
/// in a project skill folder.
fn journal_path_ok(path: &str) -> bool {
    let normal = super::path::join("", path).is_some_and(|p| p == path && !p.is_empty());
    let parts: Vec<&str> = path.split('/').collect();
    let protected = parts.windows(2).any(|w| {
        (w[0].eq_ignore_ascii_case(".agents") || w[0].eq_ignore_ascii_case(".claude"))
            && w[1].eq_ignore_ascii_case("skills")
    });
    normal && !protected
}

/// A test build's pause point: with `SKILLBOX_TEST_PAUSE_AT=NAME`, the
/// process says so on stderr and waits there to be killed, so a test can
/// `kill -9` it at exactly this step. Release builds have none.
pub fn pause_point(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("SKILLBOX_TEST_PAUSE_AT").is_ok_and(|at| at == name) {
        eprintln!("skillbox: paused at {name}");
        loop {
            std::thread::park();
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace with the folders `dirs`, and a stage on it.
    fn staged(dirs: &[&str]) -> (tempfile::TempDir, Stage) {
        let ws = tempfile::tempdir().unwrap();
        for dir in dirs {
            std::fs::create_dir_all(ws.path().join(dir)).unwrap();
        }
        let mut stage = Stage::begin(ws.path()).unwrap();
        stage.prepare().unwrap();
        (ws, stage)
    }

    fn write(stage: &mut Stage, path: &str, text: &str) {
        stage.overlay.stage_new_file(path).unwrap();
        stage.overlay.up().unwrap().write(path, text).unwrap();
    }

    /// The journal a commit of `stage` would write, not yet carrying files.
    fn journal_of(stage: &Stage, written: u64) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            id: stage.folder.as_ref().unwrap().id.clone(),
            ops: ops_of(&stage.overlay),
            parents: stage.overlay.parents.clone(),
            links: Default::default(),
            files: Default::default(),
            tmp_id: None,
            written,
        }
    }

    #[test]
    fn a_commit_writes_every_change_and_leaves_no_stage() {
        let (ws, mut stage) = staged(&["docs"]);
        stage.overlay.mkdir("docs/new").unwrap();
        write(&mut stage, "docs/new/a.txt", "a");
        let set = stage.commit().unwrap();
        assert_eq!(set.files(), 2);
        assert_eq!(
            std::fs::read_to_string(ws.path().join("docs/new/a.txt")).unwrap(),
            "a"
        );
    }

    #[test]
    fn a_folder_replaced_by_a_link_after_staging_is_a_conflict() {
        // The red team's race: the call stages under `.claude/l`, another
        // call makes `.claude/l` a link to `.claude`, and the commit
        // would write `.claude/skills/evil/SKILL.md`.
        let (ws, mut stage) = staged(&[".claude/l"]);
        stage.overlay.mkdir(".claude/l/skills").unwrap();
        stage.overlay.mkdir(".claude/l/skills/evil").unwrap();
        write(&mut stage, ".claude/l/skills/evil/SKILL.md", "evil");
        std::fs::remove_dir(ws.path().join(".claude/l")).unwrap();
        std::os::unix::fs::symlink(".", ws.path().join(".claude/l")).unwrap();
        let err = stage.commit().unwrap_err();
        assert!(
            matches!(&err, CommitError::Replaced { paths } if paths == &[".claude/l".to_string()]),
            "{err:?}"
        );
        assert!(err.to_string().contains("nothing was written"), "{err}");
        assert!(!ws.path().join(".claude/skills").exists());
    }

    #[test]
    fn a_folder_replaced_by_another_folder_is_a_conflict_too() {
        let (ws, mut stage) = staged(&["a/b"]);
        write(&mut stage, "a/b/x.txt", "x");
        std::fs::rename(ws.path().join("a/b"), ws.path().join("a/old")).unwrap();
        std::fs::create_dir(ws.path().join("a/b")).unwrap();
        let err = stage.commit().unwrap_err();
        assert!(matches!(err, CommitError::Replaced { .. }), "{err:?}");
        assert!(!ws.path().join("a/b/x.txt").exists());
    }

    #[test]
    fn a_staged_link_that_would_lead_out_after_a_swap_is_never_written() {
        let (ws, mut stage) = staged(&["a/b/c/d"]);
        for dir in ["a/b/c/d/x", "a/b/c/d/x/y", "a/b/c/d/x/y/z"] {
            stage.overlay.mkdir(dir).unwrap();
        }
        stage
            .overlay
            .symlink("../../../../../../../etc/passwd", "a/b/c/d/x/y/z/esc")
            .unwrap();
        std::fs::remove_dir(ws.path().join("a/b/c/d")).unwrap();
        std::os::unix::fs::symlink("../../..", ws.path().join("a/b/c/d")).unwrap();
        let err = stage.commit().unwrap_err();
        assert!(matches!(err, CommitError::Replaced { .. }), "{err:?}");
        assert!(std::fs::symlink_metadata(ws.path().join("x")).is_err());
    }

    #[test]
    fn a_commit_never_follows_a_link_swapped_in_after_its_checks() {
        // A local program swaps `x` for a link to `.claude` between the
        // commit's checks and its writes (here: straight before `apply`),
        // and a crash leaves the journal for recovery: neither writes
        // through the link.
        let (ws, mut stage) = staged(&["x", ".claude"]);
        stage.overlay.mkdir("x/skills").unwrap();
        write(&mut stage, "x/skills/SKILL.md", "evil");
        let upper = stage.overlay.up().unwrap().try_clone().unwrap();
        let journal = Journal {
            version: JOURNAL_VERSION,
            id: "t".into(),
            ops: ops_of(&stage.overlay),
            parents: stage.overlay.parents.clone(),
            links: Default::default(),
            files: Default::default(),
            tmp_id: None,
            written: 0,
        };
        std::fs::rename(ws.path().join("x"), ws.path().join("old")).unwrap();
        std::os::unix::fs::symlink(".claude", ws.path().join("x")).unwrap();
        assert!(apply(&stage.overlay.lower, &upper, &journal, None).is_err());
        let folder = stage.folder.as_ref().unwrap().path.clone();
        let why = finish(&stage.overlay.lower, &folder, &journal, None)
            .map_err(Unfinished::why)
            .unwrap_err();
        assert!(why.contains("`x` was moved or replaced"), "{why}");
        assert!(!ws.path().join(".claude/skills").exists());
    }

    #[test]
    fn a_journal_that_carries_its_files_is_finished_without_the_stage_on_disk() {
        // A power loss after the journal's sync can take the stage's files,
        // which a small commit no longer syncs first: recovery writes them
        // again from the journal, with their permission bits.
        use std::os::unix::fs::PermissionsExt;
        let (ws, mut stage) = staged(&["docs"]);
        write(&mut stage, "docs/run.sh", "#!/bin/sh\necho hi\n");
        write(&mut stage, "docs/gone.txt", "gone");
        stage.overlay.symlink("run.sh", "docs/latest").unwrap();
        let upper = stage.overlay.up().unwrap().try_clone().unwrap();
        let mode = |bits| cap_std::fs::Permissions::from_std(std::fs::Permissions::from_mode(bits));
        upper.set_permissions("docs/run.sh", mode(0o755)).unwrap();
        let mut journal = journal_of(&stage, 0);
        assert!(carry(&upper, &mut journal).unwrap());
        let folder = stage.folder.as_ref().unwrap().path.clone();
        write_journal(&folder, &journal).unwrap();
        // Half-written and read-only (as a staged copy of a read-only
        // workspace file is), and linked to a file elsewhere, which
        // recovery must not write through.
        let elsewhere = folder.join("elsewhere");
        std::fs::write(&elsewhere, "untouched").unwrap();
        upper.remove_file("docs/run.sh").unwrap();
        std::fs::hard_link(&elsewhere, folder.join(UPPER).join("docs/run.sh")).unwrap();
        upper.set_permissions("docs/run.sh", mode(0o444)).unwrap();
        upper.remove_file("docs/gone.txt").unwrap();
        upper.remove_file("docs/latest").unwrap();
        let read: Journal =
            serde_json::from_slice(&std::fs::read(folder.join(JOURNAL)).unwrap()).unwrap();
        finish(&stage.overlay.lower, &folder, &read, None)
            .map_err(Unfinished::why)
            .unwrap();
        let run = ws.path().join("docs/run.sh");
        assert_eq!(
            std::fs::read_to_string(&run).unwrap(),
            "#!/bin/sh\necho hi\n"
        );
        assert_eq!(run.metadata().unwrap().permissions().mode() & 0o777, 0o755);
        let gone = std::fs::read_to_string(ws.path().join("docs/gone.txt")).unwrap();
        assert_eq!(gone, "gone");
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
        let latest = std::fs::read_link(ws.path().join("docs/latest")).unwrap();
        assert_eq!(latest, Path::new("run.sh"));
    }

    #[test]
    fn recovery_applies_the_journals_it_finds_oldest_first() {
        // Journals whose removal a power loss undid are found beside later
        // ones; each must land before the next, whatever the folder order.
        let ws = tempfile::tempdir().unwrap();
        for written in [4, 1, 6, 3, 5, 2] {
            let mut stage = Stage::begin(ws.path()).unwrap();
            stage.prepare().unwrap();
            write(&mut stage, "x.txt", &format!("v{written}"));
            let mut journal = journal_of(&stage, written);
            assert!(carry(stage.overlay.up().unwrap(), &mut journal).unwrap());
            write_journal(&stage.folder.as_ref().unwrap().path, &journal).unwrap();
            // Left as a killed process leaves it: journal kept, lock free.
            stage.finished = true;
        }
        let done = recover(ws.path()).unwrap();
        assert_eq!(done.len(), 6, "{done:?}");
        let x = std::fs::read_to_string(ws.path().join("x.txt")).unwrap();
        assert_eq!(x, "v6");
    }

    #[test]
    fn a_commit_larger_than_a_journal_carries_syncs_its_files_instead() {
        let (_ws, mut stage) = staged(&[]);
        let big = "x".repeat(CARRY_MAX_BYTES as usize + 1);
        write(&mut stage, "big.txt", &big);
        let upper = stage.overlay.up().unwrap().try_clone().unwrap();
        let mut journal = journal_of(&stage, 0);
        assert!(!carry(&upper, &mut journal).unwrap());
        assert!(journal.files.is_empty());
        let set = stage.commit().unwrap();
        assert_eq!(set.files(), 1);
    }

    #[test]
    fn the_landing_of_every_change_is_judged_again_at_commit() {
        // A change that reached the stage under a protected folder (by any
        // route) is refused at commit, as written.
        let (ws, mut stage) = staged(&[".agents/skills/x"]);
        write(&mut stage, ".agents/skills/x/SKILL.md", "x");
        let err = stage.commit().unwrap_err();
        assert!(matches!(err, CommitError::Refused(_)), "{err:?}");
        assert!(!ws.path().join(".agents/skills/x/SKILL.md").exists());
    }
}
