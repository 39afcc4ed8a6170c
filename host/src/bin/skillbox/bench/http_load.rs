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

/// Calls per second that `clients` connections achieve calling `tool`.
pub(super) async fn throughput(
    addr: SocketAddr,
    tool: &str,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<f64> {
    let request = request(addr, tool);
    let mut connections = Vec::new();
    for _ in 0..clients {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        connections.push(stream);
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for stream in connections {
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut body = Vec::new();
            let mut calls = 0u64;
            while Instant::now() < deadline {
                write.write_all(&request).await?;
                read_reply(&mut read, &mut body).await?;
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

/// Reads one response into `body`: by its content length, or chunk by
/// chunk (an event stream).
async fn read_reply(
    read: &mut (impl AsyncBufRead + Unpin),
    body: &mut Vec<u8>,
) -> anyhow::Result<()> {
    body.clear();
    let mut line = String::new();
    let mut length = None;
    let mut chunked = false;
    let mut status = None;
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
        }
    }
    if status.as_deref() != Some("200") {
        bail!("HTTP status {}", status.unwrap_or_default());
    }
    if let Some(n) = length {
        body.resize(n, 0);
        read.read_exact(body).await?;
        return Ok(());
    }
    if !chunked {
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
            return Ok(());
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
