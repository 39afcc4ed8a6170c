//! Loading components: compile once, keep an `InstancePre`, cache on disk.
//!
//! A large component missing from the cache is compiled twice: first by
//! the baseline compiler, so its first call starts within a second or so,
//! then by Cranelift on a thread of its own, whose code is stored in the
//! cache and replaces the baseline code for every later call.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use wasmtime::Engine;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};

use super::cache::DiskCache;
use super::engine::SandboxEngine;
use super::error::SandboxError;
use super::progress::{self, Compiling};
use super::store::CallState;
use crate::schema::{ComponentExports, export_index, read_exports};

/// Components at least this large are compiled by the baseline compiler
/// first when their code is not in the cache: Cranelift takes about a
/// second per 5 MiB here, the baseline compiler a fifth of that.
pub const QUICK_COMPILE_MIN_BYTES: usize = 4 << 20;

/// A compiled component, ready to instantiate once per call.
pub struct LoadedComponent {
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    pub exports: ComponentExports,
    /// Where the compiled code came from, for the audit and the benchmark.
    pub origin: CompileOrigin,
    /// How long compiling it (or loading it from the cache) took.
    pub load_time: std::time::Duration,
    /// The code calls run now; replaced once when baseline code is
    /// optimized.
    code: Mutex<Arc<Code>>,
    optimized: Condvar,
}

/// Compiled code and what a call needs to find its functions in it.
#[derive(Clone)]
pub(crate) struct Code {
    pub(crate) pre: InstancePre<CallState>,
    /// Where each function is exported, by its tool-facing name: a key
    /// valid for every instance of this code (not of another compile).
    indices: HashMap<String, ComponentExportIndex>,
    optimized: bool,
}

impl Code {
    /// Where the function `name` is exported.
    pub(crate) fn index_of(&self, name: &str) -> Option<ComponentExportIndex> {
        self.indices.get(name).copied()
    }
}

impl LoadedComponent {
    /// The code a call starting now runs.
    pub(crate) fn code(&self) -> Arc<Code> {
        self.lock_code().clone()
    }

    /// Whether calls run optimized code: false between a baseline compile
    /// and the end of its optimizing compile.
    pub fn is_optimized(&self) -> bool {
        self.lock_code().optimized
    }

    /// Blocks until calls run optimized code.
    pub fn wait_optimized(&self) {
        let code = self.lock_code();
        let _done = self
            .optimized
            .wait_while(code, |code| !code.optimized)
            .unwrap_or_else(|e| e.into_inner());
    }

    /// Ends the optimizing compile: calls run `optimized`, or keep the
    /// baseline code when it failed; waiters wake either way.
    fn replace_code(&self, optimized: Result<Code, SandboxError>) {
        let mut current = self.lock_code();
        match optimized {
            Ok(code) => *current = Arc::new(code),
            Err(e) => {
                tracing::warn!(component = %self.digest, error = %e, "optimizing compile failed; calls keep the baseline code");
                let mut kept = Code::clone(&current);
                kept.optimized = true;
                *current = Arc::new(kept);
            }
        }
        drop(current);
        self.optimized.notify_all();
    }

    fn lock_code(&self) -> MutexGuard<'_, Arc<Code>> {
        self.code.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("digest", &self.digest)
            .field("functions", &self.exports.names())
            .field("origin", &self.origin)
            .field("optimized", &self.is_optimized())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompileOrigin {
    /// Compiled by Cranelift in this process, and stored in the cache.
    Compiled,
    /// Loaded from the compiled-code cache.
    DiskCache,
    /// Compiled by the baseline compiler for its first calls; Cranelift's
    /// code replaces it when the background compile ends.
    Quick,
}

/// Whether a load may start with the baseline compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compile {
    /// Quick first, when the component is large and not in the cache.
    QuickFirst,
    /// Cranelift only: for filling the cache ahead of time.
    Optimized,
}

