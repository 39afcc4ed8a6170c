//! skillbox's sandbox, the lowest layer: one engine per process, a fresh
//! store per call, hard limits, capability-scoped files and network, and
//! the workspace transactions. With it, what every layer above shares:
//! component types as JSON Schema (`schema`), SHA-256 digests (`digest`),
//! the host's own folders (`dirs`) and text made printable (`text`).
//!
//! A crate of its own, so Cargo holds the layering: nothing here can reach
//! the skills, the call path or the protocols above it.
//!
//! ```text
//! Sandbox::load_file ──> LoadedComponent (compiled once, InstancePre, typed exports)
//! Sandbox::call      ──> validate args ─> new store (grants, limits) ─> instantiate ─> call
//!                         ─> classify what stopped it ─> JSON result or SandboxError
//! ```

// Internal: reachable to embedders only through
// the stable re-exports of `skillbox`.
#![allow(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

pub mod digest;
pub mod dirs;
pub mod schema;
pub mod text;

mod cache;
mod call;
mod component;
mod egress;
mod engine;
mod error;
mod fsguard;
mod grants;
mod limits;
mod mount;
mod output;
mod pending;
mod program;
mod progress;
mod protect;
mod scratch;
pub mod stage;
pub mod stamp;
mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use serde_json::Value;
use tokio::sync::Semaphore;

pub use cache::{DEFAULT_CACHE_MAX_BYTES, DigestMemo, DiskCache};
pub use call::{CallOutcome, Entry, GuestCall, PendingChanges, Usage, commit};
pub use component::{CompileOrigin, LoadedComponent, QUICK_COMPILE_MIN_BYTES, header_problem};
pub use egress::{NetRequest, NetRule, NetTrace};
pub use engine::{EngineError, EngineOptions, MAX_MEMORY_BYTES, POOL_INSTANCES};
pub use error::{Printed, SandboxError};
pub use grants::{Grants, HostProgram, PinnedDir, RuntimeFiles, SKILL_MOUNT, WorkspaceGrant};
pub use limits::{Limits, MIB, SideEffect};
pub use mount::{Mount, QuotaKind};
pub use pending::{Compiled, PendingComponent};
pub use program::ProgramRun;
pub use progress::{CompileWatcher, Compiling, watch_compiles};

use component::Compile;
use engine::SandboxEngine;

/// Components larger than this are refused before reading them whole.
pub const MAX_COMPONENT_BYTES: u64 = 256 * 1024 * 1024;

/// Runs component functions and command components under limits.
///
/// Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Sandbox {
    engine: SandboxEngine,
    cache: Option<DiskCache>,
    /// Digests remembered in the cache, by file stamp.
    memo: Option<DigestMemo>,
    loaded: Mutex<Loaded>,
    slots: Semaphore,
    /// Components loaded from the compiled-code cache, and compiled, by
    /// this process: for metrics and readiness.
    from_cache: AtomicU64,
    compiled: AtomicU64,
}

/// Components loaded by this process, by content digest and by file.
#[derive(Default)]
struct Loaded {
    by_digest: HashMap<String, Arc<LoadedComponent>>,
    /// Components described and compiling (or compiled) in the
    /// background, by content digest.
    pending: HashMap<String, Arc<PendingComponent>>,
    /// A file whose size and modification time are unchanged is not read
    /// or hashed again.
    by_file: HashMap<PathBuf, (u64, Option<SystemTime>, Arc<LoadedComponent>)>,
    /// Looks in the compiled-code cache by digest alone, at most one per
    /// digest for the life of the process: skills that share a component
    /// resolve in parallel, and the first look answers the rest (a miss
    /// is then compiled, and found in `by_digest`).
    cache_looks: HashMap<String, Arc<OnceLock<()>>>,
}

impl Sandbox {
    /// A sandbox with the default engine and the user's disk cache.
    pub fn new() -> Result<Self, EngineError> {
        Self::with_options(&EngineOptions::default(), DiskCache::default_location())
    }

    pub fn with_options(
        options: &EngineOptions,
        cache: Option<DiskCache>,
    ) -> Result<Self, EngineError> {
        Ok(Sandbox {
            engine: SandboxEngine::new(options)?,
            memo: cache.as_ref().map(DigestMemo::open),
            cache,
            loaded: Mutex::new(Loaded::default()),
            slots: Semaphore::new(POOL_INSTANCES as usize),
            from_cache: AtomicU64::new(0),
            compiled: AtomicU64::new(0),
        })
    }

