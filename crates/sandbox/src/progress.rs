//! Who is told when a component is compiled: the first run of a large
//! component on a machine (the full Python runtime takes about a minute)
//! would otherwise be silence. The binary installs a watcher that shows it
//! on a terminal; a library embedding the sandbox installs none, or its own.

use std::sync::OnceLock;
use std::time::Duration;

/// What a compile that has started is, for the watcher to show.
#[derive(Debug, Clone, Copy)]
pub struct Compiling<'a> {
    /// The component's file name, or its digest when it came from memory.
    pub label: &'a str,
    /// Its size in bytes.
    pub bytes: usize,
    /// Whether this is the baseline compiler's quick compile for a first
    /// run (the optimizing compile then follows in the background, and is
    /// not watched: see [`crate::finish_optimizing`]).
    pub quick: bool,
}

/// Called when a compile starts; the closure it returns is called with
/// the time it took when it succeeds, and dropped uncalled when it fails.
pub type CompileWatcher =
    Box<dyn Fn(Compiling<'_>) -> Box<dyn FnOnce(Duration) + Send> + Send + Sync>;

static WATCHER: OnceLock<CompileWatcher> = OnceLock::new();

/// Installs the process's compile watcher; the first one installed stays.
pub fn watch_compiles(watcher: CompileWatcher) {
    let _ = WATCHER.set(watcher);
}

/// Tells the watcher, if any, that a compile starts; returns what to call
/// when it ends.
pub(crate) fn compile_started(
    compiling: Compiling<'_>,
) -> Option<Box<dyn FnOnce(Duration) + Send>> {
    WATCHER.get().map(|watch| watch(compiling))
}
