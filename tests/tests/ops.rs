//! Operating a server: `/healthz`, `/readyz` and `/metrics` beside `/mcp`,
//! trace context into the audit log, and the drain on SIGTERM. The real
//! binary over real HTTP.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillbox_e2e::mcp::{
    HttpServer, TestkitServer, base_url, sample, scrape, serve_http, serve_testkit, stateless_call,
    wait_for_gauge,
};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn audit_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("GET");
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

/// Waits (on the server's own answer, not a clock) until `/readyz` is 200.
async fn wait_ready(mcp_url: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = get(&format!("{}/readyz", base_url(mcp_url))).await;
        if status == 200 {
            return serde_json::from_str(&body).expect("readyz is JSON");
        }
        assert_eq!(status, 503, "{body}");
        assert!(Instant::now() < deadline, "never ready: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn probes_and_metrics_count_what_ran_and_nothing_a_client_made_up() {
    let skills = skillbox_e2e::testkit_skills();
    let secret_dir = skills.path().to_string_lossy().to_string();
    let (_server, url) = serve_http(&[
        "--skills",
        &secret_dir,
        "--tools",
        "all",
        "--fuel",
        "50000000",
    ]);
    let (status, body) = get(&format!("{}/healthz", base_url(&url))).await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"alive"}"#));
    let ready = wait_ready(&url).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert!(ready["skills"].as_u64().unwrap() >= 1, "{ready}");
    let components = &ready["components"];
    assert_eq!(components["failed"], 0, "{ready}");
    assert!(
        components["from_cache"].as_u64().unwrap() + components["compiled_here"].as_u64().unwrap()
            >= 1,
        "{ready}"
    );
    assert!(
        !ready.to_string().contains(&secret_dir),
        "no host path: {ready}"
    );

    let http = reqwest::Client::new();
    for _ in 0..3 {
        let ok = stateless_call(&http, &url, "testkit__noop", json!({}), json!({})).await;
        assert_eq!(ok.unwrap()["structuredContent"]["result"], 42);
    }
    let failed = stateless_call(&http, &url, "testkit__fail", json!({}), json!({})).await;
    assert_eq!(failed.unwrap()["isError"], true);
    let spun = stateless_call(&http, &url, "testkit__spin", json!({}), json!({})).await;
    let spun = spun.unwrap().to_string();
    assert!(spun.contains("fuel"), "{spun}");
    // The attack: names the catalog never had, each a would-be label.
    for n in 0..40 {
        let name = format!("testkit__made-up-{n}");
        let _ = stateless_call(&http, &url, &name, json!({}), json!({})).await;
    }

    let metrics = scrape(&url, None).await;
    let calls = |tool: &str, outcome: &str| {
        sample(
            &metrics,
            "skillbox_calls_total",
            &[("tool", tool), ("outcome", outcome)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(calls("testkit__noop", "ok"), 3.0);
    assert!(
        metrics
            .samples
            .iter()
            .any(|s| s.metric == "skillbox_calls_total"
                && s.labels.get("tool") == Some("testkit__fail")),
        "the failing tool is counted"
    );
    assert_eq!(calls("testkit__spin", "out_of_fuel"), 1.0);
    assert_eq!(
        sample(
            &metrics,
            "skillbox_sandbox_errors_total",
            &[("kind", "out_of_fuel")]
        ),
        Some(1.0)
    );
    assert!(
        calls("(unresolved)", "unknown") >= 40.0,
        "{:?}",
        metrics.samples
    );
    assert!(
        !metrics
            .samples
            .iter()
            .any(|s| s.labels.values().any(|v| v.contains("made-up"))),
        "a client's made-up names never become labels"
    );
    let fuel = sample(
        &metrics,
        "skillbox_fuel_consumed_total",
        &[("tool", "testkit__noop")],
    );
    assert!(fuel.unwrap() > 0.0);
    assert_eq!(sample(&metrics, "skillbox_active_calls", &[]), Some(0.0));
    assert!(sample(&metrics, "skillbox_sessions", &[]).is_some());
    let loads = sample(
        &metrics,
        "skillbox_compile_cache_total",
        &[("result", "hit")],
    )
    .unwrap()
        + sample(
            &metrics,
            "skillbox_compile_cache_total",
            &[("result", "miss")],
        )
        .unwrap();
    assert!(loads >= 1.0);
    assert!(sample(&metrics, "skillbox_egress_bytes_total", &[]).is_some());
    let histogram = metrics
        .samples
        .iter()
        .find(|s| {
            s.metric == "skillbox_call_duration_seconds"
                && s.labels.get("tool") == Some("testkit__noop")
        })
        .expect("a latency histogram per tool");
    match &histogram.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().unwrap().count, 3.0, "{buckets:?}")
        }
        other => panic!("not a histogram: {other:?}"),
    }
}

