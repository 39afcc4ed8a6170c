//! A lean load generator for the HTTP throughput figure.
//!
//! The clients share the machine's cores with the server they measure, so
//! they must cost as little as possible: each one is a keep-alive HTTP/1.1
//! connection sending the same stateless 2026-07-28 `tools/call` (no
//! session, no initialization) and reading the reply by its framing. A full
//! MCP client would spend more CPU than the server's own call.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How the load generator's clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Revision {
    /// 2026-07-28: every call stands alone.
    Stateless,
    /// 2025-11-25: each connection opens a session first, and every call
    /// carries its id, as a client of that revision does.
    Sessions,
}

/// Calls per second that `clients` connections achieve calling `tool`.
pub(super) async fn throughput(
    addr: SocketAddr,
    tool: &str,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<f64> {
    throughput_as(Revision::Stateless, addr, tool, clients, seconds).await
}

/// [`throughput`] with clients of `revision`.
pub(super) async fn throughput_as(
    revision: Revision,
    addr: SocketAddr,
    tool: &str,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<f64> {
    let mut connections = Vec::new();
    for _ in 0..clients {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let request = match revision {
            Revision::Stateless => request(addr, tool),
            Revision::Sessions => {
                let session = open_session(addr, &mut read, &mut write).await?;
                session_call(addr, tool, &session)
            }
        };
        connections.push((read, write, request));
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for (mut read, mut write, request) in connections {
        tasks.push(tokio::spawn(async move {
            let mut body = Vec::new();
            let mut calls = 0u64;
            while Instant::now() < deadline {
                write.write_all(&request).await?;
                read_reply(&mut read, &mut body).await?.ok()?;
                if !contains(&body, br#""isError":false"#) {
                    bail!(
                        "the benchmark call failed: {}",
                        String::from_utf8_lossy(&body)
                    );
                }
                calls += 1;
            }
            anyhow::Ok(calls)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64().max(seconds))
}

/// Opens a 2025-11-25 session on the connection: `initialize`, then
/// `notifications/initialized`. Returns its id.
async fn open_session(
    addr: SocketAddr,
    read: &mut (impl AsyncBufRead + Unpin),
    write: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> anyhow::Result<String> {
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "skillbox-bench", "version": "0"},
        },
    });
    write.write_all(&post(addr, &initialize, &[])).await?;
    let mut body = Vec::new();
    let reply = read_reply(read, &mut body).await?.ok()?;
    let session = reply
        .session
        .context("the server opened no session (no Mcp-Session-Id)")?;
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers = [("mcp-session-id", session.as_str())];
    write.write_all(&post(addr, &initialized, &headers)).await?;
    read_reply(read, &mut body).await?;
    Ok(session)
}

/// A `tools/call` of `tool` in 2025-11-25 session `session`.
fn session_call(addr: SocketAddr, tool: &str, session: &str) -> Vec<u8> {
    let call = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": {}},
    });
    post(addr, &call, &[("mcp-session-id", session)])
}

/// A 2025-11-25 POST of `message` with `headers`.
fn post(addr: SocketAddr, message: &serde_json::Value, headers: &[(&str, &str)]) -> Vec<u8> {
    let body = message.to_string();
    let mut extra = String::new();
    for (name, value) in headers {
        extra.push_str(&format!("{name}: {value}\r\n"));
    }
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n\
         {extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn request(addr: SocketAddr, tool: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "skillbox-bench", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    })
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: {tool}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the head of a response said.
struct Reply {
    status: String,
    /// Its `Mcp-Session-Id`, if any.
    session: Option<String>,
}

impl Reply {
    /// The reply, if it is a success.
    fn ok(self) -> anyhow::Result<Reply> {
        match self.status.as_str() {
            "200" | "202" => Ok(self),
            other => bail!("HTTP status {other}"),
        }
    }
}

/// Reads one response into `body`: by its content length, or chunk by
/// chunk (an event stream).
async fn read_reply(
    read: &mut (impl AsyncBufRead + Unpin),
    body: &mut Vec<u8>,
) -> anyhow::Result<Reply> {
    body.clear();
    let mut line = String::new();
    let mut length = None;
    let mut chunked = false;
    let mut status = None;
    let mut session = None;
    loop {
        line.clear();
        if read.read_line(&mut line).await? == 0 {
            bail!("the server closed the connection");
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if status.is_none() {
            status = header.split(' ').nth(1).map(str::to_string);
            continue;
        }
        let (name, value) = header.split_once(':').unwrap_or((header, ""));
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.trim().parse::<usize>()?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.trim().eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("mcp-session-id") {
            session = Some(value.trim().to_string());
        }
    }
    let reply = Reply {
        status: status.unwrap_or_default(),
        session,
    };
    if let Some(n) = length {
        body.resize(n, 0);
        read.read_exact(body).await?;
        return Ok(reply);
    }
    if !chunked {
        if reply.status == "202" {
            return Ok(reply);
        }
        bail!("a reply with neither a length nor chunks");
    }
    loop {
        line.clear();
        read.read_line(&mut line).await?;
        let size = usize::from_str_radix(line.trim_end(), 16).context("a chunk size")?;
        let start = body.len();
        body.resize(start + size + 2, 0);
        read.read_exact(&mut body[start..]).await?;
        body.truncate(start + size);
        if size == 0 {
            return Ok(reply);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
