//! The one wasmtime engine of a process, and its epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

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
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pooling: true,
            max_wasm_stack: 1 << 20,
        }
    }
}

/// The shared engine plus the linker holding WASI, built once per process.
pub(crate) struct SandboxEngine {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    pub(crate) scratch: Arc<ScratchPool>,
    ticker: Ticker,
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
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .consume_fuel(true)
            .max_wasm_stack(options.max_wasm_stack)
            // The fiber stack must hold the wasm stack plus host frames.
            .async_stack_size(options.max_wasm_stack + (1 << 20))
            // Exception handling, which the full Python runtime's C++ code
            // is compiled with; wasmtime allocates exceptions on a GC heap,
            // but the GC proposal (structs and arrays a guest manages) is
            // not needed by any runtime here and stays off.
            .wasm_exceptions(true)
            .wasm_gc(false);
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
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(EngineError::at("linking WASI"))?;
        // Linked for every component, so those that import it load; each
        // request passes the call's egress policy (egress/).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(EngineError::at("linking wasi:http"))?;
        super::fsguard::add_to_linker(&mut linker)
            .map_err(EngineError::at("linking the filesystem quotas"))?;
        let ticker = Ticker::start(engine.clone());
        Ok(SandboxEngine {
            engine,
            linker,
            scratch: Arc::default(),
            ticker,
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

/// A thread that advances the engine's epoch every [`EPOCH_TICK`].
struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("skillbox-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
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