    /// The compiled-code cache this sandbox loads native code from, if any.
    pub fn cache(&self) -> Option<&DiskCache> {
        self.cache.as_ref()
    }

    /// The digests remembered in the compiled-code cache, if there is one.
    pub fn digest_memo(&self) -> Option<&DigestMemo> {
        self.memo.as_ref()
    }

    /// Components this process loaded from the compiled-code cache, and
    /// compiled itself.
    pub fn load_counts(&self) -> (u64, u64) {
        (
            self.from_cache.load(Ordering::Relaxed),
            self.compiled.load(Ordering::Relaxed),
        )
    }

    /// Calls running in this sandbox right now.
    pub fn running(&self) -> usize {
        (POOL_INSTANCES as usize).saturating_sub(self.slots.available_permits())
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        self.engine.engine()
    }

    /// Loads a component file; the same bytes are compiled once per process.
    /// A large one not in the compiled-code cache is compiled quickly for
    /// its first calls and optimized in the background
    /// ([`finish_optimizing`] waits for that).
    pub fn load_file(&self, path: &Path) -> Result<Arc<LoadedComponent>, SandboxError> {
        self.load_file_with(path, Compile::QuickFirst)
    }

    /// [`Sandbox::load_file`], returning only once the component runs
    /// optimized code, stored in the compiled-code cache: for filling the
    /// cache ahead of the first call (`skillbox compile`, `prepare`).
    pub fn load_file_optimized(&self, path: &Path) -> Result<Arc<LoadedComponent>, SandboxError> {
        let loaded = self.load_file_with(path, Compile::Optimized)?;
        loaded.wait_optimized();
        Ok(loaded)
    }

    fn load_file_with(
        &self,
        path: &Path,
        mode: Compile,
    ) -> Result<Arc<LoadedComponent>, SandboxError> {
        let meta = component_metadata(path)?;
        let stamp = (meta.len(), meta.modified().ok());
        if let Some((len, mtime, hit)) = self.lock_loaded().by_file.get(path)
            && (*len, *mtime) == stamp
        {
            return Ok(hit.clone());
        }
        let bytes = std::fs::read(path).map_err(|e| {
            SandboxError::Load(format!(
                "cannot read `{}`: {}",
                file_name(path),
                io_reason(&e)
            ))
        })?;
        let label = file_label(path);
        let loaded = self.load_labelled(&bytes, &sha256_hex(&bytes), Some(&label), mode)?;
        self.lock_loaded()
            .by_file
            .insert(path.to_path_buf(), (stamp.0, stamp.1, loaded.clone()));
        Ok(loaded)
    }

    /// Loads a component from memory; the same bytes are compiled once per
    /// process and, with a disk cache, once per machine.
    pub fn load_bytes(&self, bytes: &[u8]) -> Result<Arc<LoadedComponent>, SandboxError> {
        self.load_hashed(bytes, &sha256_hex(bytes))
    }

    /// [`Sandbox::load_bytes`], returning only once the component runs
    /// optimized code, as [`Sandbox::load_file_optimized`].
    pub fn load_bytes_optimized(&self, bytes: &[u8]) -> Result<Arc<LoadedComponent>, SandboxError> {
        let loaded = self.load_labelled(bytes, &sha256_hex(bytes), None, Compile::Optimized)?;
        loaded.wait_optimized();
        Ok(loaded)
    }

    /// [`Sandbox::load_bytes`] for a caller that has just hashed these very
    /// bytes with [`sha256_hex`] (the skill loader checks them against the
    /// digest it recorded), so they are not hashed twice.
    pub(crate) fn load_hashed(
        &self,
        bytes: &[u8],
        key: &str,
    ) -> Result<Arc<LoadedComponent>, SandboxError> {
        self.load_labelled(bytes, key, None, Compile::QuickFirst)
    }