#[tokio::test]
async fn with_a_token_metrics_need_it_and_the_probes_do_not() {
    let token_dir = tempfile::tempdir().unwrap();
    let token_file = token_dir.path().join("token");
    let token = "ops-test-token-0123456789abcdef";
    std::fs::write(&token_file, token).unwrap();
    let (_server, url) = serve_http(&["--auth-token-file", token_file.to_str().unwrap()]);
    let base = base_url(&url);
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);
    wait_ready(&url).await;
    assert_eq!(get(&format!("{base}/metrics")).await.0, 401);
    let metrics = scrape(&url, Some(token)).await;
    assert!(sample(&metrics, "skillbox_active_calls", &[]).is_some());
}

#[tokio::test]
async fn a_traceparent_in_meta_or_header_reaches_the_audit_line() {
    let TestkitServer { url, audit, .. } = &serve_testkit(&[]);
    let http = reqwest::Client::new();
    let from_meta = json!({"traceparent": format!("00-{TRACE_ID}-00f067aa0ba902b7-01")});
    stateless_call(&http, url, "testkit__noop", json!({}), from_meta)
        .await
        .unwrap();
    let header = format!("00-{TRACE_ID}-1111111111111111-01");
    let params = json!({"name": "testkit__noop", "arguments": {}});
    let reply = skillbox_e2e::mcp::stateless_request(&http, url, "tools/call", params, json!({}))
        .header("traceparent", header)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    // Not a trace context: text a client would like in the audit log.
    let forged = json!({"traceparent": "00-\",\"outcome\":\"ok-00f067aa0ba902b7-01"});
    stateless_call(&http, url, "testkit__noop", json!({}), forged)
        .await
        .unwrap();

    let lines = audit_lines(audit);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(
        lines[0]["client"], "skillbox-e2e 1",
        "stateless clients name themselves"
    );
    assert_eq!(lines[0]["trace_id"], TRACE_ID);
    assert_eq!(lines[0]["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(lines[1]["trace_id"], TRACE_ID);
    assert_eq!(lines[1]["parent_span_id"], "1111111111111111");
    assert!(lines[2].get("trace_id").is_none(), "{}", lines[2]);
}

fn sigterm(server: &HttpServer) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Waits (off the runtime's threads) for the server process to exit; its
/// exit code. A server still running after `within` is killed, and the
/// test fails.
async fn exit_code(mut server: HttpServer, within: Duration) -> Option<i32> {
    let pid = server.0.id();
    let exited = tokio::task::spawn_blocking(move || server.0.wait().expect("wait").code());
    match tokio::time::timeout(within, exited).await {
        Ok(code) => code.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("the server did not exit within {within:?}");
        }
    }
}

/// Sends one stateless `tools/call` in the background.
fn spawn_call(
    url: &str,
    tool: &'static str,
    arguments: Value,
) -> tokio::task::JoinHandle<Result<Value, String>> {
    let url = url.to_owned();
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        stateless_call(&http, &url, tool, arguments, json!({})).await
    })
}

