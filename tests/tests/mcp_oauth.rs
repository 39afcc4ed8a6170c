//! OAuth resource-server mode, end to end: a real authorization server (its
//! metadata, its JWKS over HTTP, ES256 tokens) and `serve --http` checking
//! every request against it, with rmcp's client on both revisions and
//! forged tokens sent by hand.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use skillbox_e2e::issuer::{Issuer, SigningKey};
use skillbox_e2e::mcp::{HttpServer, Recorder};

const RESOURCE: &str = "https://mcp.test/mcp";
const SCOPE: &str = "mcp:call";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(issuer: &Issuer) -> Value {
    json!({
        "iss": issuer.url, "aud": RESOURCE, "sub": "tester",
        "exp": now() + 300, "iat": now(), "scope": format!("openid {SCOPE}"),
    })
}

/// `claims` with `changes` applied (null removes a claim).
fn with(mut base: Value, changes: Value) -> Value {
    for (key, value) in changes.as_object().unwrap() {
        if value.is_null() {
            base.as_object_mut().unwrap().remove(key);
        } else {
            base[key] = value.clone();
        }
    }
    base
}

fn serve(issuer: &Issuer) -> (HttpServer, String) {
    skillbox_e2e::mcp::serve_http(&[
        "--oauth-issuer",
        &issuer.url,
        "--oauth-resource",
        RESOURCE,
        "--oauth-scope",
        SCOPE,
    ])
}

/// A ping with `token`; the response's status and `WWW-Authenticate`.
async fn ping(url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}"#);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (response.status().as_u16(), challenge)
}

/// Whether the request got past authentication (whatever MCP then said).
async fn accepted(url: &str, token: &str) -> bool {
    let (status, _) = ping(url, Some(token)).await;
    status != 401 && status != 403
}

async fn connect(url: &str, token: &str, version: ProtocolVersion) -> skillbox_e2e::mcp::Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    let lifecycle = if version == ProtocolVersion::V_2026_07_28 {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![version],
        }
    } else {
        ClientLifecycleMode::Initialize
    };
    Recorder::default()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("a client with a valid token gets in")
}

#[tokio::test]
async fn only_tokens_the_issuer_signed_for_this_server_get_in() {
    let issuer = Issuer::start();
    let (_server, url) = serve(&issuer);
    let good = issuer.mint(&claims(&issuer));

    // No token: 401 pointing at the metadata, which names the issuer.
    let (status, challenge) = ping(&url, None).await;
    assert_eq!(status, 401);
    let metadata_url = "https://mcp.test/.well-known/oauth-protected-resource/mcp";
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    let local_metadata = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let metadata: Value = reqwest::get(&local_metadata)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], RESOURCE);
    assert_eq!(metadata["authorization_servers"], json!([issuer.url]));
    assert_eq!(metadata["scopes_supported"], json!([SCOPE]));

    // Real clients on both revisions.
    for version in [ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25] {
        let client = connect(&url, &good, version.clone()).await;
        assert!(!client.peer().list_all_tools().await.unwrap().is_empty());
        client.cancel().await.unwrap();
    }

    let base = claims(&issuer);
    // The issuer rotates its key: the new key's tokens are accepted without
    // a restart.
    issuer.rotate("key-2");
    let rotated = issuer.mint(&base);
    assert!(accepted(&url, &rotated).await, "the new key's token");
    assert!(accepted(&url, &good).await, "the old key still verifies");

    // Forgeries and near misses: each 401 with invalid_token.
    let kid = issuer.key().kid;
    let stranger = SigningKey::generate(&kid);
    let header = |alg: &str| URL_SAFE_NO_PAD.encode(json!({"alg": alg, "kid": kid}).to_string());
    let body = URL_SAFE_NO_PAD.encode(base.to_string());
    let hs256 = {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        h.kid = Some(kid.clone());
        jsonwebtoken::encode(
            &h,
            &base,
            &jsonwebtoken::EncodingKey::from_secret(b"a shared secret").unwrap(),
        )
        .unwrap()
    };
    let cases = [
        (
            "expired",
            issuer.mint(&with(base.clone(), json!({"exp": now() - 600}))),
        ),
        (
            "no exp",
            issuer.mint(&with(base.clone(), json!({"exp": null}))),
        ),
        (
            "another audience",
            issuer.mint(&with(
                base.clone(),
                json!({"aud": "https://other.test/mcp"}),
            )),
        ),
        (
            "another issuer",
            issuer.mint(&with(base.clone(), json!({"iss": "https://evil.test"}))),
        ),
        ("another key, same kid", stranger.sign_as(&kid, &base)),
        ("an unknown kid", stranger.sign_as("key-unknown", &base)),
        ("HS256", hs256),
        ("alg none", format!("{}.{body}.", header("none"))),
        ("tampered claims", {
            let parts: Vec<&str> = good.split('.').collect();
            let evil =
                URL_SAFE_NO_PAD.encode(with(base.clone(), json!({"sub": "admin"})).to_string());
            format!("{}.{evil}.{}", parts[0], parts[2])
        }),
    ];
    for (what, token) in &cases {
        let (status, challenge) = ping(&url, Some(token)).await;
        assert_eq!(status, 401, "{what} got in");
        assert!(challenge.contains("invalid_token"), "{what}: {challenge}");
    }

    // A valid token without the scope: 403 naming it.
    let unscoped = issuer.mint(&with(base.clone(), json!({"scope": "openid"})));
    let (status, challenge) = ping(&url, Some(&unscoped)).await;
    assert_eq!(status, 403);
    assert!(
        challenge.contains("insufficient_scope") && challenge.contains(SCOPE),
        "{challenge}"
    );
}

