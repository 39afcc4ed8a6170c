//! Outgoing HTTP from tools: the bundled `web-peek` skill against a real
//! local server, through every refusal the egress policy makes.

use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use serde_json::{Value, json};
use skillbox_e2e::web::LocalSite;
use skillbox_e2e::{Run, component, skillbox};

const PAGE: &str = "<html><head><style>p{}</style><script>var x = 1;</script></head>\
    <body><h1>Release notes</h1><p>Version 2.4 fixes the &quot;pool exhausted&quot; bug.</p></body></html>";

fn site() -> LocalSite {
    LocalSite::serve(|_| {
        axum::Router::new()
            .route(
                "/page.html",
                get(|| async { ([(CONTENT_TYPE, "text/html")], PAGE) }),
            )
            .route(
                "/data.json",
                get(|| async { ([(CONTENT_TYPE, "application/json")], r#"{"ok": true}"#) }),
            )
            .route("/big", get(|| async { "x".repeat(5 << 20) }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    "late"
                }),
            )
    })
}

fn fetch(url: &str, flags: &[String]) -> Run {
    skillbox()
        .args([
            "call",
            "web-peek__fetch",
            "--args",
            &json!({"url": url}).to_string(),
        ])
        .args(flags)
        .output()
        .unwrap()
        .into()
}

fn grant(target: &str) -> Vec<String> {
    vec!["--allow-net".into(), format!("web-peek:{target}")]
}

#[test]
fn a_granted_host_is_fetched_and_read_as_text() {
    let site = site();
    let port = site.addr.port();
    let r = fetch(
        &format!("http://127.0.0.1:{port}/page.html"),
        &grant(&format!("127.0.0.1:{port}")),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let page = r.json();
    assert_eq!(page["status"], 200);
    let text = page["text"].as_str().unwrap();
    assert!(text.contains("Release notes"), "{text}");
    assert!(text.contains("fixes the \"pool exhausted\" bug"), "{text}");
    assert!(!text.contains("var x") && !text.contains('<'), "{text}");

    let json_page = fetch(
        &format!("http://127.0.0.1:{port}/data.json"),
        &grant(&format!("127.0.0.1:{port}")),
    );
    assert_eq!(json_page.json()["text"], r#"{"ok": true}"#);
}

#[test]
fn hosts_not_granted_are_denied_with_the_flag_that_grants_them() {
    let site = site();
    let port = site.addr.port();
    // Granted 127.0.0.1, asked for another address of the same machine.
    let r = fetch(
        &format!("http://127.0.0.2:{port}/page.html"),
        &grant(&format!("127.0.0.1:{port}")),
    );
    assert_eq!(r.code, 1, "{r:?}");
    r.stderr_says(&["denied: network access to 127.0.0.2"]);
    assert!(
        r.stderr
            .contains(&format!("--allow-net web-peek:127.0.0.2:{port}")),
        "{}",
        r.stderr
    );
    // No grant at all.
    let r = fetch(&format!("http://127.0.0.1:{port}/page.html"), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    r.stderr_says(&["denied"]);
    // A grant for a skill that is not loaded is a usage error.
    let r = fetch(
        "http://example.com/",
        &["--allow-net".into(), "nope:example.com".into()],
    );
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn a_name_resolving_to_an_internal_address_is_refused_unless_the_address_is_named() {
    let site = site();
    let port = site.addr.port();
    let r = fetch(
        &format!("http://localhost:{port}/page.html"),
        &grant(&format!("localhost:{port}")),
    );
    assert_eq!(r.code, 1, "{r:?}");
    r.stderr_says(&["resolves only to internal addresses"]);
}

#[test]
fn responses_are_bounded() {
    let site = site();
    let port = site.addr.port();
    let target = grant(&format!("127.0.0.1:{port}"));
    // The tool reads at most 2 MiB of the 5 MiB body and says so.
    let r = fetch(&format!("http://127.0.0.1:{port}/big"), &target);
    assert_eq!(r.code, 0, "{r:?}");
    let page = r.json();
    assert_eq!(page["body-truncated"], true);
    assert_eq!(page["body-bytes"], 2 << 20);
    assert_eq!(page["text"].as_str().unwrap().len(), 8000);
    assert_eq!(page["next-start"], 8000);

    // The host's own cap on response bytes stops a call past it.
    let mut capped = target.clone();
    capped.extend(["--net-max-response-mib".into(), "1".into()]);
    let r = fetch(&format!("http://127.0.0.1:{port}/big"), &capped);
    assert_eq!(r.code, 1, "{r:?}");
    // The error names the flag that raises this cap, not another one.
    r.stderr_says(&["network response limit", "--net-max-response-mib"]);
    assert!(!r.stderr.contains("--max-output-bytes"), "{r:?}");

    // And on requests.
    let mut no_requests = target;
    no_requests.extend(["--net-max-requests".into(), "0".into()]);
    let r = fetch(&format!("http://127.0.0.1:{port}/page.html"), &no_requests);
    assert_eq!(r.code, 1, "{r:?}");
    r.stderr_says(&["more than 0 HTTP requests"]);
}

#[test]
fn a_slow_server_is_cut_off_by_the_calls_wall_clock() {
    let site = site();
    let port = site.addr.port();
    let mut flags = grant(&format!("127.0.0.1:{port}"));
    flags.extend(["--timeout-ms".into(), "1500".into()]);
    let started = std::time::Instant::now();
    let r = fetch(&format!("http://127.0.0.1:{port}/slow"), &flags);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("timeout") || r.stderr.contains("in time"),
        "{}",
        r.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn requests_are_audited_and_http_components_load() {
    let site = site();
    let port = site.addr.port();
    let state = tempfile::tempdir().unwrap();
    let r: Run = skillbox()
        .env("SKILLBOX_STATE_DIR", state.path())
        .args(["call", "web-peek__fetch", "--args"])
        .arg(json!({"url": format!("http://127.0.0.1:{port}/page.html")}).to_string())
        .args(grant(&format!("127.0.0.1:{port}")))
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "{r:?}");
    let audit = std::fs::read_to_string(state.path().join("audit.jsonl")).unwrap();
    let record: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(
        record["network"],
        json!([{"host": "127.0.0.1", "port": port, "method": "GET", "status": 200,
                "bytes": PAGE.len(), "outcome": "ok"}])
    );
    assert!(
        record["grants"].as_str().unwrap().contains("net 127.0.0.1"),
        "{record}"
    );

    // The component imports wasi:http and still loads and lists its tool.
    let r: Run = skillbox()
        .arg("inspect")
        .arg(component("web"))
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["tools"][0]["name"], "fetch");
}
