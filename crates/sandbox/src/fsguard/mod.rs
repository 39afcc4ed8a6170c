//! What a guest may do to the disk of its writable folders, enforced as it
//! does it: byte and entry quotas, and the project skill folders no tool
//! may change (`sandbox/protect.rs`).
//!
//! wasmtime-wasi writes straight to a host folder and has no hook for
//! either, so the functions of `wasi:filesystem` that consume disk or change
//! entries are shadowed in the linker by versions that check first and then
//! call wasmtime-wasi's own implementation. Each descriptor is tagged with
//! the mount it came from (`/tmp` or `/workspace`), so each mount has its
//! own budget.
//!
//! A quota counts what the call *did*: bytes written, the bytes a write or
//! a `set-size` adds to a file's length (a write far past the end makes a
//! file that large, even if sparse), and entries created. Deleting a file
//! does not give its bytes back, which keeps the accounting simple and the
//! bound strict. Crossing a quota stops the guest with [`QuotaExceeded`],
//! which the sandbox reports as its own error kind. A change to a protected
//! folder fails with `not-permitted`, and the host says why.

mod budget;
mod overlay;

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::filesystem::{Descriptor as FsDescriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, DirectoryEntryStream, ErrorCode, HostDescriptor,
    NewTimestamp, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynOutputStream, FsResult};

use super::mount::{Mount, QuotaKind};
use super::protect::{self, Last, Refusal};
use super::stage::Stage;
pub use budget::QuotaLimits;
use budget::{Budget, CountedStream};

/// The quotas of one call, which descriptor belongs to which mount, and
/// the changes it was refused.
#[derive(Debug)]
pub struct FsGuard {
    scratch: Arc<Budget>,
    workspace: Arc<Budget>,
    /// Descriptor handle (resource rep) -> the mount it was opened under.
    descriptors: HashMap<u32, Mount>,
    refusals: Vec<String>,
    /// The workspace's real path, for the links made in it.
    workspace_root: Option<std::path::PathBuf>,
    /// The call's staged workspace, when its writes are staged.
    staged: Option<overlay::Staged>,
}

impl FsGuard {
    pub fn new(scratch: QuotaLimits, workspace: QuotaLimits) -> Self {
        FsGuard {
            scratch: Budget::new(Mount::Scratch, scratch),
            workspace: Budget::new(Mount::Workspace, workspace),
            descriptors: HashMap::new(),
            refusals: Vec::new(),
            workspace_root: None,
            staged: None,
        }
    }

    /// Sends the call's `/workspace` through `stage`: its changes are kept
    /// there until the caller commits them.
    pub fn with_stage(mut self, stage: Option<Stage>) -> Self {
        self.staged = stage.map(overlay::Staged::new);
        self
    }

    /// The call's staged changes, taken out once it has finished.
    pub fn take_stage(&mut self) -> Option<Stage> {
        self.staged.take().map(|s| s.stage)
    }

    /// Names the workspace's folder on the host (canonical), so links made
    /// in it can be checked to stay inside.
    pub fn with_workspace_root(mut self, root: Option<std::path::PathBuf>) -> Self {
        self.workspace_root = root;
        self
    }

    /// Changes to protected folders the guest tried, in words.
    pub fn refusals(&self) -> &[String] {
        &self.refusals
    }

    fn budget_of(&self, fd: &Resource<Descriptor>) -> Option<Arc<Budget>> {
        self.descriptors.get(&fd.rep()).map(|mount| match mount {
            Mount::Scratch => self.scratch.clone(),
            Mount::Workspace => self.workspace.clone(),
        })
    }

    fn tag_rep(&mut self, rep: u32, mount: Mount) {
        self.descriptors.insert(rep, mount);
    }

    fn tag(&mut self, child: &Resource<Descriptor>, parent: Option<Mount>) {
        // A handle is reused once the guest drops a descriptor: what the
        // old one was on the staged workspace must not carry over.
        if let Some(staged) = &mut self.staged {
            staged.forget(child.rep());
        }
        match parent {
            Some(mount) => self.descriptors.insert(child.rep(), mount),
            None => self.descriptors.remove(&child.rep()),
        };
    }

    fn mount_of(&self, fd: &Resource<Descriptor>) -> Option<Mount> {
        self.descriptors.get(&fd.rep()).copied()
    }
}

/// What the shadowed functions need of a call's store: the WASI context
/// (to run wasmtime-wasi's own implementation and wrap its streams) and
/// the call's guard.
pub trait GuardedFs: WasiView + Send + 'static {
    fn fs_guard(&mut self) -> &mut FsGuard;
}

