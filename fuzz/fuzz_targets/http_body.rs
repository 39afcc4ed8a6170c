#![no_main]
//! A request body on the Streamable HTTP endpoint, as a client sends it,
//! through the whole router: the host-name check, the body cap, rmcp's
//! JSON-RPC parsing, the revision and session checks and the handlers. No
//! body may make the server fail (a 5xx) or panic; each gets an answer.

use std::sync::OnceLock;

use axum::body::Body;
use skillbox::Skillbox;
use skillbox::mcp::{HttpOptions, Server};
use tower::ServiceExt;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    _skills: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let skills = tempfile::tempdir().expect("a skills folder");
        let router = runtime.block_on(async {
            let skillbox = Skillbox::builder()
                .skills_dir(skills.path())
                .no_cache()
                .build()
                .expect("a skillbox");
            let server = Server::builder(&skillbox).build().expect("a server");
            let options = HttpOptions::new("127.0.0.1:8080".parse().unwrap());
            server
                .http_router(&options, Default::default())
                .expect("a router")
        });
        Fixture {
            runtime,
            router,
            _skills: skills,
        }
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&variant, body)) = data.split_first() else {
        return;
    };
    let fixture = fixture();
    let mut request = http::Request::post("/mcp")
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    request = match variant % 3 {
        0 => request.header("mcp-protocol-version", "2026-07-28"),
        1 => request,
        _ => request
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", "not-a-session"),
    };
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    let status = fixture.runtime.block_on(async {
        let response = fixture
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        response.status()
    });
    assert!(
        !status.is_server_error(),
        "a body made the server fail: {status}"
    );
});
