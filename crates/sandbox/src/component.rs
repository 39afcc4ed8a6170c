//! Loading components: compile once, keep an `InstancePre`, cache on disk.

use std::collections::HashMap;

use wasmtime::Engine;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre};

use super::cache::DiskCache;
use super::error::SandboxError;
use super::progress::{self, Compiling};
use super::store::CallState;
use crate::schema::{ComponentExports, export_index, read_exports};

/// A compiled component, ready to instantiate once per call.
pub struct LoadedComponent {
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    pub exports: ComponentExports,
    /// Where each function is exported, by its tool-facing name: a key
    /// valid for every instance.
    indices: HashMap<String, ComponentExportIndex>,
    pub(crate) pre: InstancePre<CallState>,
    /// Where the compiled code came from, for the audit and the benchmark.
    pub origin: CompileOrigin,
    /// How long compiling it (or loading it from the cache) took.
    pub load_time: std::time::Duration,
}

impl LoadedComponent {
    /// Where the function `name` is exported.
    pub(crate) fn index_of(&self, name: &str) -> Option<ComponentExportIndex> {
        self.indices.get(name).copied()
    }
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("digest", &self.digest)
            .field("functions", &self.exports.names())
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileOrigin {
    Compiled,
    DiskCache,
}

/// Compiles (or loads from cache) and pre-instantiates a component whose
/// bytes hash to `digest_hex` (SHA-256, computed once by the caller).
pub(crate) fn load_component(
    engine: &Engine,
    linker: &wasmtime::component::Linker<CallState>,
    bytes: &[u8],
    digest_hex: &str,
    label: Option<&str>,
    cache: Option<&DiskCache>,
) -> Result<LoadedComponent, SandboxError> {
    let started = std::time::Instant::now();
    let from_cache = cache.and_then(|c| c.load(engine, digest_hex));
    let (component, origin) = match from_cache {
        Some(component) => (component, CompileOrigin::DiskCache),
        None => {
            let digest_label = format!("sha256:{}", &digest_hex[..digest_hex.len().min(12)]);
            let ended = progress::compile_started(Compiling {
                label: label.unwrap_or(&digest_label),
                bytes: bytes.len(),
            });
            let component = compile(engine, bytes);
            if let Some(ended) = ended {
                ended(started.elapsed());
            }
            let component = component?;
            if let Some(cache) = cache {
                cache.store(engine, digest_hex, &component);
            }
            (component, CompileOrigin::Compiled)
        }
    };
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| SandboxError::Load(describe_link_error(&e)))?;
    let exports = read_exports(engine, &component)
        .map_err(|e| SandboxError::Load(format!("it is refused: {e}")))?;
    let indices = exports
        .functions
        .iter()
        .filter_map(|f| Some((f.name.clone(), export_index(&component, f)?)))
        .collect();
    Ok(LoadedComponent {
        digest: format!("sha256:{digest_hex}"),
        exports,
        indices,
        pre,
        origin,
        load_time: started.elapsed(),
    })
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
pub(crate) fn build_memory_images(component: &LoadedComponent) {
    let component = component.pre.component();
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