#[test]
fn oauth_allows_a_non_loopback_bind_and_a_wrong_issuer_fails_at_start() {
    let issuer = Issuer::start();
    let mut server = HttpServer(
        std::process::Command::new(skillbox_e2e::skillbox_bin())
            .args(["serve", "--no-audit", "--http", "0.0.0.0:0"])
            .args(["--oauth-issuer", &issuer.url, "--oauth-resource", RESOURCE])
            .envs(skillbox_e2e::hermetic_env())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.0.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("serving MCP at"), "{line}");

    let nowhere = refused_start("http://127.0.0.1:9/nowhere");
    assert!(
        nowhere.contains("jwks_uri") && nowhere.contains("--oauth-jwks-url"),
        "{nowhere}"
    );
    let plain = refused_start("http://auth.example.com");
    assert!(plain.contains("use https"), "{plain}");
    // A key set of 2 MiB is not read whole.
    let bloated = Issuer::start_padded(2 * 1024 * 1024);
    let refused = refused_start(&bloated.url);
    assert!(refused.contains("larger than 1024 KiB"), "{refused}");
}

/// The stderr of a `serve` that must refuse to start with `issuer`.
fn refused_start(issuer: &str) -> String {
    let out = std::process::Command::new(skillbox_e2e::skillbox_bin())
        .args(["serve", "--no-audit", "--http", "127.0.0.1:0"])
        .args(["--oauth-issuer", issuer, "--oauth-resource", RESOURCE])
        .envs(skillbox_e2e::hermetic_env())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[tokio::test]
async fn one_client_cannot_take_every_call_slot() {
    let issuer = Issuer::start();
    let kit = skillbox_e2e::testkit_skills();
    let (_server, url) = skillbox_e2e::mcp::serve_http(&[
        "--oauth-issuer",
        &issuer.url,
        "--oauth-resource",
        RESOURCE,
        "--skills",
        kit.path().to_str().unwrap(),
        "--skill",
        "testkit",
        "--tools",
        "all",
        "--max-concurrency",
        "2",
        "--max-calls-per-client",
        "1",
    ]);
    let token_of = |sub: &str| issuer.mint(&with(claims(&issuer), json!({ "sub": sub })));
    let alice = connect(&url, &token_of("alice"), ProtocolVersion::V_2026_07_28).await;
    let bob = connect(&url, &token_of("bob"), ProtocolVersion::V_2026_07_28).await;
    // Alice asks for both slots with two long calls.
    let long = || {
        let peer = alice.peer().clone();
        tokio::spawn(async move {
            let args = json!({"ms": 20_000}).as_object().cloned().unwrap();
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("testkit__sleep-ms").with_arguments(args),
            )
            .await
        })
    };
    let (first, second) = (long(), long());
    // One runs; the other waits for alice's share.
    let alice_token = token_of("alice");
    for (gauge, n) in [
        ("skillbox_active_calls", 1.0),
        ("skillbox_waiting_calls", 1.0),
    ] {
        skillbox_e2e::mcp::wait_for_gauge(&url, Some(&alice_token), gauge, n).await;
    }
    // Bob still gets the slot Alice's share leaves free (with a share of 2
    // this waits 20 s and fails).
    let noop = bob
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new("testkit__noop"))
        .await
        .unwrap();
    assert_ne!(noop.is_error, Some(true));
    assert!(
        !first.is_finished() && !second.is_finished(),
        "bob's call waited for alice's"
    );
    first.abort();
    second.abort();
}
