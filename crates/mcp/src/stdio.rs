//! MCP over stdio: one JSON-RPC message per line, parsed once.
//!
//! rmcp silently ignores input that is not JSON (as other SDKs do). A
//! client's author debugging a broken client needs an answer, so a line
//! that is not JSON gets a JSON-RPC parse error (-32700), a line over the
//! size limit gets an invalid-request error (-32600) without being buffered
//! whole, and JSON that is not a JSON-RPC message gets -32600 too. Either
//! way the next line is served. stdout carries only protocol messages.
//!
//! Latency is mostly hand-offs between threads (a call's own work is tens
//! of microseconds), so there are as few as the input allows. When stdin
//! and stdout are pipes (the usual case: a client spawned us), they are
//! reopened as non-blocking descriptions of their own and driven by the
//! runtime's poller, so the thread that parses a request also writes its
//! reply. Otherwise (a file, a terminal) a thread blocked in `read` parses
//! each line and hands the message on, and a thread blocked on a queue
//! writes the replies. tokio's own stdin and stdout would send every read
//! and write through the blocking pool and back.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RoleServer, TxJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc, oneshot};

use super::server::Shared;
use super::session::Session;

/// Longest request line accepted.
pub(crate) const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Lines waiting in either direction before the other side waits.
const QUEUE: usize = 64;

/// Serves one client on this process's stdin and stdout until stdin closes.
pub(crate) async fn serve(server: Arc<Shared>) -> anyhow::Result<()> {
    if let Some((input, output)) = stdio_pipes() {
        return serve_on(server, input, output).await;
    }
    let (transport, inbound, outbound) = LineTransport::new();
    std::thread::Builder::new()
        .name("skillbox-stdin".into())
        .spawn(move || read_blocking(std::io::stdin().lock(), inbound))?;
    let (written, all_written) = oneshot::channel();
    std::thread::Builder::new()
        .name("skillbox-stdout".into())
        .spawn(move || {
            write_blocking(outbound, std::io::stdout().lock());
            let _ = written.send(());
        })?;
    run(server, transport).await?;
    let _ = all_written.await;
    Ok(())
}

/// Serves one client on any async byte streams (tests and embedders).
pub(crate) async fn serve_on(
    server: Arc<Shared>,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    let (transport, inbound, outbound) = LineTransport::new();
    let reader = tokio::spawn(read_async(BufReader::new(input), inbound));
    let writer = tokio::spawn(write_async(outbound, output));
    let served = run(server, transport).await;
    reader.abort();
    let _ = writer.await;
    served
}

/// stdin and stdout as non-blocking pipes the runtime polls, if they are
/// pipes. Each is opened anew through `/proc/self/fd`, which gives this
/// process a description of its own: making it non-blocking does not change
/// the descriptions the client or other processes share.
fn stdio_pipes() -> Option<(pipe::Receiver, pipe::Sender)> {
    let input = std::fs::File::open("/proc/self/fd/0").ok()?;
    let output = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/fd/1")
        .ok()?;
    Some((
        pipe::Receiver::from_file(input).ok()?,
        pipe::Sender::from_file(output).ok()?,
    ))
}

async fn run(server: Arc<Shared>, transport: LineTransport) -> anyhow::Result<()> {
    match Session::new(server).serve(transport).await {
        Ok(service) => {
            let _ = service.waiting().await;
            Ok(())
        }
        // A client that leaves before initializing is not a server failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("the client closed stdin before initializing");
            Ok(())
        }
        Err(e) => Err(anyhow::anyhow!("the MCP handshake failed: {e}")),
    }
}

/// What the reader hands on for one line.
enum Inbound {
    Message(Box<ClientJsonRpcMessage>),
    /// An error reply for a line that was not a message.
    Reply(Vec<u8>),
}

/// rmcp's side of the line streams. Only this transport (and the send
/// futures it returns) holds the outbound queue, so when rmcp drops it the
/// writer finishes the queued replies and stops.
struct LineTransport {
    inbound: mpsc::Receiver<Inbound>,
    outbound: mpsc::Sender<Vec<u8>>,
    pending: Arc<Pending>,
}

impl LineTransport {
    fn new() -> (Self, Reader, mpsc::Receiver<Vec<u8>>) {
        let (inbound_tx, inbound) = mpsc::channel(QUEUE);
        let (outbound, outbound_rx) = mpsc::channel(QUEUE);
        let pending = Arc::new(Pending::default());
        let transport = LineTransport {
            inbound,
            outbound,
            pending: pending.clone(),
        };
        let reader = Reader {
            inbound: inbound_tx,
            pending,
        };
        (transport, reader, outbound_rx)
    }
}