fn spend(budget: Option<&Arc<Budget>>, kind: QuotaKind, amount: u64) -> wasmtime::Result<()> {
    match budget {
        Some(b) => b.spend(kind, amount).map_err(wasmtime::Error::new),
        None => Ok(()),
    }
}

/// The host file behind a descriptor, for checks that need its real path
/// or size.
fn host_file<T: GuardedFs>(state: &mut T, fd: &Resource<Descriptor>) -> Option<Arc<std::fs::File>> {
    let fd: Resource<FsDescriptor> = Resource::new_borrow(fd.rep());
    match state.ctx().table.get(&fd).ok()? {
        FsDescriptor::File(f) => Some(f.file.clone()),
        FsDescriptor::Dir(d) => Some(d.dir.clone()),
    }
}

/// Spends what writing `len` bytes at `offset` costs: the bytes, and the
/// gap between the file's end and `offset` that the write makes part of it.
fn spend_write<T: GuardedFs>(
    state: &mut T,
    fd: &Resource<Descriptor>,
    offset: u64,
    len: u64,
) -> wasmtime::Result<()> {
    let Some(budget) = state.fs_guard().budget_of(fd) else {
        return Ok(());
    };
    let gap = offset.saturating_sub(file_size(state, fd));
    spend(Some(&budget), QuotaKind::Bytes, len.saturating_add(gap))
}

fn file_size<T: GuardedFs>(state: &mut T, fd: &Resource<Descriptor>) -> u64 {
    host_file(state, fd)
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len())
}

/// A protected-folder check of a path relative to an open folder.
type Check<'a> = &'a dyn Fn(&std::fs::File) -> Result<(), Refusal>;