#[tokio::test]
async fn sigterm_lets_a_long_call_finish_then_exits_0() {
    // The skills and the audit log's folder stay with `served` (a partial
    // move), so they outlive the server.
    let served = serve_testkit(&["--shutdown-grace", "60"]);
    let TestkitServer {
        server, url, audit, ..
    } = served;
    let long_call = spawn_call(&url, "testkit__sleep-ms", json!({"ms": 2500}));
    wait_for_gauge(&url, None, "skillbox_active_calls", 1.0).await;
    sigterm(&server);

    // New connections are refused at once; the call in flight finishes.
    let refused = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::get(format!("{}/healthz", base_url(&url)))
            .await
            .is_ok()
        {
            assert!(Instant::now() < deadline, "still accepting after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    refused.await;
    let result = long_call
        .await
        .unwrap()
        .expect("the call in flight is answered");
    assert_eq!(result["isError"], false, "{result}");
    let code = exit_code(server, Duration::from_secs(30)).await;
    assert_eq!(code, Some(0));
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["tool"], "testkit__sleep-ms");
    assert_eq!(lines[0]["outcome"], "ok");
}

#[tokio::test]
async fn a_call_longer_than_the_grace_is_cut_off_and_the_server_still_exits_0() {
    let served = serve_testkit(&["--shutdown-grace", "1"]);
    let TestkitServer { server, url, .. } = served;
    let spinning = spawn_call(&url, "testkit__spin", json!({}));
    wait_for_gauge(&url, None, "skillbox_active_calls", 1.0).await;
    sigterm(&server);
    // The spin's own limit is 60 s; the grace of 1 s ends it long before.
    let code = exit_code(server, Duration::from_secs(30)).await;
    assert_eq!(code, Some(0));
    let outcome = spinning.await.unwrap();
    assert!(
        outcome.as_ref().is_err() || outcome.as_ref().unwrap()["isError"] == true,
        "{outcome:?}"
    );
}

#[tokio::test]
async fn with_an_otlp_endpoint_the_call_span_is_exported_inside_the_callers_trace() {
    // A real OTLP/HTTP receiver: it keeps every body posted to /v1/traces.
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post({
            let received = received.clone();
            move |body: String| async move {
                received.lock().unwrap().push(body);
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let skills = skillbox_e2e::testkit_skills();
    let (server, url) = skillbox_e2e::mcp::serve_http_with_env(
        &[
            "--skills",
            skills.path().to_str().unwrap(),
            "--tools",
            "all",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    let http = reqwest::Client::new();
    let meta = json!({"traceparent": format!("00-{TRACE_ID}-00f067aa0ba902b7-01")});
    stateless_call(&http, &url, "testkit__noop", json!({}), meta)
        .await
        .unwrap();
    // Shutdown sends what is still batched.
    sigterm(&server);
    let code = exit_code(server, Duration::from_secs(30)).await;
    assert_eq!(code, Some(0));

    let bodies = received.lock().unwrap().clone();
    let spans: Vec<Value> = bodies
        .iter()
        .map(|b| serde_json::from_str::<Value>(b).expect("OTLP/JSON"))
        .flat_map(|export| {
            let mut spans = Vec::new();
            for rs in export["resourceSpans"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                for ss in rs["scopeSpans"].as_array().cloned().unwrap_or_default() {
                    spans.extend(ss["spans"].as_array().cloned().unwrap_or_default());
                }
            }
            spans
        })
        .collect();
    let call = spans
        .iter()
        .find(|s| s["name"] == "call")
        .unwrap_or_else(|| panic!("no call span exported: {bodies:?}"));
    assert_eq!(call["traceId"].as_str().unwrap().to_lowercase(), TRACE_ID);
    assert_eq!(
        call["parentSpanId"].as_str().unwrap().to_lowercase(),
        "00f067aa0ba902b7"
    );
    assert!(
        bodies.iter().any(|b| b.contains("testkit__noop")),
        "{bodies:?}"
    );
}

#[tokio::test]
async fn an_open_listen_stream_does_not_hold_the_drain_to_its_grace() {
    let (server, url) = serve_http(&["--shutdown-grace", "120"]);
    let client = skillbox_e2e::mcp::connect_stateless(Default::default(), &url).await;
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let _subscription = client
        .peer()
        .listen(filter)
        .await
        .expect("subscriptions/listen");
    sigterm(&server);
    // Far less than the 120 s grace: the stream is not a call in flight.
    let code = exit_code(server, Duration::from_secs(60)).await;
    assert_eq!(code, Some(0));
}
