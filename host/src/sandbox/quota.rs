//! Byte and entry quotas on a call's writable folders, enforced while the
//! guest writes.
//!
//! wasmtime-wasi writes straight to a host folder and has no quota hook, so
//! the functions of `wasi:filesystem` that can consume disk (writes, write
//! streams, `set-size`, and the ones that create entries) are shadowed in the
//! linker by versions that count first and then call wasmtime-wasi's own
//! implementation. Each descriptor is tagged with the mount it came from
//! (`/tmp` or `/workspace`), so each mount has its own budget. The counts are
//! what the call *did*: bytes written and entries created. Deleting a file
//! does not give its bytes back, which keeps the accounting simple and the
//! bound strict.
//!
//! Crossing a quota stops the guest with [`QuotaExceeded`], which the
//! sandbox reports as its own error kind.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynOutputStream, FsResult, OutputStream, Pollable, StreamError};

use super::mount::{Mount, QuotaExceeded, QuotaKind};

/// One mount's budget and what has been spent of it.
#[derive(Debug)]
struct Budget {
    mount: Mount,
    max_bytes: u64,
    max_entries: u64,
    bytes: AtomicU64,
    entries: AtomicU64,
}

impl Budget {
    fn spend(&self, kind: QuotaKind, amount: u64) -> Result<(), QuotaExceeded> {
        let (counter, limit) = match kind {
            QuotaKind::Bytes => (&self.bytes, self.max_bytes),
            QuotaKind::Entries => (&self.entries, self.max_entries),
        };
        let before = counter.fetch_add(amount, Ordering::Relaxed);
        if before.saturating_add(amount) > limit {
            return Err(QuotaExceeded {
                mount: self.mount,
                what: kind,
                limit,
            });
        }
        Ok(())
    }
}

/// The quotas of one call, and which descriptor belongs to which mount.
#[derive(Debug)]
pub struct FsQuota {
    scratch: Arc<Budget>,
    workspace: Arc<Budget>,
    /// Descriptor handle (resource rep) -> the mount it was opened under.
    descriptors: HashMap<u32, Mount>,
}

/// Per-mount limits, from [`super::Limits`].
#[derive(Debug, Clone, Copy)]
pub struct QuotaLimits {
    pub bytes: u64,
    pub entries: u64,
}

impl FsQuota {
    pub fn new(scratch: QuotaLimits, workspace: QuotaLimits) -> Self {
        let budget = |mount, l: QuotaLimits| {
            Arc::new(Budget {
                mount,
                max_bytes: l.bytes,
                max_entries: l.entries,
                bytes: AtomicU64::new(0),
                entries: AtomicU64::new(0),
            })
        };
        FsQuota {
            scratch: budget(Mount::Scratch, scratch),
            workspace: budget(Mount::Workspace, workspace),
            descriptors: HashMap::new(),
        }
    }

    fn budget_of(&self, fd: &Resource<Descriptor>) -> Option<Arc<Budget>> {
        self.descriptors.get(&fd.rep()).map(|mount| match mount {
            Mount::Scratch => self.scratch.clone(),
            Mount::Workspace => self.workspace.clone(),
        })
    }

    fn tag(&mut self, child: &Resource<Descriptor>, parent: Option<Mount>) {
        match parent {
            Some(mount) => self.descriptors.insert(child.rep(), mount),
            None => self.descriptors.remove(&child.rep()),
        };
    }

    fn mount_of(&self, fd: &Resource<Descriptor>) -> Option<Mount> {
        self.descriptors.get(&fd.rep()).copied()
    }
}

fn spend(budget: Option<&Arc<Budget>>, kind: QuotaKind, amount: u64) -> wasmtime::Result<()> {
    match budget {
        Some(b) => b.spend(kind, amount).map_err(wasmtime::Error::new),
        None => Ok(()),
    }
}

/// Splits wasmtime-wasi's result into the guest-visible error code and a
/// trap.
fn to_wire<T>(result: FsResult<T>) -> wasmtime::Result<(Result<T, ErrorCode>,)> {
    match result {
        Ok(v) => Ok((Ok(v),)),
        Err(e) => e.downcast().map(|code| (Err(code),)),
    }
}

const TYPES: &str = "wasi:filesystem/types@0.2.12";
const PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";

/// What the shadowed functions need of a call's store: the WASI context
/// (to run wasmtime-wasi's own implementation and wrap its streams) and
/// the call's quotas.
pub trait QuotaState: WasiView + Send + 'static {
    fn quota(&mut self) -> &mut FsQuota;
}

/// Replaces the space-consuming filesystem functions in `linker` with
/// counting ones. Call after wasmtime-wasi's own `add_to_linker`.
pub fn shadow_filesystem<T: QuotaState>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut preopens_instance = linker.instance(PREOPENS)?;
    preopens_instance.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let state = store.data_mut();
            let dirs = preopens::Host::get_directories(&mut state.filesystem())?;
            for (fd, guest) in &dirs {
                state.quota().tag(fd, Mount::from_guest_path(guest));
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
                spend(
                    state.quota().budget_of(&fd).as_ref(),
                    QuotaKind::Bytes,
                    buf.len() as u64,
                )?;
                to_wire(HostDescriptor::write(&mut state.filesystem(), fd, buf, offset).await)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd, offset): (Resource<Descriptor>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                let budget = state.quota().budget_of(&fd);
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
                let budget = state.quota().budget_of(&fd);
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
                if let Some(budget) = state.quota().budget_of(&fd) {
                    let fd2 = Resource::new_borrow(fd.rep());
                    let before = HostDescriptor::stat(&mut state.filesystem(), fd2)
                        .await
                        .map(|s| s.size)
                        .unwrap_or(0);
                    spend(Some(&budget), QuotaKind::Bytes, size.saturating_sub(before))?;
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
                let mount = state.quota().mount_of(&fd);
                if let Some(budget) = state.quota().budget_of(&fd)
                    && oflags.contains(OpenFlags::CREATE)
                {
                    let probe = Resource::new_borrow(fd.rep());
                    let exists = HostDescriptor::stat_at(
                        &mut state.filesystem(),
                        probe,
                        path_flags,
                        path.clone(),
                    )
                    .await
                    .is_ok();
                    if !exists {
                        spend(Some(&budget), QuotaKind::Entries, 1)?;
                    }
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
                    state.quota().tag(child, mount);
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
                spend(state.quota().budget_of(&fd).as_ref(), QuotaKind::Entries, 1)?;
                to_wire(
                    HostDescriptor::create_directory_at(&mut state.filesystem(), fd, path).await,
                )
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let state = store.data_mut();
                spend(state.quota().budget_of(&fd).as_ref(), QuotaKind::Entries, 1)?;
                to_wire(HostDescriptor::symlink_at(&mut state.filesystem(), fd, old, new).await)
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
                spend(
                    state.quota().budget_of(&new_fd).as_ref(),
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
    linker.allow_shadowing(false);
    Ok(())
}

/// Wraps a file's output stream so that what goes through it is counted.
fn counted<T: QuotaState>(
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

struct CountedStream {
    inner: DynOutputStream,
    budget: Arc<Budget>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for CountedStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CountedStream {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.budget
            .spend(QuotaKind::Bytes, bytes.len() as u64)
            .map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))?;
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        self.inner.check_write()
    }

    fn write_zeroes(&mut self, nelem: usize) -> Result<(), StreamError> {
        self.budget
            .spend(QuotaKind::Bytes, nelem as u64)
            .map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))?;
        self.inner.write_zeroes(nelem)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}
