//! Serves skillbox's MCP server from inside an existing tokio application:
//! over an in-memory byte stream to a client of the application's own, and
//! mounted into the application's axum router beside its other routes.
//!
//! It serves the bundled skills, whose components `scripts/build-guests`
//! builds into them:
//!
//! ```sh
//! scripts/build-guests
//! cargo run -p skillbox --example embed_mcp
//! ```

use std::path::Path;

use skillbox::Skillbox;
use skillbox::mcp::{HttpOptions, Server};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let skills = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills");
    let skillbox = Skillbox::builder().skills_dir(skills).no_cache().build()?;
    let server = Server::builder(&skillbox).build()?;

    // 1. One MCP session over any AsyncRead + AsyncWrite pair.
    let (client, server_side) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_side);
    let session = tokio::spawn({
        let server = server.clone();
        async move { server.serve(server_read, server_write).await }
    });
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut replies = BufReader::new(client_read).lines();
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"embed-example","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ] {
        client_write
            .write_all(format!("{line}\n").as_bytes())
            .await?;
    }
    let mut answered = 0;
    while answered < 2 {
        let Some(reply) = replies.next_line().await? else {
            break;
        };
        let reply: serde_json::Value = serde_json::from_str(&reply)?;
        if reply["id"] == 2 {
            let names: Vec<&str> = reply["result"]["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|tool| tool["name"].as_str())
                .collect();
            println!("tools over the stream: {}", names.join(", "));
        }
        answered += reply.get("id").is_some() as usize;
    }
    client_write.shutdown().await?;
    session.await??;

    // 2. Streamable HTTP mounted into the application's own router.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = skillbox::CancellationToken::new();
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(|| async { "the application's own page" }),
        )
        .merge(server.http_router(&HttpOptions::new(addr), shutdown.clone())?);
    println!("MCP mounted at http://{addr}/mcp beside the application's routes");
    let serving = tokio::spawn(axum::serve(listener, app).into_future());
    let page = reqwest::get(format!("http://{addr}/"))
        .await?
        .text()
        .await?;
    println!("GET / -> {page}");
    // The MCP endpoint answers in the same application.
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "embed-example", "version": "1"},
        },
    });
    let body = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    // A session's first reply comes as a server-sent event.
    let data = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .find(|data| !data.trim().is_empty())
        .unwrap_or(&body);
    let reply: serde_json::Value = serde_json::from_str(data.trim())?;
    let name = reply["result"]["serverInfo"]["name"]
        .as_str()
        .ok_or("the mounted /mcp did not answer initialize")?;
    println!("POST /mcp initialize -> server {name}");
    shutdown.cancel();
    serving.abort();
    Ok(())
}
