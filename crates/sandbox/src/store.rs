//! The per-call store: a fresh WASI context, limiter and scratch folder.
//!
//! Nothing in here outlives one call. The scratch folder is leased from
//! the [`ScratchPool`] and owned by the store's data, so it goes back (or
//! is deleted, if the call left anything in it) when the store is dropped,
//! whether the call succeeded, trapped or was cancelled.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::egress::{Egress, NetLimits, NetLog, NetTrace};
use super::error::SandboxError;
use super::fsguard::{
    FILE_WORK_ON_CALLER, FsGuard, GuardedFs, GuardedView, PinnedPreopen, QuotaLimits,
};
use super::grants::{
    DOOR_MOUNT, Grants, PACKAGES_MOUNT, PinnedDir, SCRATCH_MOUNT, SKILL_MOUNT, WORKSPACE_MOUNT,
};
use super::limits::Limits;
use super::output::CappedPipe;
use super::program::{Door, DoorSetting, ProgramRun};
use super::scratch::{ScratchLease, ScratchPool};
use super::stage::Stage;

/// Raised by the limiter when the guest asks for more memory than allowed.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit_bytes} bytes exceeded")]
pub(crate) struct MemoryLimitHit {
    pub limit_bytes: usize,
}

/// Enforces the memory and table caps over the whole call: every linear
/// memory and every table of every core instance in the component counts
/// against one budget, so a component cannot multiply its share by
/// declaring more memories.
pub(crate) struct CallLimiter {
    memory_bytes: usize,
    table_elements: usize,
    memory_in_use: usize,
    table_elements_in_use: usize,
}

impl CallLimiter {
    fn new(limits: &Limits) -> Self {
        CallLimiter {
            memory_bytes: limits.memory_bytes,
            table_elements: limits.table_elements,
            memory_in_use: 0,
            table_elements_in_use: 0,
        }
    }
}

/// The call's total after one memory or table grows from `current` to
/// `desired`, if it stays within `limit`.
fn grown_total(in_use: usize, current: usize, desired: usize, limit: usize) -> Option<usize> {
    let total = in_use.saturating_sub(current).checked_add(desired)?;
    (total <= limit).then_some(total)
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        match grown_total(self.memory_in_use, current, desired, self.memory_bytes) {
            Some(total) => {
                self.memory_in_use = total;
                Ok(true)
            }
            None => Err(wasmtime::Error::new(MemoryLimitHit {
                limit_bytes: self.memory_bytes,
            })),
        }
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        match grown_total(
            self.table_elements_in_use,
            current,
            desired,
            self.table_elements,
        ) {
            Some(total) => {
                self.table_elements_in_use = total;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        64
    }
}

/// The data a call's store holds.
pub(crate) struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    pub(crate) egress: Egress,
    pub(crate) table: ResourceTable,
    pub(crate) fs: FsGuard,
    limiter: CallLimiter,
    deadline: Instant,
    _scratch: ScratchLease,
}

impl CallState {
    /// What the call did on the network so far.
    pub(crate) fn net_log(&self) -> NetLog {
        self.egress.log()
    }

    /// The programs the call asked the host for.
    pub(crate) fn program_runs(&self) -> Vec<ProgramRun> {
        self.fs.program_runs()
    }

