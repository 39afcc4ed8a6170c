//! Capped in-memory pipes for a guest's stdout and stderr.
//!
//! The host's own stdout is the MCP channel, so a guest never inherits it.
//! Output goes into a buffer with a hard cap; the first write that would pass
//! the cap stops the guest with [`OutputOverflow`], which the sandbox turns
//! into an `OutputLimit` error. Stopping (rather than silently dropping bytes)
//! keeps a flooding guest from burning its whole time budget on output nobody
//! will read.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// Raised inside the guest's write when a stream passes its cap.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the guest wrote more than {limit} bytes to {stream}")]
pub(crate) struct OutputOverflow {
    pub stream: &'static str,
    pub limit: usize,
}

#[derive(Debug)]
struct State {
    buf: Vec<u8>,
    overflowed: bool,
}

/// One capped stream. Clones share the same buffer, as WASI expects of
/// the several handles a guest may open to its stdout.
#[derive(Debug, Clone)]
pub(crate) struct CappedPipe {
    stream: &'static str,
    limit: usize,
    state: Arc<Mutex<State>>,
}

impl CappedPipe {
    pub(crate) fn new(stream: &'static str, limit: usize) -> Self {
        CappedPipe {
            stream,
            limit,
            state: Arc::new(Mutex::new(State {
                buf: Vec::new(),
                overflowed: false,
            })),
        }
    }

    /// The captured bytes as text, replacing invalid UTF-8.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock().buf).into_owned()
    }

    pub(crate) fn overflowed(&self) -> bool {
        self.lock().overflowed
    }

    /// The error this pipe's cap stands for.
    pub(crate) fn overflow_error(&self) -> OutputOverflow {
        OutputOverflow {
            stream: self.stream,
            limit: self.limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another writer panicked mid-append; the
        // bytes are still a valid prefix, so keep using them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `bytes`, keeping as much as fits. Returns the overflow error
    /// if the cap was passed.
    fn append(&self, bytes: &[u8]) -> Result<(), OutputOverflow> {
        let mut state = self.lock();
        let room = self.limit.saturating_sub(state.buf.len());
        if bytes.len() > room {
            state.buf.extend_from_slice(&bytes[..room]);
            state.overflowed = true;
            drop(state);
            return Err(self.overflow_error());
        }
        state.buf.extend_from_slice(bytes);
        Ok(())
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes)
            .map_err(|overflow| StreamError::Trap(wasmtime::Error::new(overflow)))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always offer room: the cap is enforced in `write`, so that the
        // overflow surfaces as a clear error instead of a closed stream the
        // guest might misread as a broken pipe.
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.append(buf)
                .map(|()| buf.len())
                .map_err(std::io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_prefix_that_fits_and_reports_overflow() {
        let pipe = CappedPipe::new("stdout", 5);
        assert!(pipe.append(b"abc").is_ok());
        let err = pipe.append(b"defg").unwrap_err();
        assert_eq!(err.limit, 5);
        assert_eq!(pipe.text(), "abcde");
        assert!(pipe.overflowed());
    }

    #[test]
    fn clones_share_one_buffer() {
        let pipe = CappedPipe::new("stderr", 100);
        let other = pipe.clone();
        other.append(b"hi").unwrap();
        assert_eq!(pipe.text(), "hi");
        assert!(!pipe.overflowed());
    }
}