/// Runs protected-folder checks on workspace descriptors; a refusal is
/// remembered and becomes the guest's `not-permitted`.
fn guard<T: GuardedFs>(
    state: &mut T,
    action: &str,
    checks: &[(&Resource<Descriptor>, Check<'_>)],
) -> Option<ErrorCode> {
    for (fd, check) in checks {
        if state.fs_guard().mount_of(fd) != Some(Mount::Workspace) {
            continue;
        }
        let Some(dir) = host_file(state, fd) else {
            continue;
        };
        if let Err(refusal) = check(&dir) {
            state.fs_guard().refusals.push(refusal.message(action));
            return Some(ErrorCode::NotPermitted);
        }
    }
    None
}

/// Splits wasmtime-wasi's result into the guest-visible error code and a
/// trap.
fn to_wire<T>(result: FsResult<T>) -> wasmtime::Result<(Result<T, ErrorCode>,)> {
    match result {
        Ok(v) => Ok((Ok(v),)),
        Err(e) => e.downcast().map(|code| (Err(code),)),
    }
}

fn refused<T>(code: ErrorCode) -> wasmtime::Result<(Result<T, ErrorCode>,)> {
    Ok((Err(code),))
}

const TYPES: &str = "wasi:filesystem/types@0.2.12";
const PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";

/// Replaces the filesystem functions that consume disk or change entries
/// in `linker` with guarded ones. Call after wasmtime-wasi's own
/// `add_to_linker`.
pub fn shadow_filesystem<T: GuardedFs>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut preopens_instance = linker.instance(PREOPENS)?;
    preopens_instance.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let state = store.data_mut();
            let dirs = preopens::Host::get_directories(&mut state.filesystem())?;
            for (fd, guest) in &dirs {
                let mount = Mount::from_guest_path(guest);
                state.fs_guard().tag(fd, mount);
                if mount == Some(Mount::Workspace) {
                    overlay::preopened(state, fd)?;
                }
            }
            Ok((dirs,))
        },
    )?;

    let mut types = linker.instance(TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store: StoreContextMut<'_, T>,
         (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                spend_write(state, &fd, offset, buf.len() as u64)?;
                to_wire(HostDescriptor::write(&mut state.filesystem(), fd, buf, offset).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd, offset): (Resource<Descriptor>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                // The stream starts at `offset`: what lies between the end
                // and there becomes part of the file with its first byte.
                spend_write(state, &fd, offset, 0)?;
                let budget = state.fs_guard().budget_of(&fd);
                let stream = HostDescriptor::write_via_stream(&mut state.filesystem(), fd, offset);
                to_wire(stream)?.0.map_or_else(
                    |code| Ok((Err(code),)),
                    |s| counted(state, s, budget).map(|s| (Ok(s),)),
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.append-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let state = store.data_mut();
                let budget = state.fs_guard().budget_of(&fd);
                let stream = HostDescriptor::append_via_stream(&mut state.filesystem(), fd);
                to_wire(stream)?.0.map_or_else(
                    |code| Ok((Err(code),)),
                    |s| counted(state, s, budget).map(|s| (Ok(s),)),
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-size",
        |mut store: StoreContextMut<'_, T>, (fd, size): (Resource<Descriptor>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(budget) = state.fs_guard().budget_of(&fd) {
                    let grows_by = size.saturating_sub(file_size(state, &fd));
                    spend(Some(&budget), QuotaKind::Bytes, grows_by)?;
                }
                to_wire(HostDescriptor::set_size(&mut state.filesystem(), fd, size).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::open_at(state, base, path_flags, path, oflags, flags).await;
                }
                // One stat serves both checks below. Opening a FIFO or a
                // device blocks the host thread that opens it until someone
                // else opens the other end, which may be never: such files
                // are not opened at all.
                let probe = Resource::new_borrow(fd.rep());
                let existing = HostDescriptor::stat_at(
                    &mut state.filesystem(),
                    probe,
                    path_flags,
                    path.clone(),
                )
                .await
                .ok();
                if let Some(stat) = &existing
                    && !matches!(
                        stat.type_,
                        DescriptorType::RegularFile
                            | DescriptorType::Directory
                            | DescriptorType::SymbolicLink
                    )
                {
                    state.fs_guard().refusals.push(format!(
                        "refused to open `{path}`: it is a FIFO, socket or device, which the \
                         sandbox never opens (opening one can wait for ever); use a regular file"
                    ));
                    return refused(ErrorCode::NotPermitted);
                }
                let changes = oflags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
                    || flags.intersects(DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY);
                if changes {
                    let last = if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
                        Last::Target
                    } else {
                        Last::Link
                    };
                    let check = |dir: &std::fs::File| protect::check_change(dir, &path, last);
                    if let Some(code) = guard(state, "write", &[(&fd, &check)]) {
                        return refused(code);
                    }
                }
                let mount = state.fs_guard().mount_of(&fd);
                if let Some(budget) = state.fs_guard().budget_of(&fd)
                    && oflags.contains(OpenFlags::CREATE)
                    && existing.is_none()
                {
                    spend(Some(&budget), QuotaKind::Entries, 1)?;
                }
                let opened = HostDescriptor::open_at(
                    &mut state.filesystem(),
                    fd,
                    path_flags,
                    path,
                    oflags,
                    flags,
                )
                .await;
                if let Ok(child) = &opened {
                    state.fs_guard().tag(child, mount);
                }
                to_wire(opened)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: StoreContextMut<'_, T>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::create_directory_at(state, base, path);
                }
                let check = |dir: &std::fs::File| protect::check_change(dir, &path, Last::Link);
                if let Some(code) = guard(state, "create", &[(&fd, &check)]) {
                    return refused(code);
                }
                spend(
                    state.fs_guard().budget_of(&fd).as_ref(),
                    QuotaKind::Entries,
                    1,
                )?;
                to_wire(
                    HostDescriptor::create_directory_at(&mut state.filesystem(), fd, path).await,
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, target, link): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::symlink_at(state, base, target, link);
                }
                let root = state.fs_guard().workspace_root.clone();
                let check = |dir: &std::fs::File| {
                    protect::check_new_name(dir, &link)?;
                    protect::check_link_target(&target)?;
                    match &root {
                        Some(root) => protect::check_link_inside(dir, &link, &target, root),
                        None => Ok(()),
                    }
                };
                if let Some(code) = guard(state, "link", &[(&fd, &check)]) {
                    return refused(code);
                }
                spend(
                    state.fs_guard().budget_of(&fd).as_ref(),
                    QuotaKind::Entries,
                    1,
                )?;
                to_wire(HostDescriptor::symlink_at(&mut state.filesystem(), fd, target, link).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.link-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, old_flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if overlay::dir_of(state, &fd).is_some()
                    || overlay::dir_of(state, &new_fd).is_some()
                {
                    return overlay::link_at(state, &new);
                }
                // A hard link to a protected file would be a writable alias.
                let from = |dir: &std::fs::File| protect::check_change(dir, &old, Last::Link);
                let to = |dir: &std::fs::File| protect::check_new_name(dir, &new);
                if let Some(code) = guard(state, "link", &[(&fd, &from), (&new_fd, &to)]) {
                    return refused(code);
                }
                spend(
                    state.fs_guard().budget_of(&new_fd).as_ref(),
                    QuotaKind::Entries,
                    1,
                )?;
                to_wire(
                    HostDescriptor::link_at(
                        &mut state.filesystem(),
                        fd,
                        old_flags,
                        old,
                        new_fd,
                        new,
                    )
                    .await,
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.rename-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    let to_base = overlay::dir_of(state, &new_fd);
                    return overlay::rename_at(state, base, old, to_base, new);
                }
                if overlay::dir_of(state, &new_fd).is_some() {
                    return refused(ErrorCode::CrossDevice);
                }
                let from = |dir: &std::fs::File| protect::check_new_name(dir, &old);
                let to = |dir: &std::fs::File| protect::check_new_name(dir, &new);
                if let Some(code) = guard(state, "rename", &[(&fd, &from), (&new_fd, &to)]) {
                    return refused(code);
                }
                to_wire(HostDescriptor::rename_at(&mut state.filesystem(), fd, old, new_fd, new).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.unlink-file-at",
        |mut store: StoreContextMut<'_, T>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::unlink_file_at(state, base, path);
                }
                let check = |dir: &std::fs::File| protect::check_change(dir, &path, Last::Link);
                if let Some(code) = guard(state, "remove", &[(&fd, &check)]) {
                    return refused(code);
                }
                to_wire(HostDescriptor::unlink_file_at(&mut state.filesystem(), fd, path).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.remove-directory-at",
        |mut store: StoreContextMut<'_, T>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::remove_directory_at(state, base, path);
                }
                let check = |dir: &std::fs::File| protect::check_change(dir, &path, Last::Link);
                if let Some(code) = guard(state, "remove", &[(&fd, &check)]) {
                    return refused(code);
                }
                to_wire(
                    HostDescriptor::remove_directory_at(&mut state.filesystem(), fd, path).await,
                )
            })
        },
    )?;
    shadow_staged_reads(&mut types)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The functions that only read, shadowed so that on a staged workspace
