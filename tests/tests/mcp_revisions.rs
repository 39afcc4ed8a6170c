//! Both MCP revisions from one server: the 2025-11-25 session style (lazy
//! tool activation) and the 2026-07-28 stateless style (a fixed, complete
//! tool list), the Skills extension, the user's filters and protocol errors.

use std::process::Command;

use rmcp::model::{
    CallToolRequestParams, GetSkillRequestParams, ProtocolVersion,
    ReadResourceDirectoryRequestParams, ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use skillbox_e2e::mcp::{HttpServer, Recorder, assert_tool_error, call, connect_stdio, text};
use skillbox_e2e::{examples, skillbox_bin};

/// `serve --http` over the sample workspace, with `args`.
fn serve_http(args: &[&str]) -> (HttpServer, String) {
    let workspace = examples();
    let mut all = vec!["--workspace", workspace.as_str()];
    all.extend_from_slice(args);
    skillbox_e2e::mcp::serve_http(&all)
}

async fn connect_stateless(url: &str) -> skillbox_e2e::mcp::Client {
    skillbox_e2e::mcp::connect_stateless(Recorder::default(), url).await
}

#[tokio::test]
async fn the_stateless_revision_lists_every_skill_tool_and_never_varies() {
    let (_server, url) = serve_http(&[]);
    let client = connect_stateless(&url).await;
    let first = client.peer().list_all_tools().await.unwrap();
    let names: Vec<String> = first.iter().map(|t| t.name.to_string()).collect();
    for tool in [
        "log-inspect__grep",
        "data-peek__query",
        "web-peek__fetch",
        "load_skill",
    ] {
        assert!(
            names.contains(&tool.to_string()),
            "{tool} missing from {names:?}"
        );
    }
    // Callable without load_skill, and loading a skill changes nothing.
    let grep = call(
        &client,
        "log-inspect__grep",
        json!({"path": "logs/app.log", "pattern": "ERROR"}),
    )
    .await;
    assert_ne!(grep.is_error, Some(true), "{}", text(&grep));
    call(&client, "load_skill", json!({"name": "data-peek"})).await;
    let second = client.peer().list_all_tools().await.unwrap();
    assert_eq!(first, second, "the list varies with requests");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn filters_and_read_only_mode_shape_what_is_served() {
    let (_server, url) = serve_http(&[
        "--skill",
        "log-inspect",
        "--skill",
        "release-check",
        "--read-only",
    ]);
    let client = connect_stateless(&url).await;
    let names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        names.contains(&"log-inspect__grep".to_string()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("data-peek")),
        "{names:?}"
    );
    assert!(
        !names.contains(&"run_script".to_string()),
        "read-only serves no scripts: {names:?}"
    );
    let script = call(
        &client,
        "run_script",
        json!({"skill": "release-check", "script": "release-check"}),
    )
    .await;
    assert_tool_error(&script, &["--read-only"]);
    client.cancel().await.unwrap();

    let (_server, url) = serve_http(&["--exclude-skill", "web-peek"]);
    let client = connect_stateless(&url).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name.starts_with("web-peek")));
    assert!(tools.iter().any(|t| t.name.starts_with("data-peek")));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_skills_extension_publishes_every_file_with_its_digest() {
    let (client, _) = connect_stdio(&["--no-audit"]).await;
    let caps = &client.peer_info().unwrap().capabilities;
    let extensions = serde_json::to_value(&caps.extensions).unwrap();
    assert_eq!(
        extensions["io.modelcontextprotocol/skills"],
        json!({"directoryRead": true})
    );
    let skills = client.peer().list_skills(None).await.unwrap().skills;
    let names: Vec<&str> = skills.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "data-peek",
            "log-inspect",
            "release-check",
            "report-digest",
            "web-peek"
        ]
    );

    let entry = client
        .peer()
        .get_skill(GetSkillRequestParams::new("skill://log-inspect/SKILL.md"))
        .await
        .unwrap()
        .skill;
    let frontmatter = serde_json::to_value(&entry.frontmatter).unwrap();
    assert_eq!(frontmatter["license"], "Apache-2.0");
    assert_eq!(frontmatter["metadata"]["author"], "skillbox");
    let rmcp::model::SkillResources::Files(files) = &entry.resources else {
        panic!("a static manifest")
    };
    let uris: Vec<&str> = files.iter().map(|f| f.uri.as_str()).collect();
    for expected in [
        "skill://log-inspect/SKILL.md",
        "skill://log-inspect/skillbox.yaml",
        "skill://log-inspect/references/patterns.md",
    ] {
        assert!(uris.contains(&expected), "{expected} not in {uris:?}");
    }
    // Components run here, as the skill's tools: they are not files a
    // client installs.
    assert!(
        !uris.iter().any(|u| u.ends_with(".wasm")),
        "components are served: {uris:?}"
    );
    // Every listed file reads back with the listed digest and size.
    for file in files {
        let read = client
            .peer()
            .read_resource(ReadResourceRequestParams::new(file.uri.clone()))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.uri));
        let bytes = match &read.contents[0] {
            ResourceContents::TextResourceContents { text, .. } => text.clone().into_bytes(),
            ResourceContents::BlobResourceContents { blob, .. } => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .unwrap()
            }
            other => panic!("unexpected contents {other:?}"),
        };
        file.verify(&bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    let component = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "skill://log-inspect/tools/text.wasm",
        ))
        .await
        .expect_err("a component is not served as a file");
    assert!(
        component.to_string().contains("component this server runs"),
        "{component}"
    );

    let listing = client
        .peer()
        .read_resource_directory(ReadResourceDirectoryRequestParams::new(
            "skill://log-inspect/",
        ))
        .await
        .unwrap();
    let children: Vec<(String, Option<String>)> = listing
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.mime_type.clone()))
        .collect();
    assert!(
        children.contains(&("references".into(), Some("inode/directory".into()))),
        "{children:?}"
    );
    assert!(
        children.contains(&("SKILL.md".into(), Some("text/markdown".into()))),
        "{children:?}"
    );

    let missing = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "skill://log-inspect/nope.md",
        ))
        .await
        .expect_err("not found");
    let rmcp::ServiceError::McpError(error) = missing else {
        panic!("{missing}")
    };
    assert_eq!(
        error.data,
        Some(json!({"uri": "skill://log-inspect/nope.md"}))
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error_that_teaches() {
    let (client, _) = connect_stdio(&["--no-audit"]).await;
    let error = client
        .peer()
        .call_tool(CallToolRequestParams::new("grep"))
        .await
        .expect_err("unknown");
    let rmcp::ServiceError::McpError(error) = error else {
        panic!("{error}")
    };
    assert_eq!(error.code.0, -32602);
    assert!(
        error.message.contains("<skill>__<function>"),
        "{}",
        error.message
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_listen_stream_hears_when_skills_change() {
    let skills = skillbox_e2e::workspace(&[(
        "first/SKILL.md",
        "---\nname: first\ndescription: A skill for the listen test; never for real work.\n---\nBody.\n",
    )]);
    let (_server, url) = serve_http(&[
        "--skills",
        skills.path().to_str().unwrap(),
        "--reload-ms",
        "100",
    ]);
    let client = connect_stateless(&url).await;
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut subscription = client
        .peer()
        .listen(filter)
        .await
        .expect("subscriptions/listen");
    std::fs::create_dir_all(skills.path().join("second")).unwrap();
    std::fs::write(
        skills.path().join("second/SKILL.md"),
        "---\nname: second\ndescription: Another skill for the listen test; never for real work.\n---\nBody.\n",
    )
    .unwrap();
    let heard = tokio::time::timeout(std::time::Duration::from_secs(30), subscription.next())
        .await
        .expect("a notification within the reload poll")
        .unwrap();
    assert!(
        matches!(
            heard,
            Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))
        ),
        "{heard:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn host_warnings_arrive_as_log_messages_at_the_sessions_level() {
    let (client, recorder) = connect_stdio(&["--no-audit", "--tools", "all"]).await;
    let args = json!({"url": "http://127.0.0.1:9/never-granted"});
    let denied = call(&client, "web-peek__fetch", args.clone()).await;
    assert_eq!(denied.is_error, Some(true));
    let denied = |e: &String| e.starts_with("log:skillbox:") && e.contains("denied");
    let heard = recorder
        .wait_until(
            |events| events.iter().any(denied),
            std::time::Duration::from_secs(10),
        )
        .await;
    assert!(heard, "{:?}", recorder.events.lock().unwrap());
    #[allow(deprecated)]
    client
        .peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Error,
        ))
        .await
        .unwrap();
    let before = recorder.events.lock().unwrap().len();
    call(&client, "web-peek__fetch", args.clone()).await;
    // Back at the default level, the same refusal is logged again. Log
    // messages arrive in order, so once that one is heard, one from the
    // call at level error would have been heard before it.
    #[allow(deprecated)]
    client
        .peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Warning,
        ))
        .await
        .unwrap();
    call(&client, "web-peek__fetch", args).await;
    recorder
        .wait_until(
            |events| events[before..].iter().any(denied),
            std::time::Duration::from_secs(10),
        )
        .await;
    let after: Vec<String> = recorder.events.lock().unwrap()[before..]
        .iter()
        .filter(|e| e.starts_with("log:"))
        .cloned()
        .collect();
    assert_eq!(
        after.len(),
        1,
        "only the call at level warning logs: {after:?}"
    );
    client.cancel().await.unwrap();
}

