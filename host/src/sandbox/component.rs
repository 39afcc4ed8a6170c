//! Loading components: compile once, keep an `InstancePre`, cache on disk.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

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
/// Compiled code is native code that the host maps and runs, so nothing in
/// this folder is trusted by location alone. Before a file is deserialized:
/// - the folder and the file are owned by the user running this process and
///   writable by nobody else, and the file is a regular file reached without
///   following a symlink;
/// - the file carries a keyed BLAKE3 MAC, under a key kept in the folder (mode
///   0600), over the component digest it claims, the engine's compatibility
///   hash and the compiled bytes. A file copied over another's name, or
///   written by hand without the key, fails the check.
///
/// Anything that fails is discarded and recompiled, with a warning. Write
/// grants never cover this folder (see `skill::policy`), so a guest cannot
/// reach the key or the files.
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

/// File header: a magic tag, then the 32-byte MAC, then the compiled code.
/// Version 02 MACs with keyed BLAKE3 (01 used HMAC-SHA256, which took a
/// quarter of a large component's start: 27 ms for 43 MB of code).
const MAGIC: &[u8; 8] = b"SKBXCW02";
const MAC_LEN: usize = 32;
const KEY_FILE: &str = ".key";
/// Compiled code larger than this is not read back.
const MAX_CACHED_BYTES: u64 = 1 << 30;

impl DiskCache {
    pub fn new(dir: PathBuf) -> Self {
        DiskCache { dir }
    }

    /// `$SKILLBOX_CACHE_DIR`, else the user's cache folder.
    pub fn default_location() -> Option<Self> {
        let dir = crate::dirs::user_dir("SKILLBOX_CACHE_DIR", "XDG_CACHE_HOME", ".cache")?;
        Some(DiskCache::new(dir.join("components")))
    }

    /// The cache folder, for the checks that keep write grants off it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file_name(engine: &Engine, digest_hex: &str) -> (String, u64) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = hasher.finish();
        (
            // The format version is in the name too, so hosts that write
            // different formats share a cache folder without evicting each
            // other's files.
            format!("{digest_hex}-{engine_hash:016x}-v2.cwasm"),
            engine_hash,
        )
    }

    /// Keyed BLAKE3 over the component's digest, the engine's hash and the
    /// code. The key file's bytes are stretched to the 32-byte key BLAKE3
    /// takes; comparing two `blake3::Hash`es is constant-time.
    fn mac(key: &[u8], digest_hex: &str, engine_hash: u64, code: &[u8]) -> blake3::Hash {
        let key = blake3::derive_key("skillbox compiled-code cache MAC v2", key);
        let mut mac = blake3::Hasher::new_keyed(&key);
        mac.update(digest_hex.as_bytes());
        mac.update(&engine_hash.to_le_bytes());
        mac.update(code);
        mac.finalize()
    }

    fn load(&self, engine: &Engine, digest_hex: &str) -> Option<Component> {
        let (name, engine_hash) = Self::file_name(engine, digest_hex);
        let path = self.dir.join(&name);
        if std::fs::symlink_metadata(&path).is_err() {
            return None;
        }
        let checked = (|| {
            private_folder(&self.dir)?;
            let key = self.key(false)?;
            let bytes = read_private_file(&path, MAX_CACHED_BYTES)?;
            let rest = bytes
                .strip_prefix(MAGIC.as_slice())
                .ok_or("it has no cache header")?;
            if rest.len() < MAC_LEN {
                return Err("it is truncated");
            }
            let (tag, code) = rest.split_at(MAC_LEN);
            let tag: [u8; MAC_LEN] = tag.try_into().map_err(|_| "it is truncated")?;
            if Self::mac(&key, digest_hex, engine_hash, code) != blake3::Hash::from_bytes(tag) {
                return Err("its MAC does not match the component it is named for");
            }
            Ok(bytes)
        })();
        let bytes = match checked {
            Ok(bytes) => bytes,
            Err(why) => {
                tracing::warn!(
                    "compiled-code cache: discarding `{name}`: {why}; the component is compiled again"
                );
                let _ = std::fs::remove_file(&path);
                return None;
            }
        };
        let code = &bytes[MAGIC.len() + MAC_LEN..];
        // SAFETY: `Component::deserialize` runs the bytes as native code, so
        // they must be what this process's engine produced for this very
        // component. They are: the folder and the file are owned by this
        // user and writable by no one else, the file was opened without
        // following symlinks and is a regular file, and its HMAC (keyed by a
        // secret only this user can read) covers the component's sha256, the
        // engine's compatibility hash and every byte deserialized here.
        match unsafe { Component::deserialize(engine, code) } {
            Ok(component) => Some(component),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn store(&self, engine: &Engine, digest_hex: &str, component: &Component) {
        // The cache is an optimisation: failing to write it is not an error.
        let Ok(code) = component.serialize() else {
            return;
        };
        if create_private_folder(&self.dir).is_err() || private_folder(&self.dir).is_err() {
            tracing::warn!(
                "compiled-code cache: the folder is not private to this user; not caching"
            );
            return;
        }
        let Ok(key) = self.key(true) else { return };
        let (name, engine_hash) = Self::file_name(engine, digest_hex);
        let tag = Self::mac(&key, digest_hex, engine_hash, &code);
        let Ok(mut tmp) = tempfile::NamedTempFile::new_in(&self.dir) else {
            return;
        };
        let written = std::io::Write::write_all(&mut tmp, MAGIC)
            .and_then(|()| std::io::Write::write_all(&mut tmp, tag.as_bytes()))
            .and_then(|()| std::io::Write::write_all(&mut tmp, &code));
        if written.is_ok() {
            let _ = tmp.persist(self.dir.join(name));
        }
    }

    /// The MAC key, created on first use when `create` is set.
    fn key(&self, create: bool) -> Result<Vec<u8>, &'static str> {
        let path = self.dir.join(KEY_FILE);
        if create && std::fs::symlink_metadata(&path).is_err() {
            let mut key = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut r| std::io::Read::read_exact(&mut r, &mut key))
                .map_err(|_| "no random source for the cache key")?;
            let mut tmp =
                tempfile::NamedTempFile::new_in(&self.dir).map_err(|_| "cannot write the key")?;
            std::io::Write::write_all(&mut tmp, &key).map_err(|_| "cannot write the key")?;
            // Another process may have created it meanwhile; keep theirs.
            let _ = tmp.persist_noclobber(&path);
        }
        let key = read_private_file(&path, 1024)?;
        if key.len() < 16 {
            return Err("the cache key is too short");
        }
        Ok(key)
    }
}