/// they see the call's own changes; elsewhere they are wasmtime-wasi's.
fn shadow_staged_reads<T: GuardedFs>(
    types: &mut wasmtime::component::LinkerInstance<'_, T>,
) -> wasmtime::Result<()> {
    types.func_wrap_async(
        "[method]descriptor.stat-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, flags, path): (Resource<Descriptor>, PathFlags, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::stat_at(state, base, flags, path).await;
                }
                to_wire(HostDescriptor::stat_at(&mut state.filesystem(), fd, flags, path).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.metadata-hash-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, flags, path): (Resource<Descriptor>, PathFlags, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::metadata_hash_at(state, base, flags, path).await;
                }
                to_wire(
                    HostDescriptor::metadata_hash_at(&mut state.filesystem(), fd, flags, path)
                        .await,
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.readlink-at",
        |mut store: StoreContextMut<'_, T>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::readlink_at(state, base, path).await;
                }
                to_wire(HostDescriptor::readlink_at(&mut state.filesystem(), fd, path).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-times-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, flags, path, atime, mtime): (
            Resource<Descriptor>,
            PathFlags,
            String,
            NewTimestamp,
            NewTimestamp,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::set_times_at(state, base, flags, path, atime, mtime).await;
                }
                to_wire(
                    HostDescriptor::set_times_at(
                        &mut state.filesystem(),
                        fd,
                        flags,
                        path,
                        atime,
                        mtime,
                    )
                    .await,
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-times",
        |mut store: StoreContextMut<'_, T>,
         (fd, atime, mtime): (Resource<Descriptor>, NewTimestamp, NewTimestamp)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(answer) = overlay::set_times_below(state, &fd) {
                    return answer;
                }
                to_wire(HostDescriptor::set_times(&mut state.filesystem(), fd, atime, mtime).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.read-directory",
        |mut store: StoreContextMut<'_, T>, (fd,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(base) = overlay::dir_of(state, &fd) {
                    return overlay::read_directory(state, fd, base).await;
                }
                let (result,) =
                    to_wire(HostDescriptor::read_directory(&mut state.filesystem(), fd).await)?;
                if let Ok(stream) = &result {
                    overlay::new_stream(state, stream.rep());
                }
                Ok((result,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]directory-entry-stream.read-directory-entry",
        |mut store: StoreContextMut<'_, T>, (stream,): (Resource<DirectoryEntryStream>,)| {
            Box::new(async move { overlay::read_directory_entry(store.data_mut(), stream).await })
        },
    )?;
    Ok(())
}

/// Wraps a file's output stream so that what goes through it is counted.
fn counted<T: GuardedFs>(
    state: &mut T,
    stream: Resource<DynOutputStream>,
    budget: Option<Arc<Budget>>,
) -> wasmtime::Result<Resource<DynOutputStream>> {
    let Some(budget) = budget else {
        return Ok(stream);
    };
    let table = state.ctx().table;
    let inner = table.delete(stream)?;
    let wrapped: DynOutputStream = Box::new(CountedStream { inner, budget });
    Ok(table.push(wrapped)?)
}
