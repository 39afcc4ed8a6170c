//! A component whose interface is known before its code is compiled.
//!
//! Listing a skill's tools needs only the component's types, which its
//! bytes state (`schema::read_exports_from_binary`); running one needs the
//! compiled code. So a component is described at once and compiled in the
//! background, on the compiler's thread pool: a first `tools/list` never
//! waits for a compiler, and a call waits only for its own component.
//! Code compiled already (in this process, or in the compiled-code cache)
//! is described from itself, which says the same as its bytes.

use std::sync::Arc;

use tokio::sync::watch;

use super::component::LoadedComponent;
use crate::schema::ComponentExports;

/// How a compile ended: the code, or why there is none, in words (kept to
/// be told to every caller that waits for it; a `SandboxError::Load`'s
/// reason).
pub type Compiled = Result<Arc<LoadedComponent>, String>;

/// A component described from its bytes and compiling, or compiled.
pub struct PendingComponent {
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// Its exported functions, read without compiling (or from its code,
    /// when that is compiled already).
    pub exports: ComponentExports,
    compiled: watch::Receiver<Option<Compiled>>,
}

impl std::fmt::Debug for PendingComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingComponent")
            .field("digest", &self.digest)
            .field("functions", &self.exports.names())
            .field("compiled", &self.compiled.borrow().is_some())
            .finish()
    }
}

/// The sending half: whoever compiles the component reports here, once.
pub struct CompileDone(watch::Sender<Option<Compiled>>);

impl CompileDone {
    pub fn report(self, compiled: Compiled) {
        let _ = self.0.send(Some(compiled));
    }
}

impl PendingComponent {
    /// A component still to compile, and where its compile reports.
    pub fn new(digest: String, exports: ComponentExports) -> (Self, CompileDone) {
        let (tx, rx) = watch::channel(None);
        (
            PendingComponent {
                digest,
                exports,
                compiled: rx,
            },
            CompileDone(tx),
        )
    }

    /// A component that is compiled already.
    pub fn ready(loaded: Arc<LoadedComponent>) -> Self {
        let (tx, rx) = watch::channel(Some(Ok(loaded.clone())));
        drop(tx);
        PendingComponent {
            digest: loaded.digest.clone(),
            exports: loaded.exports.clone(),
            compiled: rx,
        }
    }

    /// The compiled component, once its compile finishes.
    pub async fn compiled(&self) -> Compiled {
        let mut rx = self.compiled.clone();
        // An error means the sender is gone; what it last sent still counts.
        let _ = rx.wait_for(Option::is_some).await;
        let done = rx.borrow().clone();
        done.unwrap_or_else(|| Err("the compile stopped before it finished".into()))
    }

    /// [`PendingComponent::compiled`], blocking the thread: for command
    /// lines and blocking threads, never an async worker.
    pub fn compiled_blocking(&self) -> Compiled {
        futures::executor::block_on(self.compiled())
    }

    /// The compiled component if its compile has finished.
    pub fn compiled_now(&self) -> Option<Compiled> {
        self.compiled.borrow().clone()
    }
}