/// Compiles (or loads from cache) and pre-instantiates a component whose
/// bytes hash to `digest_hex` (SHA-256, computed once by the caller). A
/// component compiled quickly comes back with what its optimizing compile
/// needs; [`optimize`] runs it.
pub(crate) fn load_component(
    engine: &SandboxEngine,
    bytes: &[u8],
    digest_hex: &str,
    label: Option<&str>,
    cache: Option<&DiskCache>,
    mode: Compile,
) -> Result<LoadedComponent, SandboxError> {
    if let Some(cached) = load_cached(engine, digest_hex, cache) {
        return cached;
    }
    let started = std::time::Instant::now();
    let digest_label = digest_label(digest_hex);
    let label = label.unwrap_or(&digest_label);
    let main = (&engine.engine, &engine.linker);
    let cache = cache.filter(|_| !engine.baseline_only);
    let quick = engine.quick.as_ref().filter(|_| {
        engine.baseline_only
            || (mode == Compile::QuickFirst && bytes.len() >= QUICK_COMPILE_MIN_BYTES)
    });
    if let Some(quick) = quick {
        match watched(label, bytes.len(), true, || compile(&quick.engine, bytes)) {
            Ok(component) => {
                let baseline = (&quick.engine, &quick.linker);
                let done = engine.baseline_only;
                return loaded(
                    digest_hex,
                    baseline,
                    component,
                    CompileOrigin::Quick,
                    done,
                    started,
                );
            }
            // A proposal the baseline compiler lacks (exceptions, tail
            // calls): Cranelift compiles it, as any other.
            Err(e) => tracing::debug!(component = label, error = %e, "no quick compile"),
        }
    }
    let component = watched(label, bytes.len(), false, || compile(&engine.engine, bytes))?;
    if let Some(cache) = cache {
        cache.store(&engine.engine, digest_hex, &component);
    }
    loaded(
        digest_hex,
        main,
        component,
        CompileOrigin::Compiled,
        true,
        started,
    )
}

/// The code the compiled-code cache holds for the component whose bytes
/// hash to `digest_hex`, described from that code; `None` when the cache
/// does not hold it. The cache holds Cranelift's code, which a
/// baseline-only engine does not run.
pub(crate) fn load_cached(
    engine: &SandboxEngine,
    digest_hex: &str,
    cache: Option<&DiskCache>,
) -> Option<Result<LoadedComponent, SandboxError>> {
    let started = std::time::Instant::now();
    let cache = cache.filter(|_| !engine.baseline_only)?;
    let component = cache.load(&engine.engine, digest_hex)?;
    let main = (&engine.engine, &engine.linker);
    Some(loaded(
        digest_hex,
        main,
        component,
        CompileOrigin::DiskCache,
        true,
        started,
    ))
}

/// How progress names a component that has no file name: its digest, cut.
pub(crate) fn digest_label(digest_hex: &str) -> String {
    format!("sha256:{}", &digest_hex[..digest_hex.len().min(12)])
}

/// `compile`, told to the compile watcher.
fn watched(
    label: &str,
    bytes: usize,
    quick: bool,
    compile: impl FnOnce() -> Result<Component, SandboxError>,
) -> Result<Component, SandboxError> {
    let started = std::time::Instant::now();
    let ended = progress::compile_started(Compiling {
        label,
        bytes,
        quick,
    });
    let component = compile();
    // A compile that failed (the baseline compiler refusing a proposal it
    // lacks, before Cranelift takes over) is not reported as compiled.
    if let (Some(ended), Ok(_)) = (ended, &component) {
        ended(started.elapsed());
    }
    component
}

/// The engine a component was compiled by, and its linker.
type CompiledBy<'a> = (&'a Engine, &'a Linker<CallState>);

fn loaded(
    digest_hex: &str,
    (engine, linker): CompiledBy<'_>,
    component: Component,
    origin: CompileOrigin,
    optimized: bool,
    started: std::time::Instant,
) -> Result<LoadedComponent, SandboxError> {
    let exports = read_exports(engine, &component)
        .map_err(|e| SandboxError::Load(format!("it is refused: {e}")))?;
    let code = code(linker, &exports, component, optimized)?;
    Ok(LoadedComponent {
        digest: format!("sha256:{digest_hex}"),
        exports,
        origin,
        load_time: started.elapsed(),
        code: Mutex::new(Arc::new(code)),
        optimized: Condvar::new(),
    })
}

fn code(
    linker: &Linker<CallState>,
    exports: &ComponentExports,
    component: Component,
    optimized: bool,
) -> Result<Code, SandboxError> {
    let indices = exports
        .functions
        .iter()
        .filter_map(|f| Some((f.name.clone(), export_index(&component, f)?)))
        .collect();
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| SandboxError::Load(describe_link_error(&e)))?;
    Ok(Code {
        pre,
        indices,
        optimized,
    })
}

