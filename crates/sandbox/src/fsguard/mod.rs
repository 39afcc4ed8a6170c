//! What a guest may do to the disk of its writable folders, enforced as it
//! does it: byte and entry quotas, and the project skill folders no tool
//! may change (`sandbox/protect.rs`).
//!
//! wasmtime-wasi writes straight to a host folder and has no hook for
//! either, so `wasi:filesystem` is served by [`GuardedView`], which
//! implements wasmtime-wasi's generated host traits: the functions that
//! consume disk or change entries check first and then call wasmtime-wasi's
//! own implementation; the rest pass straight through. It is registered
//! with the generated `add_to_linker` functions, so a new WASI version or a
//! new function is a compile error here, not a silent gap. Each descriptor
//! is tagged with the mount it came from (`/tmp` or `/workspace`), so each
//! mount has its own budget.
//!
//! A quota counts what the call *did*: bytes written, the bytes a write or
//! a `set-size` adds to a file's length (a write far past the end makes a
//! file that large, even if sparse), and entries created. Deleting a file
//! does not give its bytes back, which keeps the accounting simple and the
//! bound strict. Crossing a quota stops the guest with [`QuotaExceeded`],
//! which the sandbox reports as its own error kind. A change to a protected
//! folder fails with `not-permitted`, and the host says why.
//!
//! [`QuotaExceeded`]: crate::mount::QuotaExceeded

mod budget;
mod descriptor;
mod door;
mod overlay;
mod streams;

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::filesystem::{Descriptor as FsDescriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::types::{Descriptor, ErrorCode, HostDescriptor};
use wasmtime_wasi::p2::bindings::filesystem::{preopens, types};
use wasmtime_wasi::p2::{DynOutputStream, FsError, FsResult};
use wasmtime_wasi::{FsPerms, OpenMode};

use super::mount::{Mount, QuotaKind};
use super::protect::Refusal;
use super::stage::Stage;
pub(crate) use budget::QuotaLimits;
use budget::{Budget, CountedStream};

/// The quotas of one call, which descriptor belongs to which mount, and
/// the changes it was refused.
#[derive(Debug)]
pub(crate) struct FsGuard {
    scratch: Arc<Budget>,
    workspace: Arc<Budget>,
    /// Descriptor handle (resource rep) -> the mount it was opened under.
    descriptors: HashMap<u32, Mount>,
    refusals: Vec<String>,
    /// The workspace's real path, for the links made in it.
    workspace_root: Option<std::path::PathBuf>,
    /// The call's staged workspace, when its writes are staged.
    staged: Option<overlay::Staged>,
    /// Where the guest asks for programs, when it may (`sandbox/program`).
    door: Option<crate::program::Door>,
    /// The door's preopened descriptors (a guest may ask for the
    /// preopens more than once, and gets new handles each time).
    door_roots: std::collections::HashSet<u32>,
    /// Preopens made from folders the host holds open, listed before
    /// wasmtime-wasi's own (which it opens by path).
    pinned_preopens: Vec<PinnedPreopen>,
}

/// A preopen made from a handle the host already holds rather than from
/// a path. wasmtime-wasi's builder takes only paths, and the only path to
/// an open handle, `/proc/self/fd/N`, costs a procfs walk per call; a
/// handle reopened with `openat(handle, ".")` is the same folder with the
/// same flags and is handed to the guest as wasmtime-wasi's own `Dir`.
#[derive(Clone)]
pub(crate) struct PinnedPreopen {
    dir: wasmtime_wasi::filesystem::Dir,
    guest: &'static str,
}

impl std::fmt::Debug for PinnedPreopen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPreopen")
            .field("guest", &self.guest)
            .finish_non_exhaustive()
    }
}

