//! Per-call resource limits and the side-effect classes that pick their defaults.

use std::time::Duration;

/// What a tool may do to the world, declared by the skill's manifest.
///
/// The class picks the default wall-clock limit and, over MCP, the tool's
/// annotations. A command component (script) has a class of its own because
/// scripts typically do more work per call than a single typed function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffect {
    Read,
    Write,
    Destructive,
    Script,
}

impl SideEffect {
    pub fn default_timeout(self) -> Duration {
        match self {
            SideEffect::Read => Duration::from_secs(10),
            SideEffect::Write | SideEffect::Destructive => Duration::from_secs(30),
            SideEffect::Script => Duration::from_secs(60),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SideEffect::Read => "read",
            SideEffect::Write => "write",
            SideEffect::Destructive => "destructive",
            SideEffect::Script => "script",
        }
    }
}

/// The limits one sandboxed call runs under. Every field is enforced by the
/// sandbox and, when hit, reported as its own [`crate::SandboxError`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Wall-clock time, enforced by epoch interruption.
    pub timeout: Duration,
    /// Fuel: roughly one unit per WebAssembly instruction.
    pub fuel: u64,
    /// Maximum size of all the call's linear memories together, in bytes.
    pub memory_bytes: usize,
    /// Maximum number of table elements (function references).
    pub table_elements: usize,
    /// Maximum bytes captured from each of stdout and stderr.
    pub output_bytes: usize,
    /// Maximum size of a function's result, measured as JSON text.
    pub result_bytes: usize,
    /// Bytes the call may write into its scratch folder (`/tmp`).
    pub scratch_bytes: u64,
    /// Files, folders and links the call may create in `/tmp`.
    pub scratch_entries: u64,
    /// Bytes the call may write into a writable workspace.
    pub workspace_bytes: u64,
    /// Files, folders and links the call may create in a writable workspace.
    pub workspace_entries: u64,
    /// Outgoing HTTP requests the call may send.
    pub net_requests: u32,
    /// Response body bytes the call may receive over all its requests.
    pub net_response_bytes: u64,
}

pub const MIB: usize = 1024 * 1024;
pub(crate) const DEFAULT_FUEL: u64 = 10_000_000_000;
pub(crate) const DEFAULT_MEMORY_BYTES: usize = 64 * MIB;
pub(crate) const DEFAULT_OUTPUT_BYTES: usize = MIB;
pub(crate) const DEFAULT_SCRATCH_BYTES: u64 = 64 * MIB as u64;
pub(crate) const DEFAULT_SCRATCH_ENTRIES: u64 = 10_000;
pub(crate) const DEFAULT_WORKSPACE_BYTES: u64 = 256 * MIB as u64;
pub(crate) const DEFAULT_WORKSPACE_ENTRIES: u64 = 10_000;
pub(crate) const DEFAULT_NET_REQUESTS: u32 = 16;
pub(crate) const DEFAULT_NET_RESPONSE_BYTES: u64 = 8 * MIB as u64;

impl Limits {
    /// The defaults for a call of the given class.
    pub fn for_class(class: SideEffect) -> Self {
        Limits {
            timeout: class.default_timeout(),
            fuel: DEFAULT_FUEL,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            table_elements: 100_000,
            output_bytes: DEFAULT_OUTPUT_BYTES,
            result_bytes: DEFAULT_OUTPUT_BYTES,
            scratch_bytes: DEFAULT_SCRATCH_BYTES,
            scratch_entries: DEFAULT_SCRATCH_ENTRIES,
            workspace_bytes: DEFAULT_WORKSPACE_BYTES,
            workspace_entries: DEFAULT_WORKSPACE_ENTRIES,
            net_requests: DEFAULT_NET_REQUESTS,
            net_response_bytes: DEFAULT_NET_RESPONSE_BYTES,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::for_class(SideEffect::Read)
    }
}