    /// Everything the call was refused although it went on: network
    /// requests, then changes to protected folders.
    pub(crate) fn refusals(&self) -> Vec<String> {
        let mut out = self.egress.log().refusals;
        out.extend(self.fs.refusals().iter().cloned());
        out
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

impl GuardedFs for CallState {
    fn guarded_fs(&mut self) -> GuardedView<'_> {
        let fs = WasiFilesystemCtxView {
            ctx: self.wasi.filesystem(),
            table: &mut self.table,
        };
        GuardedView::new(fs, &mut self.fs)
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// What one call is given besides its grants: program arguments and stdin
/// (for scripts) and where its output goes.
pub(crate) struct CallIo {
    pub args: Vec<String>,
    pub stdin: Vec<u8>,
    pub stdout: CappedPipe,
    pub stderr: CappedPipe,
    /// Where the call's HTTP requests are logged.
    pub net: NetTrace,
}

impl CallIo {
    pub(crate) fn new(limits: &Limits, net: NetTrace) -> Self {
        CallIo {
            args: Vec::new(),
            stdin: Vec::new(),
            stdout: CappedPipe::new("stdout", limits.output_bytes),
            stderr: CappedPipe::new("stderr", limits.output_bytes),
            net,
        }
    }
}

/// Builds a fresh store for one call.
pub(crate) fn new_store(
    engine: &wasmtime::Engine,
    scratch: &Arc<ScratchPool>,
    grants: &Grants,
    limits: &Limits,
    io: &CallIo,
    stage: Option<Stage>,
) -> Result<Store<CallState>, SandboxError> {
    let scratch = scratch
        .lease()
        .map_err(|e| SandboxError::Host(format!("cannot create the scratch folder: {e}")))?;

    let mut wasi = WasiCtxBuilder::new();
    wasi.allow_blocking_current_thread(FILE_WORK_ON_CALLER);
    wasi.stdin(MemoryInputPipe::new(io.stdin.clone()))
        .stdout(io.stdout.clone())
        .stderr(io.stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .args(&io.args);
    for (key, value) in &grants.env {
        wasi.env(key, value);
    }
    let cannot_open = |guest: &str| {
        SandboxError::Host(format!(
            "cannot open the folder granted at {guest}; check that it exists and is readable"
        ))
    };
    let preopen = |wasi: &mut WasiCtxBuilder, host: &std::path::Path, guest: &str, perms| {
        wasi.preopened_dir(host, guest, perms)
            .map(|_| ())
            .map_err(|_| cannot_open(guest))
    };
    // Folders the host holds open are preopened from their handles (see
    // `fsguard::PinnedPreopen`), the rest by their paths.
    let pinned = |dir: &PinnedDir, guest: &'static str, perms| {
        dir.reopen()
            .map(|file| PinnedPreopen::new(file, guest, perms, FILE_WORK_ON_CALLER))
            .map_err(|_| cannot_open(guest))
    };
    let mut pinned_preopens = vec![pinned(scratch.dir(), SCRATCH_MOUNT, FsPerms::ReadWrite)?];
    if let Some(skill) = &grants.skill_dir {
        pinned_preopens.push(pinned(skill, SKILL_MOUNT, FsPerms::ReadOnly)?);
    }
    if let Some(packages) = &grants.packages {
        preopen(&mut wasi, packages, PACKAGES_MOUNT, FsPerms::ReadOnly)?;
    }
    for files in &grants.runtime_files {
        preopen(&mut wasi, &files.host, &files.guest, FsPerms::ReadOnly)?;
    }
    if let Some(ws) = &grants.workspace {
        let perms = if ws.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        preopen(&mut wasi, &ws.host_dir, WORKSPACE_MOUNT, perms)?;
    }

    let deadline = Instant::now() + limits.timeout;
    let egress = Egress::new(
        grants.network.clone(),
        NetLimits {
            requests: limits.net_requests,
            response_bytes: limits.net_response_bytes,
        },
        deadline,
        grants.skill_name.as_deref(),
        &io.net,
    );
    let door = match grants.programs {
        None => None,
        Some(_) => {
            let setting = DoorSetting::new(grants, scratch.dir().opened_at(), deadline)
                .with_limits(limits)
                .with_relay(egress.relay());
            let door = Door::open(setting).map_err(|e| {
                SandboxError::Host(format!(
                    "cannot make the folder a script asks for programs through: {}",
                    super::io_reason(&e)
                ))
            })?;
            preopen(&mut wasi, door.path(), DOOR_MOUNT, FsPerms::ReadWrite)?;
            Some(door)
        }
    };
    let state = CallState {
        wasi: wasi.build(),
        http: WasiHttpCtx::new(),
        egress,
        table: ResourceTable::new(),
        fs: FsGuard::new(
            QuotaLimits {
                bytes: limits.scratch_bytes,
                entries: limits.scratch_entries,
            },
            QuotaLimits {
                bytes: limits.workspace_bytes,
                entries: limits.workspace_entries,
            },
        )
        .with_pinned_preopens(pinned_preopens)
        .with_stage(stage)
        .with_door(door)
        .with_workspace_root(
            grants
                .workspace
                .as_ref()
                .and_then(|ws| std::fs::canonicalize(&ws.host_dir).ok()),
        ),
        limiter: CallLimiter::new(limits),
        deadline,
        _scratch: scratch,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    store
        .set_fuel(limits.fuel)
        .map_err(|e| SandboxError::Host(format!("fuel is not enabled: {e}")))?;
    let limit = limits.timeout;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |ctx| {
        if Instant::now() >= ctx.data().deadline {
            return Err(wasmtime::Error::new(SandboxError::Timeout { limit }));
        }
        // Yield at every tick so the executor can run other calls on this
        // thread and can drop (cancel) this one.
        Ok(UpdateDeadline::Yield(1))
    });
    Ok(store)
}
