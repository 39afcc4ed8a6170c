//! The process's wasmtime engines (optimizing and baseline), and their epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy};

use super::scratch::ScratchPool;
use super::store::CallState;

/// How often the epoch advances. Timeouts and cancellation take effect
/// within about one tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The largest memory any call may be given (`--memory-mib` is capped to
/// this). It sizes the pooling allocator's per-slot reservation.
pub const MAX_MEMORY_BYTES: usize = 4 << 30;

/// How many component instances may be alive at once across all calls.
/// [`super::Sandbox`] admits at most this many calls at a time, so the pool
/// is never exhausted; further calls wait for a slot.
pub const POOL_INSTANCES: u32 = 64;

/// The most entries a pooled table may have.
const TABLE_ELEMENTS: usize = 1 << 17;

/// How much of each pooled memory and table stays mapped between calls
/// and is reset in place.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// Engine-wide settings. Per-call limits live in [`super::Limits`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Use the pooling allocator (copy-on-write memory images, instance
    /// slots reused across calls). Off only for diagnosis.
    pub pooling: bool,
    /// Maximum wasm stack, in bytes; deeper recursion traps.
    pub max_wasm_stack: usize,
    /// Compile every component with the baseline compiler and never
    /// optimize it: for a process whose components run briefly once, and
    /// for testing that the baseline compiler's code is held to every
    /// limit. Ignored where there is no baseline compiler.
    pub baseline_only: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pooling: true,
            max_wasm_stack: 1 << 20,
            baseline_only: false,
        }
    }
}

/// The shared engine plus the linker holding WASI, built once per process.
pub(crate) struct SandboxEngine {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    /// wasmtime's baseline compiler, for the first run of a large
    /// component on a machine; `None` where wasmtime does not support it
    /// (not x86-64).
    pub(crate) quick: Option<QuickEngine>,
    /// [`EngineOptions::baseline_only`].
    pub(crate) baseline_only: bool,
    pub(crate) scratch: Arc<ScratchPool>,
    ticker: Ticker,
}

/// An engine that compiles with Winch, wasmtime's baseline compiler: in a
/// single pass, five times faster than Cranelift, to code that runs about
/// half as fast. A large component's first run on a machine is compiled
/// with it, so the Python runtime's first script starts in about a second
/// instead of six; the optimizing compile follows in the background and
/// replaces it (`component::optimize`). Same limits, fuel and epochs as
/// the main engine; instances are allocated on demand, since it serves
/// a few first calls and should not reserve a second pool.
pub(crate) struct QuickEngine {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
}

/// The WebAssembly engine could not start: the system refused the virtual
/// memory it reserves, or the host interfaces would not link.
#[derive(Debug, thiserror::Error)]
#[error("the sandbox engine could not start: {step} failed ({source:#})")]
#[deny(missing_docs)]
pub struct EngineError {
    step: &'static str,
    #[source]
    source: wasmtime::Error,
}

impl EngineError {
    fn at(step: &'static str) -> impl FnOnce(wasmtime::Error) -> EngineError {
        move |source| EngineError { step, source }
    }
}

impl SandboxEngine {
    pub(crate) fn new(options: &EngineOptions) -> Result<Self, EngineError> {
        let mut config = base_config(options);
        // Exception handling, which the full Python runtime's C++ code
        // is compiled with; wasmtime allocates exceptions on a GC heap,
        // but the GC proposal (structs and arrays a guest manages) is
        // not needed by any runtime here and stays off.
        config.wasm_exceptions(true).wasm_gc(false);
        if options.pooling {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling_config()));
        }
        let engine = match Engine::new(&config) {
            Ok(engine) => engine,
            // A host with little virtual address space (a tight ulimit -v)
            // cannot reserve the pool; run without it rather than not at all.
            Err(_) if options.pooling => {
                config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                Engine::new(&config).map_err(EngineError::at("creating the engine"))?
            }
            Err(e) => return Err(EngineError::at("creating the engine")(e)),
        };
        let linker = link(&engine)?;
        let quick = QuickEngine::new(options);
        let mut ticking = vec![engine.clone()];
        ticking.extend(quick.as_ref().map(|q| q.engine.clone()));
        Ok(SandboxEngine {
            engine,
            linker,
            baseline_only: options.baseline_only && quick.is_some(),
            quick,
            scratch: Arc::default(),
            ticker: Ticker::start(ticking),
        })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for SandboxEngine {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

impl QuickEngine {
    /// `None` where Winch cannot compile for this machine: components are
    /// then compiled by Cranelift alone, as before.
    fn new(options: &EngineOptions) -> Option<Self> {
        // Winch builds for aarch64 too, but wasmtime supports it only on
        // x86-64; elsewhere Cranelift alone compiles, as it always did.
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let mut config = base_config(options);
        config
            .strategy(Strategy::Winch)
            .allocation_strategy(InstanceAllocationStrategy::OnDemand);
        let built = Engine::new(&config)
            .map_err(EngineError::at("creating the baseline engine"))
            .and_then(|engine| Ok((link(&engine)?, engine)));
        match built {
            Ok((linker, engine)) => Some(QuickEngine { engine, linker }),
            Err(e) => {
                tracing::debug!(error = %e, "no baseline compiler; first runs use Cranelift");
                None
            }
        }
    }
}

/// What both engines share: limits enforced in the code they compile.
fn base_config(options: &EngineOptions) -> Config {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .consume_fuel(true)
        .max_wasm_stack(options.max_wasm_stack)
        // The fiber stack must hold the wasm stack plus host frames.
        .async_stack_size(options.max_wasm_stack + (1 << 20));
    config
}

/// The host interfaces every component is linked against.
fn link(engine: &Engine) -> Result<Linker<CallState>, EngineError> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(EngineError::at("linking WASI"))?;
    // Linked for every component, so those that import it load; each
    // request passes the call's egress policy (egress/).
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(EngineError::at("linking wasi:http"))?;
    super::fsguard::add_to_linker(&mut linker)
        .map_err(EngineError::at("linking the filesystem quotas"))?;
    Ok(linker)
}

fn pooling_config() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * 8)
        .total_memories(POOL_INSTANCES * 4)
        .total_tables(POOL_INSTANCES * 8)
        .total_stacks(POOL_INSTANCES)
        .max_memory_size(MAX_MEMORY_BYTES)
        // The per-call limiter counts every memory and table together, so a
        // component may split its budget across several memories (the
        // multi-memory proposal) without gaining more than its cap.
        .max_memories_per_component(8)
        .max_memories_per_module(8)
        .max_tables_per_component(16)
        // The full Python runtime's function table holds about 47,000
        // entries (CPython and its compiled packages); the default, 20,000,
        // would refuse it.
        .table_elements(TABLE_ELEMENTS)
        .max_core_instances_per_component(32)
        // The full Python runtime's instance holds 1.5 MB of function
        // references and context; 4 MiB leaves it room to grow.
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        // Exceptions live on a GC heap: one per store at most.
        .total_gc_heaps(POOL_INSTANCES)
        // Reset the pages a call dirtied with memset, found with the
        // PAGEMAP_SCAN ioctl where the kernel has it (6.7+), instead of
        // madvise: no page faults on the next call and no cross-core TLB
        // shootdown per call. The guest still starts from a clean image.
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// A thread that advances the engines' epochs every [`EPOCH_TICK`].
struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engines: Vec<Engine>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("skillbox-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engines.iter().for_each(Engine::increment_epoch);
                }
            })
            .expect("spawn the epoch ticker thread");
        Ticker {
            stop,
            handle: Some(handle),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
