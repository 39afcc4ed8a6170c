//! The stable API is enough to do what an embedder needs: build a host,
//! list skills and tools, call tools and scripts with typed errors, cancel,
//! serve MCP on a byte stream, and run the agent loop with a model of its
//! own. Real components, real sandboxes; `HOME` and `XDG_*` point into a
//! temporary folder so a developer's own skills cannot leak in.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use skillbox::agent::{Agent, Model, ModelRequest, ModelResponse, ProviderError, Stop, ToolCall};
use skillbox::mcp::{HttpOptions, Server};
use skillbox::{
    BuildError, CallError, CancellationToken, Effect, LimitOverrides, PolicyError, SandboxError,
    Skillbox,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A private home for the whole test process, set once before any host is
/// built: the library reads `XDG_*` for its cache folder.
fn hermetic() -> &'static Path {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = tempfile::tempdir().unwrap();
        // SAFETY: set once, before any thread of this test binary reads them.
        #[allow(unsafe_code)]
        unsafe {
            std::env::set_var("HOME", home.path());
            for var in [
                "XDG_CACHE_HOME",
                "XDG_STATE_HOME",
                "XDG_DATA_HOME",
                "XDG_CONFIG_HOME",
            ] {
                std::env::set_var(var, home.path().join(var.to_lowercase()));
            }
            std::env::remove_var("SKILLBOX_CACHE_DIR");
            std::env::remove_var("SKILLBOX_STATE_DIR");
        }
        home
    })
    .path()
}

fn bundled() -> skillbox::Builder {
    hermetic();
    Skillbox::builder()
        .skills_dir(repo().join("skills"))
        .workspace(repo().join("examples/workspace"))
}

