//! The wire: bad input lines over stdio, and Streamable HTTP with its
//! Host/Origin checks and body limit.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use skillbox_e2e::mcp::{Recorder, call, serve_http};
use skillbox_e2e::{repo, skillbox_bin};

/// `skillbox serve ARGS…` from the repository, with the test cache.
fn serve(args: &[&str]) -> Command {
    let mut cmd = Command::new(skillbox_bin());
    cmd.arg("serve")
        .args(args)
        .current_dir(repo())
        .envs(skillbox_e2e::hermetic_env());
    cmd
}

struct Raw {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    fn start() -> Raw {
        Raw::start_with(&[])
    }

    fn start_with(args: &[&str]) -> Raw {
        let mut child = serve(&["--no-audit"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Raw { child, lines }
    }

    fn send(&mut self, line: &[u8]) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn reply(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a reply line");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_duplicate_in_flight_request_id_is_an_invalid_request() {
    let kit = skillbox_e2e::testkit_skills();
    let mut raw = Raw::start_with(&["--skills", kit.path().to_str().unwrap(), "--tools", "all"]);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}
    }}).to_string().as_bytes());
    assert_eq!(raw.reply()["id"], 1);
    raw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let slow = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "testkit__sleep-ms", "arguments": {"ms": 3000}}});
    raw.send(slow.to_string().as_bytes());
    let again = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "testkit__noop", "arguments": {}}});
    raw.send(again.to_string().as_bytes());
    // The reused id is refused at once; the first request is answered.
    let refused = raw.reply();
    assert_eq!(refused["id"], 5, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("still being answered")
    );
    let first = (0..3)
        .map(|_| raw.reply())
        .find(|r| r["id"] == 5)
        .expect("the first request's reply");
    assert!(first.get("result").is_some(), "{first}");
    // Once answered, the id may be used again.
    raw.send(again.to_string().as_bytes());
    let reused = raw.reply();
    assert_eq!(reused["id"], 5, "{reused}");
    assert!(reused.get("result").is_some(), "{reused}");
}

/// A server process, killed and reaped when dropped.
#[test]
fn each_bad_line_gets_its_error_and_the_next_is_served() {
    let mut raw = Raw::start();
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}
    }}).to_string().as_bytes());
    let init = raw.reply();
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["serverInfo"]["name"], "skillbox");
    raw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    raw.send(b"this is not json");
    let parse = raw.reply();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null);

    let huge = vec![b'x'; 10 * 1024 * 1024];
    raw.send(&huge);
    let too_long = raw.reply();
    assert_eq!(too_long["error"]["code"], -32600, "{too_long}");
    assert!(
        too_long["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over the")
    );

    raw.send(br#"{"jsonrpc":"2.0","id":7,"method":"no/such/method"}"#);
    let unknown = raw.reply();
    assert_eq!(unknown["id"], 7);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");

    raw.send(br#"{"jsonrpc":"2.0","id":8,"method":42}"#);
    let shape = raw.reply();
    assert_eq!(shape["error"]["code"], -32600, "{shape}");

    raw.send(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"load_skill","arguments":{"name":"nope"}}}"#);
    let tool_error = raw.reply();
    assert_eq!(tool_error["id"], 9);
    assert_eq!(tool_error["result"]["isError"], true);

    raw.send(br#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#);
    let pong = raw.reply();
    assert_eq!(pong["id"], 10);
    assert!(pong.get("result").is_some(), "{pong}");
}

/// A whole session written up front, then the input closed: every request
/// read before the end is answered before the server exits.
fn scripted_session() -> Vec<u8> {
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "script", "version": "0"}
        }}).to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
        "not json".to_string(),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "data-peek__query", "arguments": {"filter": ".a", "input": "{\"a\": 5}"}
        }})
        .to_string(),
    ];
    (lines.join("\n") + "\n").into_bytes()
}

fn assert_whole_session(stdout: &[u8]) {
    let replies: Vec<Value> = String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let ids: Vec<&Value> = replies.iter().map(|r| &r["id"]).collect();
    for id in [1, 2, 3] {
        assert!(
            ids.contains(&&json!(id)),
            "no reply to request {id}: {replies:?}"
        );
    }
    assert!(
        replies.iter().any(|r| r["error"]["code"] == -32700),
        "{replies:?}"
    );
    let call = replies.iter().find(|r| r["id"] == 3).unwrap();
    assert_eq!(
        call["result"]["structuredContent"]["results"],
        json!(["5"]),
        "{call}"
    );
}

/// stdin and stdout as files: the server reads and writes on threads.
/// (Pipes, which the runtime polls, are `piped_requests_are_all_answered_before_exit`.)
#[test]
fn a_session_from_a_file_is_answered_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    std::fs::write(&input, scripted_session()).unwrap();
    let status = serve(&["--no-audit", "--tools", "all"])
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_whole_session(&std::fs::read(&output).unwrap());
}

#[tokio::test]
async fn http_serves_a_real_client() {
    let (_server, url) = serve_http(&[]);
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let client = Recorder::default()
        .serve(transport)
        .await
        .expect("handshake over HTTP");
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "load_skill"));
    let loaded = call(&client, "load_skill", json!({"name": "data-peek"})).await;
    assert_ne!(loaded.is_error, Some(true));
    let query = call(
        &client,
        "data-peek__query",
        json!({"filter": "[.[] | . * 2]", "input": "[1,2,3]"}),
    )
    .await;
    assert_eq!(
        query.structured_content.unwrap()["results"],
        json!(["[2,4,6]"])
    );
    client.cancel().await.unwrap();
}

async fn post(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.body(body).send().await.unwrap()
}

fn initialize_body() -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}
    }})
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn http_checks_host_origin_and_body_size() {
    let (_server, url) = serve_http(&[]);
    let ok = post(&url, &[], initialize_body()).await;
    assert_eq!(ok.status(), 200);
    assert!(
        ok.headers().contains_key("mcp-session-id"),
        "2025-11-25 clients get a session"
    );

    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    let evil_host = post(
        &url,
        &[("host", &format!("evil.example:{port}"))],
        initialize_body(),
    )
    .await;
    assert_eq!(evil_host.status(), 403, "a rebinding Host is refused");

    let evil_origin = post(
        &url,
        &[("origin", "http://evil.example")],
        initialize_body(),
    )
    .await;
    assert_eq!(evil_origin.status(), 403, "a foreign Origin is refused");

    let local_origin = post(
        &url,
        &[("origin", "http://localhost:6274")],
        initialize_body(),
    )
    .await;
    assert_eq!(
        local_origin.status(),
        200,
        "the MCP Inspector's local origin is allowed"
    );

    let huge = post(&url, &[], vec![b' '; 5 * 1024 * 1024]).await;
    assert_eq!(huge.status(), 413);
}

#[test]
fn piped_requests_are_all_answered_before_exit() {
    let input = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "data-peek__query", "arguments": {"filter": "[range(3)]", "input": "null"}}}),
    ]
    .iter()
    .map(|m| m.to_string() + "\n")
    .collect::<String>();
    let mut child = serve(&["--no-audit", "--tools", "all"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let replies: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[1]["id"], 2);
    assert_eq!(
        replies[1]["result"]["structuredContent"]["results"],
        json!(["[0,1,2]"])
    );
}

#[test]
fn a_client_that_leaves_before_initializing_is_not_an_error() {
    let out = serve(&["--no-audit"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}