impl PinnedPreopen {
    pub(crate) fn new(
        dir: std::fs::File,
        guest: &'static str,
        perms: FsPerms,
        block_the_caller: bool,
    ) -> Self {
        let mode = match perms {
            FsPerms::ReadOnly => OpenMode::READ,
            FsPerms::ReadWrite => OpenMode::READ | OpenMode::WRITE,
        };
        PinnedPreopen {
            dir: wasmtime_wasi::filesystem::Dir::new(dir, perms, mode, block_the_caller),
            guest,
        }
    }
}

impl FsGuard {
    pub(crate) fn new(scratch: QuotaLimits, workspace: QuotaLimits) -> Self {
        FsGuard {
            scratch: Budget::new(Mount::Scratch, scratch),
            workspace: Budget::new(Mount::Workspace, workspace),
            descriptors: HashMap::new(),
            refusals: Vec::new(),
            workspace_root: None,
            staged: None,
            door: None,
            door_roots: Default::default(),
            pinned_preopens: Vec::new(),
        }
    }

    /// The preopens made from the host's open handles.
    pub(crate) fn with_pinned_preopens(mut self, preopens: Vec<PinnedPreopen>) -> Self {
        self.pinned_preopens = preopens;
        self
    }

    /// Sends the call's `/workspace` through `stage`: its changes are kept
    /// there until the caller commits them.
    pub(crate) fn with_stage(mut self, stage: Option<Stage>) -> Self {
        self.staged = stage.map(overlay::Staged::new);
        self
    }

    /// The call's staged changes, taken out once it has finished.
    pub(crate) fn take_stage(&mut self) -> Option<Stage> {
        self.staged.take().map(|s| s.stage)
    }

    /// Names the workspace's folder on the host (canonical), so links made
    /// in it can be checked to stay inside.
    pub(crate) fn with_workspace_root(mut self, root: Option<std::path::PathBuf>) -> Self {
        self.workspace_root = root;
        self
    }

    /// Changes to protected folders the guest tried, in words.
    pub(crate) fn refusals(&self) -> &[String] {
        &self.refusals
    }

    fn budget_of(&self, fd: &Resource<Descriptor>) -> Option<Arc<Budget>> {
        self.descriptors.get(&fd.rep()).map(|mount| match mount {
            Mount::Scratch => self.scratch.clone(),
            Mount::Workspace => self.workspace.clone(),
        })
    }

    fn tag_rep(&mut self, rep: u32, mount: Mount) {
        self.door_roots.remove(&rep);
        self.descriptors.insert(rep, mount);
    }

    fn tag(&mut self, child: &Resource<Descriptor>, parent: Option<Mount>) {
        // A handle is reused once the guest drops a descriptor: what the
        // old one was on the staged workspace must not carry over.
        if let Some(staged) = &mut self.staged {
            staged.forget(child.rep());
        }
        self.door_roots.remove(&child.rep());
        match parent {
            Some(mount) => self.descriptors.insert(child.rep(), mount),
            None => self.descriptors.remove(&child.rep()),
        };
    }

    fn mount_of(&self, fd: &Resource<Descriptor>) -> Option<Mount> {
        self.descriptors.get(&fd.rep()).copied()
    }
}

/// A call's file system as its guest sees it: wasmtime-wasi's own view of
/// the WASI context and resource table, and the call's guard.
pub(crate) struct GuardedView<'a> {
    fs: WasiFilesystemCtxView<'a>,
    guard: &'a mut FsGuard,
}

impl<'a> GuardedView<'a> {
    pub(crate) fn new(fs: WasiFilesystemCtxView<'a>, guard: &'a mut FsGuard) -> Self {
        GuardedView { fs, guard }
    }

    /// wasmtime-wasi's own implementation, for the guarded functions to
    /// call once their checks pass.
    fn filesystem(&mut self) -> WasiFilesystemCtxView<'_> {
        WasiFilesystemCtxView {
            ctx: &mut *self.fs.ctx,
            table: &mut *self.fs.table,
        }
    }

    fn fs_guard(&mut self) -> &mut FsGuard {
        self.guard
    }

    fn table(&mut self) -> &mut ResourceTable {
        self.fs.table
    }
}

