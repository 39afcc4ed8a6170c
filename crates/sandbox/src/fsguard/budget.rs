//! One mount's byte and entry budget, and the write stream that spends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use wasmtime_wasi::p2::{DynOutputStream, OutputStream, Pollable, StreamError};

use crate::mount::{Mount, QuotaExceeded, QuotaKind};

/// Per-mount limits, from [`crate::Limits`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuotaLimits {
    pub bytes: u64,
    pub entries: u64,
}

/// One mount's budget and what has been spent of it.
#[derive(Debug)]
pub(super) struct Budget {
    mount: Mount,
    max_bytes: u64,
    max_entries: u64,
    bytes: AtomicU64,
    entries: AtomicU64,
}

impl Budget {
    pub(super) fn new(mount: Mount, limits: QuotaLimits) -> Arc<Self> {
        Arc::new(Budget {
            mount,
            max_bytes: limits.bytes,
            max_entries: limits.entries,
            bytes: AtomicU64::new(0),
            entries: AtomicU64::new(0),
        })
    }

    pub(super) fn spend(&self, kind: QuotaKind, amount: u64) -> Result<(), QuotaExceeded> {
        let (counter, limit) = match kind {
            QuotaKind::Bytes => (&self.bytes, self.max_bytes),
            QuotaKind::Entries => (&self.entries, self.max_entries),
        };
        let before = counter.fetch_add(amount, Ordering::Relaxed);
        if before.saturating_add(amount) > limit {
            return Err(QuotaExceeded {
                mount: self.mount,
                what: kind,
                limit,
            });
        }
        Ok(())
    }
}

/// A file's output stream whose bytes are spent from a budget as they go.
pub(super) struct CountedStream {
    pub(super) inner: DynOutputStream,
    pub(super) budget: Arc<Budget>,
}

impl CountedStream {
    fn spend(&self, amount: usize) -> Result<(), StreamError> {
        self.budget
            .spend(QuotaKind::Bytes, amount as u64)
            .map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CountedStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CountedStream {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.spend(bytes.len())?;
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        self.inner.check_write()
    }

    fn write_zeroes(&mut self, nelem: usize) -> Result<(), StreamError> {
        self.spend(nelem)?;
        self.inner.write_zeroes(nelem)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}