#[test]
fn a_non_loopback_bind_needs_authentication() {
    let out = Command::new(skillbox_bin())
        .args(["serve", "--no-audit", "--http", "0.0.0.0:0"])
        .envs(skillbox_e2e::hermetic_env())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--auth-token-file") && stderr.contains("--insecure-no-auth"),
        "{stderr}"
    );
    let short = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(short.path(), "abc\n").unwrap();
    let out = Command::new(skillbox_bin())
        .args([
            "serve",
            "--no-audit",
            "--http",
            "0.0.0.0:0",
            "--auth-token-file",
        ])
        .arg(short.path())
        .envs(skillbox_e2e::hermetic_env())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than 16"));
}

#[tokio::test]
async fn a_bearer_token_guards_every_request() {
    let token_file = tempfile::NamedTempFile::new().unwrap();
    let token = "s3cret-token-0123456789abcdef";
    std::fs::write(token_file.path(), format!("{token}\n")).unwrap();
    let (_server, url) = serve_http(&["--auth-token-file", token_file.path().to_str().unwrap()]);
    let post = |auth: Option<&str>| {
        let mut request = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request.send()
    };
    for auth in [None, Some("Bearer wrong-token-0123456789"), Some(token)] {
        let response = post(auth).await.unwrap();
        assert_eq!(response.status(), 401, "{auth:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let transport = StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.as_str(),
        )
        .auth_header(token),
    );
    let client = Recorder::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("an authenticated client gets in");
    assert!(!client.peer().list_all_tools().await.unwrap().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn idle_connections_cannot_hold_the_connection_cap() {
    let (_server, url) = serve_http(&["--max-connections", "2"]);
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    // Two connections that never send a byte take both slots.
    let _idle: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let started = std::time::Instant::now();
    let client = connect_stateless(&url).await;
    assert!(!client.peer().list_all_tools().await.unwrap().is_empty());
    // Served once the idle ones were dropped (10 s first-byte deadline),
    // and not before: the cap held.
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(5),
        "the cap was not reached: {waited:?}"
    );
    assert!(waited < std::time::Duration::from_secs(40), "{waited:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_trickling_its_headers_cannot_hold_a_connection() {
    let (_server, url) = serve_http(&["--max-connections", "1"]);
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    // The only slot goes to a client that sends its request line, then one
    // header byte a second: it passes the first-byte deadline, and never
    // finishes its headers.
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut slow, b"POST /mcp HTTP/1.1\r\n").unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..120 {
            if std::io::Write::write_all(&mut slow, b"X").is_err() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        false
    });
    // A real client is served once the header deadline (10 s) drops it.
    let client = connect_stateless(&url).await;
    assert!(!client.peer().list_all_tools().await.unwrap().is_empty());
    client.cancel().await.unwrap();
    assert!(
        trickle.join().unwrap(),
        "the trickling connection was never closed"
    );
}

#[tokio::test]
async fn sessions_are_capped() {
    use rmcp::ServiceExt;
    let (_server, url) = serve_http(&["--max-sessions", "1"]);
    let session =
        || Recorder::default().serve(StreamableHttpClientTransport::from_uri(url.as_str()));
    let first = session().await.expect("the first session opens");
    assert!(
        session().await.is_err(),
        "a second session is refused at the cap"
    );
    // Stateless requests need no session and are still served.
    let stateless = connect_stateless(&url).await;
    assert!(!stateless.peer().list_all_tools().await.unwrap().is_empty());
    stateless.cancel().await.unwrap();
    first.cancel().await.unwrap();
}