/// A call's store, which can lend its file system with the guard.
pub(crate) trait GuardedFs: Send + 'static {
    fn guarded_fs(&mut self) -> GuardedView<'_>;
}

/// The [`HasData`] that names [`GuardedView`] to the generated
/// `add_to_linker` functions.
struct Guarded;

impl HasData for Guarded {
    type Data<'a> = GuardedView<'a>;
}

/// Serves `wasi:filesystem` through [`GuardedView`]. Call after
/// wasmtime-wasi's own `add_to_linker_async`, whose filesystem functions
/// this replaces.
pub(crate) fn add_to_linker<T: GuardedFs>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = types::add_to_linker::<T, Guarded>(linker, T::guarded_fs)
        .and_then(|()| preopens::add_to_linker::<T, Guarded>(linker, T::guarded_fs));
    linker.allow_shadowing(false);
    linked
}

/// A trap (the guest stops) where the WASI function answers an error code.
fn trap(error: impl Into<wasmtime::Error>) -> FsError {
    FsError::trap(error)
}

fn spend(budget: Option<&Arc<Budget>>, kind: QuotaKind, amount: u64) -> FsResult<()> {
    match budget {
        Some(b) => b.spend(kind, amount).map_err(trap),
        None => Ok(()),
    }
}

/// The host file behind a descriptor, for checks that need its real path
/// or size.
fn host_file(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> Option<Arc<std::fs::File>> {
    let fd: Resource<FsDescriptor> = Resource::new_borrow(fd.rep());
    match state.table().get(&fd).ok()? {
        FsDescriptor::File(f) => Some(f.file.clone()),
        FsDescriptor::Dir(d) => Some(d.dir.clone()),
    }
}

/// Spends what writing `len` bytes at `offset` costs: the bytes, and the
/// gap between the file's end and `offset` that the write makes part of it.
fn spend_write(
    state: &mut GuardedView<'_>,
    fd: &Resource<Descriptor>,
    offset: u64,
    len: u64,
) -> FsResult<()> {
    let Some(budget) = state.fs_guard().budget_of(fd) else {
        return Ok(());
    };
    let gap = offset.saturating_sub(file_size(state, fd));
    spend(Some(&budget), QuotaKind::Bytes, len.saturating_add(gap))
}

fn file_size(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> u64 {
    host_file(state, fd)
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len())
}

/// A protected-folder check of a path relative to an open folder.
type Check<'a> = &'a dyn Fn(&std::fs::File) -> Result<(), Refusal>;

/// Runs protected-folder checks on workspace descriptors; a refusal is
/// remembered and becomes the guest's `not-permitted`.
fn guard(
    state: &mut GuardedView<'_>,
    action: &str,
    checks: &[(&Resource<Descriptor>, Check<'_>)],
) -> FsResult<()> {
    for (fd, check) in checks {
        if state.fs_guard().mount_of(fd) != Some(Mount::Workspace) {
            continue;
        }
        let Some(dir) = host_file(state, fd) else {
            continue;
        };
        if let Err(refusal) = check(&dir) {
            state.fs_guard().refusals.push(refusal.message(action));
            return refused(ErrorCode::NotPermitted);
        }
    }
    Ok(())
}

fn refused<T>(code: ErrorCode) -> FsResult<T> {
    Err(code.into())
}

/// Whether a call's file work runs on the thread the call runs on rather
/// than on tokio's blocking pool, for every folder a guest sees. A hop to
/// the pool and back cost more than most operations (inside a script, a
/// `stat` took 56 to 126 µs through the pool, 10 to 15 µs without). Opens
/// are the exception ([`open_on_pool`]).
pub(crate) const FILE_WORK_ON_CALLER: bool = true;

/// What a guest is told when it opens a FIFO, a socket or a device.
fn not_a_file(path: &str) -> String {
    format!(
        "refused to open `{path}`: it is a FIFO, socket or device, which the sandbox never \
         opens (opening one can wait for ever); use a regular file"
    )
}

/// wasmtime-wasi's `open_at`, with the open itself on the blocking pool.
/// An open is the one file operation that can wait for ever on a local
/// file system: a FIFO put where the guard had just seen a regular file.
/// Waiting on a pool thread, it leaves the call's deadline free to end the
/// call. What it opened is looked at once more, and a FIFO, socket or
/// device is closed and refused, so no read or write of the call ever
/// waits on one.
async fn open_on_pool(
    state: &mut GuardedView<'_>,
    fd: Resource<Descriptor>,
    path_flags: types::PathFlags,
    path: String,
    oflags: types::OpenFlags,
    flags: types::DescriptorFlags,
) -> FsResult<Resource<Descriptor>> {
    let folder: Resource<FsDescriptor> = Resource::new_borrow(fd.rep());
    let on_pool = match state.table().get(&folder)? {
        FsDescriptor::Dir(dir) => {
            #[cfg(debug_assertions)]
            fifo_before_open(&dir.dir, &path);
            wasmtime_wasi::filesystem::Dir::new(
                dir.dir.try_clone().map_err(FsError::from)?,
                dir.perms,
                dir.open_mode,
                false,
            )
        }
        // Not a folder: wasmtime-wasi gives the guest its error.
        FsDescriptor::File(_) => {
            return HostDescriptor::open_at(
                &mut state.filesystem(),
                fd,
                path_flags,
                path,
                oflags,
                flags,
            )
            .await;
        }
    };
    let on_pool = state.table().push(FsDescriptor::Dir(on_pool))?;
    let opened = HostDescriptor::open_at(
        &mut state.filesystem(),
        Resource::new_borrow(on_pool.rep()),
        path_flags,
        path.clone(),
        oflags,
        flags,
    )
    .await;
    state.table().delete(on_pool)?;
    let child = opened?;
    if is_special(state, &child) {
        let child: Resource<FsDescriptor> = Resource::new_own(child.rep());
        state.table().delete(child)?;
        state.fs_guard().refusals.push(not_a_file(&path));
        return refused(ErrorCode::NotPermitted);
    }
    Ok(child)
}

/// Tests only: puts a FIFO where the file an open names was, after the
/// guard's checks and before the open, as a process racing the call could.
/// `SKILLBOX_TEST_FIFO_BEFORE_OPEN` is how the names of those files start.
#[cfg(debug_assertions)]
fn fifo_before_open(dir: &std::fs::File, path: &str) {
    use rustix::fs::{AtFlags, FileType, Mode};
    let name = path.rsplit('/').next().unwrap_or(path);
    let named = std::env::var("SKILLBOX_TEST_FIFO_BEFORE_OPEN")
        .is_ok_and(|start| !start.is_empty() && name.starts_with(&start));
    if named {
        let _ = rustix::fs::unlinkat(dir, path, AtFlags::empty());
        let _ = rustix::fs::mknodat(dir, path, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0);
    }
}

/// Whether the file behind `fd` is a FIFO, a socket or a device.
fn is_special(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let Some(file) = host_file(state, fd) else {
        return false;
    };
    file.metadata().is_ok_and(|meta| {
        let kind = meta.file_type();
        kind.is_fifo() || kind.is_socket() || kind.is_char_device() || kind.is_block_device()
    })
}

/// Wraps a file's output stream so that what goes through it is counted.
fn counted(
    state: &mut GuardedView<'_>,
    stream: Resource<DynOutputStream>,
    budget: Option<Arc<Budget>>,
) -> FsResult<Resource<DynOutputStream>> {
    let Some(budget) = budget else {
        return Ok(stream);
    };
    let table = state.table();
    let inner = table.delete(stream)?;
    let wrapped: DynOutputStream = Box::new(CountedStream { inner, budget });
    Ok(table.push(wrapped)?)
}
