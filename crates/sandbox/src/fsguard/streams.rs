//! A file's input and output streams that read and write on the call's
//! thread.
//!
//! wasmtime-wasi's own start each non-blocking `read` and `write` on the
//! blocking pool and answer the guest's poll when it is done, whatever the
//! file's blocking setting: a trip to another thread and back per read or
//! write, which cost 40 to 70 µs here against 3 µs for the operation
//! itself. A guest only ever holds regular files ([`super::open_on_pool`]
//! refuses the rest), so a read or a write is ready at once and is done
//! where it is asked for. Appending (`append-via-stream`) stays
//! wasmtime-wasi's: its atomic append has no portable equivalent here.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError};

/// The most one read returns, and the most a writer takes at once, as
/// wasmtime-wasi's own streams do: a guest asking for 4 GiB gets this
/// much, not an allocation that large.
const MAX_CHUNK: usize = 64 * 1024;

pub(super) struct FileReader {
    file: Arc<std::fs::File>,
    position: u64,
    closed: bool,
}

impl FileReader {
    pub(super) fn new(file: Arc<std::fs::File>, position: u64) -> Self {
        FileReader {
            file,
            position,
            closed: false,
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {}
}

impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        if self.closed {
            return Err(StreamError::Closed);
        }
        if size == 0 {
            return Ok(Bytes::new());
        }
        let mut buf = BytesMut::zeroed(size.min(MAX_CHUNK));
        loop {
            match self.file.read_at(&mut buf, self.position) {
                Ok(0) => {
                    self.closed = true;
                    return Err(StreamError::Closed);
                }
                Ok(n) => {
                    buf.truncate(n);
                    self.position += n as u64;
                    return Ok(buf.freeze());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.closed = true;
                    return Err(StreamError::LastOperationFailed(e.into()));
                }
            }
        }
    }
}

pub(super) struct FileWriter {
    file: Arc<std::fs::File>,
    position: u64,
    closed: bool,
}

impl FileWriter {
    pub(super) fn new(file: Arc<std::fs::File>, position: u64) -> Self {
        FileWriter {
            file,
            position,
            closed: false,
        }
    }

    fn open(&self) -> Result<(), StreamError> {
        match self.closed {
            true => Err(StreamError::Closed),
            false => Ok(()),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.open()?;
        // More than `check-write` allowed would be one long write on the
        // call's thread.
        if bytes.len() > MAX_CHUNK {
            return Err(StreamError::Trap(wasmtime::Error::msg(
                "a file write larger than check-write allowed",
            )));
        }
        match self.file.write_all_at(&bytes, self.position) {
            Ok(()) => {
                self.position += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.closed = true;
                Err(StreamError::LastOperationFailed(e.into()))
            }
        }
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        self.open()
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        self.open().map(|()| MAX_CHUNK)
    }
}