/// Compiles `bytes` with Cranelift on a thread of its own, stores the code
/// in the cache, and makes `component`'s calls run it. If the compile
/// fails or panics (it never should where the baseline compile succeeded),
/// or no thread can be started, calls keep the baseline code and the
/// component counts as optimized, so no one waits forever.
pub(crate) fn optimize(
    engine: &SandboxEngine,
    bytes: Vec<u8>,
    digest_hex: String,
    cache: Option<DiskCache>,
    component: Arc<LoadedComponent>,
) -> Option<JoinHandle<()>> {
    let (main, linker) = (engine.engine.clone(), engine.linker.clone());
    let optimizing = component.clone();
    let spawned = std::thread::Builder::new()
        .name("skillbox-optimize".into())
        .spawn(move || {
            let work = || {
                in_the_background(|| compile(&main, &bytes)).and_then(|compiled| {
                    if let Some(cache) = &cache {
                        cache.store(&main, &digest_hex, &compiled);
                    }
                    code(&linker, &optimizing.exports, compiled, true)
                })
            };
            let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .unwrap_or_else(|_| Err(SandboxError::Host("the compiler panicked".into())));
            optimizing.replace_code(compiled);
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(e) => {
            component.replace_code(Err(SandboxError::Host(format!("no thread for it: {e}"))));
            None
        }
    }
}

/// Runs `work` on a thread pool of its own whose threads yield to the
/// rest of the process: the first call, running on the quickly compiled
/// code, should not wait for the compile that replaces it.
fn in_the_background<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|n| format!("skillbox-optimize-{n}"))
        .start_handler(|_| lower_this_threads_priority())
        .build();
    match pool {
        Ok(pool) => pool.install(work),
        Err(_) => work(),
    }
}

fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: setpriority changes the scheduling priority of the calling
    // thread (Linux gives each thread its own nice value) and touches no
    // memory.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

/// Builds the component's copy-on-write memory images before its first
/// instantiation, which would otherwise build them and fail with the
/// kernel's error. On Linux each is a sealed memfd, and sealing now and
/// then fails with EBUSY while the kernel still holds references to the
/// pages just written (about one CLI run in 30 of the Python runtime,
/// whose image is large): a call then failed with a host error. A failed
/// attempt leaves nothing behind, so it is tried again; once built, this
/// is a check of a cell. Built at the first call, not at load, so that
/// components a server loads and never calls hold no images.
pub(crate) fn build_memory_images(code: &Code) {
    let component = code.pre.component();
    for attempt in 0..4u32 {
        match component.initialize_copy_on_write_image() {
            Ok(()) => return,
            Err(e) if attempt < 3 => {
                tracing::debug!(attempt, error = %e, "building memory images");
                std::thread::sleep(std::time::Duration::from_millis(1 << attempt));
            }
            Err(_) => return,
        }
    }
}

fn compile(engine: &Engine, bytes: &[u8]) -> Result<Component, SandboxError> {
    if let Some(problem) = header_problem(bytes) {
        return Err(SandboxError::Load(format!("the file {problem}")));
    }
    let compiled = Component::from_binary(engine, bytes)
        .map_err(|e| SandboxError::Load(format!("it does not compile: {}", root_message(&e))));
    return_freed_memory();
    compiled
}

/// Gives the compiler's freed working memory back to the system. glibc
/// keeps freed heap pages mapped, so a server that compiled a few
/// components at start stayed at three times its idle size for its whole
/// life. Compiles are rare and slow; the trim costs little beside them.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim only releases free memory of the allocator's own
    // arenas; it touches no memory the program still owns.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Why `bytes` cannot be a WebAssembly component, judged from its
/// header alone (cheap enough for catalog checks), if it cannot.
pub fn header_problem(bytes: &[u8]) -> Option<&'static str> {
    if !bytes.starts_with(b"\0asm") || bytes.len() < 8 {
        Some(
            "is not WebAssembly (no \\0asm header); build the tool with `cargo build --target wasm32-wasip2`",
        )
    } else if bytes[6..8] != [1, 0] {
        Some(
            "is a core WebAssembly module, not a component; build it for wasm32-wasip2 or wrap it with `wasm-tools component new`",
        )
    } else {
        None
    }
}

fn describe_link_error(e: &wasmtime::Error) -> String {
    format!(
        "it needs an import this host does not provide ({}); tools may import only WASI 0.2 \
         interfaces, wasi:http included",
        root_message(e)
    )
}

/// The innermost message of an error chain, without backtraces.
pub(crate) fn root_message(e: &wasmtime::Error) -> String {
    e.chain()
        .last()
        .map(|c| c.to_string())
        .unwrap_or_else(|| e.to_string())
}