/// A skill whose only tool loops until it is stopped.
fn spinning_skill() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("spinner");
    std::fs::create_dir_all(skill.join("tools")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: spinner\ndescription: Loops until stopped. Use to test cancellation from an embedding application.\n---\n\n# Spinner\n\n1. Call spinner__spin.\n",
    )
    .unwrap();
    std::fs::write(
        skill.join("skillbox.yaml"),
        "tools:\n  - component: tools/testbed.wasm\n    functions:\n      spin:\n        description: Loops until stopped. Use to test cancellation. Not for real work.\nlimits:\n  timeout-ms: 60000\n  fuel: 1000000000000000\n",
    )
    .unwrap();
    let testbed = repo().join("guest-tools/target/wasm32-wasip2/release/testbed.wasm");
    std::fs::copy(&testbed, skill.join("tools/testbed.wasm"))
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-guests first", testbed.display()));
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_skills_and_tools_with_schemas() {
    let skillbox = bundled().build().unwrap();
    let skills = skillbox.skills();
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"log-inspect"), "{names:?}");
    assert!(
        skills.iter().all(|s| s.source == "explicit"),
        "only the folder given"
    );
    let tools = skillbox.tools().await;
    let grep = tools
        .iter()
        .find(|t| t.name == "log-inspect__grep")
        .expect("log-inspect__grep is listed");
    assert_eq!(grep.skill, "log-inspect");
    assert_eq!(grep.effect, Effect::Read);
    assert_eq!(grep.input_schema["type"], "object");
    assert!(grep.input_schema["properties"]["pattern"].is_object());
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_a_tool_and_gets_typed_errors() {
    let skillbox = bundled().build().unwrap();
    let output = skillbox
        .call_tool(
            "log-inspect__grep",
            json!({"path": "logs/app.log", "pattern": "ERROR", "max-matches": 2}),
        )
        .await
        .unwrap();
    assert!(
        output.value.to_string().contains("ERROR"),
        "{}",
        output.value
    );
    assert!(output.usage.fuel > 0);

    match skillbox
        .call_tool("log-inspect__grep", json!({"path": "logs/app.log"}))
        .await
    {
        Err(CallError::Sandbox {
            error: SandboxError::InvalidArguments(_),
            ..
        }) => {}
        other => panic!("expected invalid arguments, got {other:?}"),
    }
    let unknown = skillbox
        .call_tool("log-inspect__nothing", json!({}))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "unknown", "{unknown}");

    let mut tiny_fuel = LimitOverrides::default();
    tiny_fuel.fuel = Some(10_000);
    let starved = bundled().limits(tiny_fuel).build().unwrap();
    match starved
        .call_tool(
            "log-inspect__grep",
            json!({"path": "logs/app.log", "pattern": "ERROR"}),
        )
        .await
    {
        Err(CallError::Sandbox {
            error: SandboxError::OutOfFuel { fuel },
            ..
        }) => assert_eq!(fuel, 10_000),
        other => panic!("expected out of fuel, got {other:?}"),
    }

    // Each host counts its own calls, in the Prometheus text format.
    let metrics = starved.metrics();
    assert!(
        metrics.contains("skillbox_sandbox_errors_total{kind=\"out_of_fuel\"} 1"),
        "{metrics}"
    );
    assert!(
        skillbox
            .metrics()
            .contains("skillbox_calls_total{outcome=\"unknown\",tool=\"(unresolved)\"} 1"),
        "{}",
        skillbox.metrics()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_cancels_a_running_call() {
    hermetic();
    let skills = spinning_skill();
    let skillbox = Skillbox::builder()
        .skills_dir(skills.path())
        .build()
        .unwrap();
    let cancel = CancellationToken::new();
    let call = tokio::spawn({
        let (skillbox, cancel) = (skillbox.clone(), cancel.clone());
        async move {
            skillbox
                .call_tool_until("spinner__spin", json!({}), &cancel)
                .await
        }
    });
    // Once the guest is running (it holds a call slot), cancel; the
    // sandbox must stop it long before its 60-second limit.
    while !skillbox.metrics().contains("skillbox_active_calls 1") {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call ends after cancellation")
        .unwrap();
    match result {
        Err(CallError::Sandbox {
            error: SandboxError::Cancelled,
            ..
        }) => {}
        other => panic!("expected cancelled, got {other:?}"),
    }
}

#[test]
fn a_write_grant_over_the_skills_is_refused_at_build() {
    hermetic();
    let skills = spinning_skill();
    let refused = Skillbox::builder()
        .skills_dir(skills.path())
        .writable_workspace(skills.path())
        .build()
        .unwrap_err();
    assert!(
        matches!(
            refused,
            BuildError::Policy(PolicyError::WriteOverHostState { .. })
        ),
        "{refused:?}"
    );
    let missing = Skillbox::builder()
        .workspace(skills.path().join("nowhere"))
        .build()
        .unwrap_err();
    assert!(
        matches!(missing, BuildError::Workspace { .. }),
        "{missing:?}"
    );
    assert!(
        !missing
            .to_string()
            .contains(&*skills.path().to_string_lossy())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_mcp_on_a_byte_stream() {
    let skillbox = bundled().build().unwrap();
    let server = Server::builder(&skillbox).build().unwrap();
    let (client, server_side) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_side);
    let session = tokio::spawn(async move { server.serve(read, write).await });
    let (client_read, mut client_write) = tokio::io::split(client);
    for line in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "api-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "load_skill", "arguments": {"name": "log-inspect"}}}),
    ] {
        client_write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut lines = BufReader::new(client_read).lines();
    let mut loaded = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        let reply: Value = serde_json::from_str(&line).unwrap();
        if reply["id"] == 2 {
            loaded = Some(reply);
            break;
        }
    }
    let loaded = loaded.expect("load_skill answered");
    assert_eq!(loaded["result"]["isError"], json!(false), "{loaded}");
    assert!(loaded.to_string().contains("log-inspect__grep"), "{loaded}");
    // End of input: the session finishes and the server returns.
    client_write.shutdown().await.unwrap();
    session.await.unwrap().unwrap();
}

/// A model of the embedder's own: it loads the skill, counts a log's
/// lines, then answers with what the tool said.
struct Scripted {
    step: AtomicUsize,
    seen: Mutex<Vec<String>>,
}

impl Model for Scripted {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, ProviderError> {
        let step = self.step.fetch_add(1, Ordering::SeqCst);
        if let Some(last) = request.messages.last() {
            self.seen.lock().unwrap().push(format!("{last:?}"));
        }
        let call = |name: &str, arguments: Value| ToolCall {
            id: format!("call-{step}"),
            name: name.into(),
            arguments: arguments.to_string(),
        };
        let (text, tool_calls) = match step {
            0 => (
                None,
                vec![call("load_skill", json!({"name": "log-inspect"}))],
            ),
            1 => (
                None,
                vec![call(
                    "log-inspect__count-lines",
                    json!({"path": "logs/app.log"}),
                )],
            ),
            _ => (Some("counted".to_string()), Vec::new()),
        };
        Ok(match text {
            Some(text) => ModelResponse::answer(text),
            None => ModelResponse::calling(tool_calls),
        })
    }

    fn describe(&self) -> String {
        "scripted".into()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mounted_router_refuses_a_public_address_without_authentication() {
    hermetic();
    let skillbox = bundled().build().unwrap();
    let server = Server::builder(&skillbox).build().unwrap();
    let shutdown = CancellationToken::new();

    // The attack: mount the server on every interface with no token.
    let public = HttpOptions::new("0.0.0.0:8080".parse().unwrap());
    let refused = server.http_router(&public, shutdown.clone()).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("refusing to serve a non-loopback address without authentication"),
        "{refused}"
    );
    let mut insecure = HttpOptions::new("0.0.0.0:8080".parse().unwrap());
    insecure.insecure_no_auth = true;
    assert!(server.http_router(&insecure, shutdown.clone()).is_ok());

    // On loopback the mounted router serves the probes and /mcp.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = server
        .http_router(&HttpOptions::new(addr), shutdown.clone())
        .unwrap();
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let ready = reqwest::get(format!("http://{addr}/readyz")).await.unwrap();
        if ready.status() == 200 {
            let body: Value = ready.json().await.unwrap();
            assert_eq!(body["status"], "ready");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unauthenticated_elsewhere = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("host", "evil.example")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        unauthenticated_elsewhere.status(),
        403,
        "a foreign Host header is refused (DNS rebinding)"
    );
    shutdown.cancel();
    serving.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_the_agent_loop_with_the_embedders_model() {
    let skillbox = bundled().build().unwrap();
    let model = Scripted {
        step: AtomicUsize::new(0),
        seen: Mutex::new(Vec::new()),
    };
    let agent = Agent::builder(&skillbox, model).max_steps(5).build();
    let run = agent.run("How long is the app log?").await.unwrap();
    assert_eq!(run.outcome.stop, Stop::Done, "{:?}", run.outcome);
    assert_eq!(run.outcome.tool_calls, 2);
    assert_eq!(run.outcome.answer, "counted");
    let seen = agent.model().seen.lock().unwrap().join("\n");
    assert!(
        seen.contains("lines"),
        "the tool's result reached the model: {seen}"
    );
}

/// This crate stands for an embedder: it may use the stable API only.
#[test]
fn uses_nothing_unstable() {
    for file in ["tests/embed.rs", "src/snapshot.rs"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        let needle = ["skillbox", "::", "unstable"].concat();
        assert!(
            !text.contains(&needle),
            "{file} reaches into the unstable module"
        );
    }
}