fn create_private_folder(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The folder is a real folder owned by this user and writable only by it.
fn private_folder(dir: &Path) -> Result<(), &'static str> {
    let meta = std::fs::symlink_metadata(dir).map_err(|_| "the cache folder cannot be read")?;
    if !meta.is_dir() {
        return Err("the cache folder is not a folder (a symlink?)");
    }
    owned_and_private(&meta)
}

fn owned_and_private(meta: &std::fs::Metadata) -> Result<(), &'static str> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err("it is owned by another user");
    }
    if meta.mode() & 0o022 != 0 {
        return Err("it is writable by group or others");
    }
    Ok(())
}

/// Reads a regular, private file without following a symlink or blocking
/// on a FIFO; checks are made on the opened handle, not the path.
fn read_private_file(path: &Path, limit: u64) -> Result<Vec<u8>, &'static str> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(path)
        .map_err(|_| "it cannot be opened (a symlink, or unreadable)")?;
    let meta = file.metadata().map_err(|_| "it cannot be read")?;
    if !meta.is_file() {
        return Err("it is not a regular file");
    }
    owned_and_private(&meta)?;
    if meta.len() > limit {
        return Err("it is too large");
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| "it cannot be read")?;
    Ok(bytes)
}

/// Compiles (or loads from cache) and pre-instantiates a component whose
/// bytes hash to `digest_hex` (SHA-256, computed once by the caller).
pub(crate) fn load_component(
    engine: &Engine,
    linker: &wasmtime::component::Linker<CallState>,
    bytes: &[u8],
    digest_hex: &str,
    cache: Option<&DiskCache>,
) -> Result<LoadedComponent, SandboxError> {
    let from_cache = cache.and_then(|c| c.load(engine, digest_hex));
    let (component, origin) = match from_cache {
        Some(component) => (component, CompileOrigin::DiskCache),
        None => {
            let component = compile(engine, bytes)?;
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

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}
