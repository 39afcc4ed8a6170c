//! Loading components: compile once, keep an `InstancePre`, cache on disk.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre};

use super::error::SandboxError;
use super::store::CallState;
use crate::schema::{ComponentExports, read_exports};

/// A compiled component, ready to instantiate once per call.
pub struct LoadedComponent {
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    pub exports: ComponentExports,
    pub(crate) pre: InstancePre<CallState>,
    /// Where the compiled code came from, for the audit and the benchmark.
    pub origin: CompileOrigin,
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

/// The on-disk cache of compiled components, keyed by content and engine.
///
/// Compiled code is native code: it is only ever read from a folder the
/// user owns, and a file that fails to load is recompiled and replaced.
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: PathBuf) -> Self {
        DiskCache { dir }
    }

    /// `$SKILLBOX_CACHE_DIR`, else the user's cache folder.
    pub fn default_location() -> Option<Self> {
        let dir = crate::dirs::user_dir("SKILLBOX_CACHE_DIR", "XDG_CACHE_HOME", ".cache")?;
        Some(DiskCache::new(dir.join("components")))
    }

    fn path_for(&self, engine: &Engine, digest_hex: &str) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir
            .join(format!("{digest_hex}-{:016x}.cwasm", hasher.finish()))
    }

    fn load(&self, engine: &Engine, path: &Path) -> Option<Component> {
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `store` below from
        // `Component::serialize` for an engine with the same compatibility
        // hash, in a folder owned by the user running this process.
        unsafe { Component::deserialize_file(engine, path) }.ok()
    }

    fn store(&self, path: &Path, component: &Component) {
        // The cache is an optimisation: failing to write it is not an error.
        let Ok(bytes) = component.serialize() else {
            return;
        };
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let Ok(mut tmp) = tempfile::NamedTempFile::new_in(&self.dir) else {
            return;
        };
        if std::io::Write::write_all(&mut tmp, &bytes).is_ok() {
            let _ = tmp.persist(path);
        }
    }
}

/// Reads, compiles (or loads from cache) and pre-instantiates a component.
pub(crate) fn load_component(
    engine: &Engine,
    linker: &wasmtime::component::Linker<CallState>,
    bytes: &[u8],
    cache: Option<&DiskCache>,
) -> Result<LoadedComponent, SandboxError> {
    let digest_hex = hex(&Sha256::digest(bytes));
    let cached_path = cache.map(|c| (c, c.path_for(engine, &digest_hex)));
    let from_cache = cached_path
        .as_ref()
        .and_then(|(cache, path)| cache.load(engine, path));
    let (component, origin) = match from_cache {
        Some(component) => (component, CompileOrigin::DiskCache),
        None => {
            let component = compile(engine, bytes)?;
            if let Some((cache, path)) = &cached_path {
                cache.store(path, &component);
            }
            (component, CompileOrigin::Compiled)
        }
    };
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| SandboxError::Load(describe_link_error(&e)))?;
    let exports = read_exports(engine, &component);
    Ok(LoadedComponent {
        digest: format!("sha256:{digest_hex}"),
        exports,
        pre,
        origin,
    })
}

fn compile(engine: &Engine, bytes: &[u8]) -> Result<Component, SandboxError> {
    if let Some(problem) = header_problem(bytes) {
        return Err(SandboxError::Load(format!("the file {problem}")));
    }
    Component::from_binary(engine, bytes)
        .map_err(|e| SandboxError::Load(format!("it does not compile: {}", root_message(&e))))
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
         interfaces (no network, no HTTP)",
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

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
