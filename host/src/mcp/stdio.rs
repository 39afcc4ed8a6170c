//! MCP over stdio, behind a line gate.
//!
//! rmcp silently ignores input that is not JSON (as other SDKs do). A
//! client's author debugging a broken client needs an answer, so every line
//! passes this gate first: a line that is not JSON gets a JSON-RPC parse
//! error (-32700), a line over the size limit gets an invalid-request error
//! (-32600) without being buffered whole, and everything else goes on to
//! rmcp, which answers wrong shapes and unknown methods itself. Either way
//! the next line is served. stdout carries only protocol messages.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc};

use super::handler::Session;
use super::server::Server;

/// Longest request line accepted.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Requests forwarded to rmcp and not yet answered. When stdin closes, the
/// server answers these before it stops, so `printf … | skillbox serve`
/// gets every reply.
#[derive(Default)]
struct Pending {
    ids: Mutex<HashSet<String>>,
    answered: Notify,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id of a JSON-RPC request (a message with both `id` and `method`).
    fn request_id(message: &Value) -> Option<String> {
        (message.get("method").is_some()).then(|| message.get("id").map(Value::to_string))?
    }

    /// The request a `notifications/cancelled` gives up on: the server
    /// sends no reply for it, so it is no longer waited for.
    fn cancelled_id(message: &Value) -> Option<String> {
        (message.get("method")?.as_str()? == "notifications/cancelled").then(|| {
            message
                .get("params")?
                .get("requestId")
                .map(Value::to_string)
        })?
    }

    /// The id of a JSON-RPC response (`id` with `result` or `error`).
    fn response_id(message: &Value) -> Option<String> {
        (message.get("result").is_some() || message.get("error").is_some())
            .then(|| message.get("id").map(Value::to_string))?
    }

    async fn drained(&self) {
        loop {
            let notified = self.answered.notified();
            if self.lock().is_empty() {
                return;
            }
            notified.await;
        }
    }
}

/// Serves one client on this process's stdin and stdout until stdin closes.
pub async fn serve(server: Arc<Server>) -> anyhow::Result<()> {
    serve_on(server, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves one client on any byte streams (tests use in-memory pipes).
pub async fn serve_on(
    server: Arc<Server>,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (lines_tx, lines_rx) = mpsc::channel::<Vec<u8>>(64);

    let pending = Arc::new(Pending::default());

    let writer = tokio::spawn(write_lines(lines_rx, output));
    let forward = tokio::spawn(forward_lines(
        BufReader::new(from_rmcp),
        lines_tx.clone(),
        pending.clone(),
    ));
    let gate = tokio::spawn(gate(BufReader::new(input), to_rmcp, lines_tx, pending));

    match Session::new(server).serve((rmcp_in, rmcp_out)).await {
        Ok(service) => {
            let _ = service.waiting().await;
        }
        // A client that leaves before initializing is not a server failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("the client closed stdin before initializing");
        }
        Err(e) => return Err(anyhow::anyhow!("the MCP handshake failed: {e}")),
    }
    gate.abort();
    let _ = forward.await;
    let _ = writer.await;
    Ok(())
}

/// Owns the output: whole lines only, so replies never interleave.
async fn write_lines(mut lines: mpsc::Receiver<Vec<u8>>, mut output: impl AsyncWrite + Unpin) {
    while let Some(line) = lines.recv().await {
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

async fn forward_lines(
    mut from_rmcp: impl AsyncBufRead + Unpin,
    lines: mpsc::Sender<Vec<u8>>,
    pending: Arc<Pending>,
) {
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let answered = serde_json::from_slice::<Value>(&line)
                    .ok()
                    .as_ref()
                    .and_then(Pending::response_id);
                if lines.send(line).await.is_err() {
                    return;
                }
                if let Some(id) = answered {
                    pending.lock().remove(&id);
                    pending.answered.notify_waiters();
                }
            }
        }
    }
}

enum Line {
    Complete(Vec<u8>),
    TooLong(usize),
    Eof,
}

/// Reads one line, keeping at most `MAX_LINE_BYTES` of it in memory.
async fn read_line(input: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut seen = 0usize;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (seen, line.is_empty()) {
                (0, _) => Line::Eof,
                (n, _) if n > MAX_LINE_BYTES => Line::TooLong(n),
                _ => Line::Complete(line),
            });
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let len = chunk.len();
        seen += len;
        if seen <= MAX_LINE_BYTES {
            line.extend_from_slice(chunk);
        } else {
            line = Vec::new();
        }
        input.consume(len);
        if done {
            return Ok(if seen > MAX_LINE_BYTES {
                Line::TooLong(seen)
            } else {
                Line::Complete(line)
            });
        }
    }
}

async fn gate(
    mut input: impl AsyncBufRead + Unpin,
    mut to_rmcp: impl AsyncWrite + Unpin,
    replies: mpsc::Sender<Vec<u8>>,
    pending: Arc<Pending>,
) {
    loop {
        let line = match read_line(&mut input).await {
            Ok(Line::Eof) | Err(_) => break,
            Ok(line) => line,
        };
        let error = match line {
            Line::TooLong(n) => Some((
                -32600,
                format!(
                    "Invalid Request: the line is {n} bytes, over the {MAX_LINE_BYTES}-byte limit; it was discarded"
                ),
            )),
            Line::Complete(bytes) => {
                let text = trim_line(&bytes);
                if text.is_empty() {
                    continue;
                }
                match serde_json::from_slice::<Value>(text) {
                    Ok(message) => {
                        if let Some(id) = Pending::request_id(&message) {
                            pending.lock().insert(id);
                        }
                        if let Some(id) = Pending::cancelled_id(&message) {
                            pending.lock().remove(&id);
                            pending.answered.notify_waiters();
                        }
                        if to_rmcp.write_all(text).await.is_err()
                            || to_rmcp.write_all(b"\n").await.is_err()
                        {
                            break;
                        }
                        None
                    }
                    Err(e) => Some((
                        -32700,
                        format!(
                            "Parse error: the line is not JSON ({e}); send one JSON-RPC message per line"
                        ),
                    )),
                }
            }
            Line::Eof => unreachable!("handled above"),
        };
        if let Some((code, message)) = error {
            let reply =
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
            let mut bytes = serde_json::to_vec(&reply).unwrap_or_default();
            bytes.push(b'\n');
            if replies.send(bytes).await.is_err() {
                break;
            }
        }
    }
    pending.drained().await;
    let _ = to_rmcp.shutdown().await;
}

fn trim_line(bytes: &[u8]) -> &[u8] {
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    &bytes[..end]
}