    /// [`Sandbox::load_hashed`], naming the component to the compile
    /// watcher by `label` (its file) rather than its digest.
    fn load_labelled(
        &self,
        bytes: &[u8],
        key: &str,
        label: Option<&str>,
        mode: Compile,
    ) -> Result<Arc<LoadedComponent>, SandboxError> {
        if let Some(hit) = self.lock_loaded().by_digest.get(key) {
            return Ok(hit.clone());
        }
        let loaded = Arc::new(component::load_component(
            &self.engine,
            bytes,
            key,
            label,
            self.cache.as_ref(),
            mode,
        )?);
        match loaded.origin {
            CompileOrigin::DiskCache => &self.from_cache,
            _ => &self.compiled,
        }
        .fetch_add(1, Ordering::Relaxed);
        if !loaded.is_optimized() {
            let label = label.map_or_else(|| component::digest_label(key), str::to_string);
            let optimizing = component::optimize(
                &self.engine,
                bytes.to_vec(),
                key.to_string(),
                self.cache.clone(),
                loaded.clone(),
            );
            if let Some(optimizing) = optimizing {
                let mut running = lock_optimizing();
                running.retain(|(_, handle)| !handle.is_finished());
                running.push((label, optimizing));
            }
        }
        self.lock_loaded()
            .by_digest
            .insert(key.to_string(), loaded.clone());
        Ok(loaded)
    }

    /// The component whose bytes hash to `key`, from this process or
    /// from the compiled-code cache alone, described from its code, or
    /// `None` when neither has it. For a caller that knows, without
    /// reading them, that the bytes it would compile hash to `key` (the
    /// skill loader, when the file's stamp is one the digest memo
    /// remembers with that digest): what runs is code compiled from bytes
    /// with that digest, whatever the file holds.
    pub fn prepare_cached(&self, key: &str) -> Option<Arc<PendingComponent>> {
        let look = {
            let mut loaded = self.lock_loaded();
            if let Some(hit) = loaded.pending.get(key) {
                return Some(hit.clone());
            }
            if let Some(done) = loaded.by_digest.get(key) {
                return Some(Arc::new(PendingComponent::ready(done.clone())));
            }
            loaded
                .cache_looks
                .entry(key.to_string())
                .or_default()
                .clone()
        };
        look.get_or_init(|| {
            if let Some(Ok(cached)) = component::load_cached(&self.engine, key, self.cache.as_ref())
                && let std::collections::hash_map::Entry::Vacant(slot) =
                    self.lock_loaded().by_digest.entry(key.to_string())
            {
                slot.insert(Arc::new(cached));
                self.from_cache.fetch_add(1, Ordering::Relaxed);
            }
        });
        let done = self.lock_loaded().by_digest.get(key).cloned()?;
        Some(Arc::new(PendingComponent::ready(done)))
    }

    /// Describes the component in `bytes` (hashed by the caller with
    /// [`sha256_hex`] to `key`) from its type information at once, and
    /// compiles it in the background, once per process for the same
    /// bytes. [`PendingComponent::compiled`] waits for the code.
    pub fn prepare_hashed(
        self: &Arc<Self>,
        bytes: Vec<u8>,
        key: &str,
    ) -> Result<Arc<PendingComponent>, SandboxError> {
        {
            let loaded = self.lock_loaded();
            if let Some(hit) = loaded.pending.get(key) {
                return Ok(hit.clone());
            }
            if let Some(done) = loaded.by_digest.get(key) {
                return Ok(Arc::new(PendingComponent::ready(done.clone())));
            }
        }
        if let Some(problem) = header_problem(&bytes) {
            return Err(SandboxError::Load(format!("the file {problem}")));
        }
        let exports = schema::read_exports_from_binary(&bytes)
            .map_err(|e| SandboxError::Load(format!("it is refused: {e}")))?;
        let (pending, done) = PendingComponent::new(format!("sha256:{key}"), exports);
        let pending = Arc::new(pending);
        {
            let mut loaded = self.lock_loaded();
            if let Some(raced) = loaded.pending.get(key) {
                return Ok(raced.clone());
            }
            loaded.pending.insert(key.to_string(), pending.clone());
        }
        let (sandbox, key) = (self.clone(), key.to_string());
        rayon::spawn(move || {
            let compiled = sandbox.load_hashed(&bytes, &key).map_err(|e| match e {
                SandboxError::Load(why) => why,
                other => other.to_string(),
            });
            done.report(compiled);
        });
        Ok(pending)
    }