impl rmcp::transport::Transport<RoleServer> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let outbound = self.outbound.clone();
        let pending = self.pending.clone();
        async move {
            let sent = match line {
                Ok(line) => outbound
                    .send(line)
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
                Err(e) => Err(std::io::Error::other(e)),
            };
            // A reply that cannot go out (the client closed stdout) is done
            // with all the same: waiting for it would keep a server whose
            // client has gone alive for ever.
            if let Some(id) = answered {
                pending.answer(&id);
            }
            sent
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            match self.inbound.recv().await {
                Some(Inbound::Message(message)) => return Some(*message),
                Some(Inbound::Reply(line)) => {
                    if self.outbound.send(line).await.is_err() {
                        return None;
                    }
                }
                // Input ended: answer every request already read before
                // telling rmcp, so `printf … | skillbox serve` gets them all.
                None => {
                    self.pending.drained().await;
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inbound.close();
        Ok(())
    }
}

/// Requests read and not yet answered.
#[derive(Default)]
struct Pending {
    ids: Mutex<HashSet<RequestId>>,
    answered: Notify,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes what an incoming message asks for or gives up on; a request
    /// whose id is still in flight is refused with the id it reused.
    fn note(&self, message: &ClientJsonRpcMessage) -> Result<(), RequestId> {
        match message {
            JsonRpcMessage::Request(request) if !self.lock().insert(request.id.clone()) => {
                return Err(request.id.clone());
            }
            // The server sends no reply to a cancelled request, so it is no
            // longer waited for.
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.answer(id);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn answer(&self, id: &RequestId) {
        if self.lock().remove(id) {
            self.answered.notify_waiters();
        }
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

/// The reading end: turns lines into messages or error replies.
struct Reader {
    inbound: mpsc::Sender<Inbound>,
    pending: Arc<Pending>,
}

impl Reader {
    /// What one finished line becomes, if anything.
    fn classify(&self, line: Line) -> Option<Inbound> {
        match line {
            Line::TooLong(n) => Some(error_reply(
                -32600,
                None,
                format!(
                    "Invalid Request: the line is {n} bytes, over the {MAX_LINE_BYTES}-byte limit; it was discarded"
                ),
            )),
            Line::Complete(bytes) => {
                let text = trim_line(&bytes);
                if text.is_empty() {
                    return None;
                }
                let message = parse(text)?;
                if let Inbound::Message(m) = &message
                    && let Err(id) = self.pending.note(m)
                {
                    return Some(error_reply(
                        -32600,
                        serde_json::to_value(&id).ok(),
                        format!(
                            "Invalid Request: id {id} belongs to a request still being answered; give each request an id of its own"
                        ),
                    ));
                }
                Some(message)
            }
        }
    }
}

/// One line as the framer saw it.
enum Line {
    Complete(Vec<u8>),
    TooLong(usize),
}

/// Parses a line into a message, or the error reply it deserves. `None`
/// for a notification that is not a message rmcp knows: notifications get
/// no reply, so it is dropped, as rmcp's own transport does.
fn parse(text: &[u8]) -> Option<Inbound> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let shape_error = match serde_json::from_slice::<ClientJsonRpcMessage>(text) {
        Ok(message) => return Some(Inbound::Message(Box::new(message))),
        Err(e) => e,
    };
    let value = match serde_json::from_slice::<Value>(text) {
        Ok(value) => value,
        Err(e) => {
            return Some(error_reply(
                -32700,
                None,
                format!(
                    "Parse error: the line is not JSON ({e}); send one JSON-RPC message per line"
                ),
            ));
        }
    };
    let id = value
        .get("id")
        .filter(|id| id.is_number() || id.is_string());
    if id.is_none() && value.get("method").is_some_and(Value::is_string) {
        tracing::debug!("ignoring a notification rmcp does not know: {shape_error}");
        return None;
    }
    Some(error_reply(
        -32600,
        id.cloned(),
        format!(
            "Invalid Request: the line is JSON but not a JSON-RPC 2.0 message this server accepts ({shape_error}); send {{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\", \"params\": {{}}}} and the like, one per line"
        ),
    ))
}

fn error_reply(code: i64, id: Option<Value>, message: String) -> Inbound {
    let reply = json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    });
    let mut bytes = serde_json::to_vec(&reply).unwrap_or_default();
    bytes.push(b'\n');
    Inbound::Reply(bytes)
}

/// What the stdio reader makes of `input` arriving in pieces of the
/// lengths `cuts` gives (cycled): one entry per reply or message, in
/// order. For the fuzz target: the framing must not depend on where the
/// pieces end, and every line over the cap becomes one error reply.
pub fn frames(input: &[u8], cuts: &[u8]) -> Vec<Result<String, Vec<u8>>> {
    let mut framer = Framer::default();
    let mut out = Vec::new();
    let mut lines = Vec::new();
    let mut rest = input;
    let mut cut = cuts.iter().cycle();
    while !rest.is_empty() {
        let piece = cut.next().map_or(rest.len(), |&n| usize::from(n).max(1));
        let mut available = &rest[..piece.min(rest.len())];
        rest = &rest[available.len()..];
        while !available.is_empty() {
            let (used, line) = framer.take(available);
            available = &available[used..];
            lines.extend(line);
        }
    }
    if framer.seen > 0 {
        lines.push(framer.finish());
    }
    for line in lines {
        let inbound = match line {
            Line::TooLong(n) => Some(error_reply(-32600, None, format!("too long: {n}"))),
            Line::Complete(bytes) => {
                let text = trim_line(&bytes);
                if text.is_empty() { None } else { parse(text) }
            }
        };
        match inbound {
            Some(Inbound::Message(m)) => {
                out.push(Ok(serde_json::to_string(&m).unwrap_or_default()))
            }
            Some(Inbound::Reply(bytes)) => out.push(Err(bytes)),
            None => {}
        }
    }
    out
}

/// Splits a byte stream into lines, keeping at most [`MAX_LINE_BYTES`] of
/// one line in memory. The same framer serves the blocking and the async
/// reader.
#[derive(Default)]
struct Framer {
    line: Vec<u8>,
    seen: usize,
}

impl Framer {
    /// Takes bytes from the front of `available`: how many it consumed,
    /// and the line they finished, if any.
    fn take(&mut self, available: &[u8]) -> (usize, Option<Line>) {
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        self.seen += chunk.len();
        if self.seen <= MAX_LINE_BYTES {
            self.line.extend_from_slice(chunk);
        } else {
            self.line = Vec::new();
        }
        (chunk.len(), done.then(|| self.finish()))
    }

    /// The line in progress, at the end of the input (if it has bytes).
    fn finish(&mut self) -> Line {
        let seen = std::mem::take(&mut self.seen);
        let line = std::mem::take(&mut self.line);
        if seen > MAX_LINE_BYTES {
            Line::TooLong(seen)
        } else {
            Line::Complete(line)
        }
    }
}

/// The stdin thread: reads until the input ends or rmcp stops listening.
fn read_blocking(mut input: impl BufRead, reader: Reader) {
    let mut framer = Framer::default();
    loop {
        let available = match input.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(available) => available,
        };
        let (used, line) = framer.take(available);
        input.consume(used);
        if let Some(message) = line.and_then(|line| reader.classify(line))
            && reader.inbound.blocking_send(message).is_err()
        {
            return;
        }
    }
    if framer.seen > 0
        && let Some(message) = reader.classify(framer.finish())
    {
        let _ = reader.inbound.blocking_send(message);
    }
}

async fn read_async(mut input: impl AsyncBufRead + Unpin, reader: Reader) {
    let mut framer = Framer::default();
    loop {
        let available = match input.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(available) => available,
        };
        let (used, line) = framer.take(available);
        input.consume(used);
        if let Some(message) = line.and_then(|line| reader.classify(line))
            && reader.inbound.send(message).await.is_err()
        {
            return;
        }
    }
    if framer.seen > 0
        && let Some(message) = reader.classify(framer.finish())
    {
        let _ = reader.inbound.send(message).await;
    }
}

/// The stdout thread: whole lines only, so replies never interleave.
fn write_blocking(mut lines: mpsc::Receiver<Vec<u8>>, mut output: impl Write) {
    while let Some(line) = lines.blocking_recv() {
        if output.write_all(&line).is_err() || output.flush().is_err() {
            return;
        }
    }
}

async fn write_async(mut lines: mpsc::Receiver<Vec<u8>>, mut output: impl AsyncWrite + Unpin) {
    while let Some(line) = lines.recv().await {
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

fn trim_line(bytes: &[u8]) -> &[u8] {
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    &bytes[..end]
}