    /// Calls one exported function with JSON arguments. Its workspace
    /// changes are committed when it succeeds, and discarded otherwise.
    pub async fn call(
        &self,
        component: &LoadedComponent,
        function: &str,
        args: &Value,
        grants: &Grants,
        limits: &Limits,
    ) -> Result<CallOutcome, SandboxError> {
        let entry = Entry::Function {
            name: function.to_string(),
            args: args.clone(),
        };
        self.run_and_commit(GuestCall::new(component, entry, grants, limits))
            .await
    }

    /// Runs a command component with `argv` (`argv[0]` is the program name)
    /// and `stdin`; its changes are committed when it exits 0.
    pub async fn run_script(
        &self,
        component: &LoadedComponent,
        argv: Vec<String>,
        stdin: Vec<u8>,
        grants: &Grants,
        limits: &Limits,
    ) -> Result<CallOutcome, SandboxError> {
        let entry = Entry::Command { argv, stdin };
        self.run_and_commit(GuestCall::new(component, entry, grants, limits))
            .await
    }

    /// Runs `call`, its workspace changes left staged in the outcome (on
    /// top of `call.from`'s, for a dry run), for the caller to commit.
    pub async fn run(&self, call: GuestCall<'_>) -> Result<CallOutcome, SandboxError> {
        let _slot = self.slot().await?;
        call::run(&self.engine, call).await
    }

    /// [`Sandbox::run`], then the changes committed.
    async fn run_and_commit(&self, call: GuestCall<'_>) -> Result<CallOutcome, SandboxError> {
        let mut out = self.run(call).await?;
        out.changes = commit(&out.staged).await?;
        Ok(out)
    }

    async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, SandboxError> {
        self.slots
            .acquire()
            .await
            .map_err(|_| SandboxError::Host("the sandbox is shutting down".into()))
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Optimizing compiles running in the background, by the component's label.
static OPTIMIZING: Mutex<Vec<(String, std::thread::JoinHandle<()>)>> = Mutex::new(Vec::new());

fn lock_optimizing() -> std::sync::MutexGuard<'static, Vec<(String, std::thread::JoinHandle<()>)>> {
    OPTIMIZING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits for the optimizing compiles this process started after a quick
/// first compile, which store their code in the compiled-code cache for
/// later processes. `announce` is told the components still compiling, if
/// any, before the wait: a command line calls this before it exits, so
/// that the next run starts from the cache.
pub fn finish_optimizing(announce: impl FnOnce(&[String])) {
    let running = std::mem::take(&mut *lock_optimizing());
    let unfinished: Vec<String> = running
        .iter()
        .filter(|(_, handle)| !handle.is_finished())
        .map(|(label, _)| label.clone())
        .collect();
    if !unfinished.is_empty() {
        announce(&unfinished);
    }
    for (_, handle) in running {
        let _ = handle.join();
    }
}

/// The SHA-256 of `bytes` in lowercase hex: the identity of a component
/// (its cache key) and, with a `sha256:` prefix, of any skill file.
pub use crate::digest::sha256_hex;

/// Checks that `path` is a component-sized file, before reading it whole.
fn component_metadata(path: &Path) -> Result<std::fs::Metadata, SandboxError> {
    let name = file_name(path);
    let meta = std::fs::metadata(path)
        .map_err(|e| SandboxError::Load(format!("cannot read `{name}`: {}", io_reason(&e))))?;
    if !meta.is_file() {
        return Err(SandboxError::Load(format!("`{name}` is not a file")));
    }
    if meta.len() > MAX_COMPONENT_BYTES {
        return Err(SandboxError::Load(format!(
            "`{name}` is {} MiB; components over {} MiB are refused",
            meta.len() / MIB as u64,
            MAX_COMPONENT_BYTES / MIB as u64
        )));
    }
    Ok(meta)
}

/// The file's own name: errors name the file, never the host folder.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The file and its folder's name (`python-full/python.wasm`): enough to
/// tell two runtimes apart, without the host folders above.
fn file_label(path: &Path) -> String {
    match path.parent().and_then(Path::file_name) {
        Some(folder) => format!("{}/{}", folder.to_string_lossy(), file_name(path)),
        None => file_name(path),
    }
}

/// An I/O error's kind in words, without the OS's path-bearing message.
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        kind => kind.to_string(),
    }
}
