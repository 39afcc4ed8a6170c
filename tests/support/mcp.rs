//! An MCP client for tests: rmcp's client over the real binary's stdio or
//! over HTTP, recording the notifications the server sends.

use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::Notify;

/// Notifications received, in order, by name; and how this client answers
/// a confirmation question.
#[derive(Clone, Default)]
pub struct Recorder {
    pub events: Arc<Mutex<Vec<String>>>,
    pub changed: Arc<Notify>,
    /// `Some(yes)`: declare elicitation and answer every question so;
    /// `None`: declare no elicitation.
    pub confirm: Option<bool>,
    /// Declare the tasks extension.
    pub tasks: bool,
}

impl Recorder {
    /// A client that can be asked, answering `yes` or no.
    pub fn answering(yes: bool) -> Self {
        Recorder {
            confirm: Some(yes),
            ..Recorder::default()
        }
    }

    /// The messages of the questions this client was asked.
    pub fn questions(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| e.strip_prefix("elicit:").map(String::from))
            .collect()
    }

    pub fn count(&self, name: &str) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.as_str() == name)
            .count()
    }

    fn push(&self, name: &str) {
        self.events.lock().unwrap().push(name.to_string());
        self.changed.notify_waiters();
    }

    /// Waits until `name` has been received at least `n` times.
    pub async fn wait_for(&self, name: &str, n: usize, within: std::time::Duration) -> bool {
        self.wait_until(
            |events| events.iter().filter(|e| *e == name).count() >= n,
            within,
        )
        .await
    }

    /// Waits until `done` holds for the events received so far; woken by
    /// each event, not by a timer.
    pub async fn wait_until(
        &self,
        done: impl Fn(&[String]) -> bool,
        within: std::time::Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            if done(&self.events.lock().unwrap()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.events.lock().unwrap());
            }
        }
    }
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        if self.confirm.is_some() {
            config.capabilities.elicitation = Some(Default::default());
        }
        if self.tasks {
            config.capabilities.extensions = ClientCapabilities::builder()
                .enable_tasks()
                .build()
                .extensions;
        }
        config
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.push(&format!("elicit:{message}"));
        }
        Ok(match self.confirm {
            Some(yes) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(serde_json::json!({"approve": yes})),
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.push("tools/list_changed");
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.push("resources/list_changed");
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.push("prompts/list_changed");
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.push(&format!(
            "log:{}:{}",
            params.logger.unwrap_or_default(),
            params.data.as_str().unwrap_or_default()
        ));
    }

    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.push("progress");
    }
}

pub type Client = RunningService<RoleClient, Recorder>;

/// Starts `skillbox serve ARGS…` and connects to it over stdio.
pub async fn connect_stdio(args: &[&str]) -> (Client, Recorder) {
    connect_stdio_as(Recorder::default(), args).await
}

/// Starts `skillbox serve ARGS…` and connects `recorder` to it over stdio.
pub async fn connect_stdio_as(recorder: Recorder, args: &[&str]) -> (Client, Recorder) {
    let mut cmd = tokio::process::Command::new(crate::skillbox_bin());
    cmd.arg("serve")
        .args(args)
        .current_dir(crate::repo())
        .envs(crate::hermetic_env());
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn skillbox serve");
    let client = recorder
        .clone()
        .serve(transport)
        .await
        .expect("MCP handshake");
    (client, recorder)
}

/// A client on the stateless 2026-07-28 revision (`server/discover`) at
/// `url`.
pub async fn connect_stateless(recorder: Recorder, url: &str) -> Client {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    recorder
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("server/discover")
}

/// Calls a tool with JSON object arguments.
pub async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    client
        .peer()
        .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(map))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name}: {e}"))
}

/// The text of a result's first content block.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// Asserts that the text of `result` says each of `parts`.
#[track_caller]
pub fn assert_says(result: &CallToolResult, parts: &[&str]) {
    let text = text(result);
    for part in parts {
        assert!(text.contains(part), "the result lacks {part:?}: {text}");
    }
}

/// Asserts that `result` is a tool error whose text says each of `parts`.
#[track_caller]
pub fn assert_tool_error(result: &CallToolResult, parts: &[&str]) {
    assert_eq!(result.is_error, Some(true), "not an error: {result:?}");
    assert_says(result, parts);
}

/// A `skillbox serve --http` child process, killed when dropped.
pub struct HttpServer(pub std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `skillbox serve --http` over the testkit skill (every tool listed),
/// with an audit log in a folder of its own; the folders live as long as
/// this does.
pub struct TestkitServer {
    pub server: HttpServer,
    pub url: String,
    pub audit: std::path::PathBuf,
    _skills: tempfile::TempDir,
    _state: tempfile::TempDir,
}

/// Starts a [`TestkitServer`] with `extra` flags.
pub fn serve_testkit(extra: &[&str]) -> TestkitServer {
    let skills = crate::testkit_skills();
    let state = tempfile::tempdir().expect("temp dir");
    let audit = state.path().join("audit.jsonl");
    let mut args = vec![
        "--skills",
        skills.path().to_str().expect("utf-8 path"),
        "--tools",
        "all",
        "--audit",
        audit.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    let (server, url) = serve_http(&args);
    TestkitServer {
        server,
        url,
        audit,
        _skills: skills,
        _state: state,
    }
}

/// Starts `skillbox serve --http 127.0.0.1:0 ARGS…` (without an audit log
/// unless ARGS name one) from the
/// repository and returns it with the URL it reports.
pub fn serve_http(args: &[&str]) -> (HttpServer, String) {
    serve_http_with_env(args, &[])
}

/// [`serve_http`] with extra environment variables.
pub fn serve_http_with_env(args: &[&str], env: &[(&str, &str)]) -> (HttpServer, String) {
    let (server, url, _) = serve_http_saying(args, env);
    (server, url)
}

/// [`serve_http_with_env`], and every line the server writes to stderr
/// after it listens, for a test that waits for one.
pub fn serve_http_saying(
    args: &[&str],
    env: &[(&str, &str)],
) -> (HttpServer, String, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut server = HttpServer(
        Command::new(crate::skillbox_bin())
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(if args.contains(&"--audit") {
                None
            } else {
                Some("--no-audit")
            })
            .args(args)
            .current_dir(crate::repo())
            .envs(crate::hermetic_env())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn skillbox serve --http"),
    );
    let mut reader = BufReader::new(server.0.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).expect("read stderr") > 0,
            "serve exited before listening"
        );
        if let Some(url) = line.trim().strip_prefix("skillbox: serving MCP at ") {
            let url = url.to_string();
            let (said, lines) = std::sync::mpsc::channel();
            // Drained to the end, so the server never blocks on a full pipe.
            std::thread::spawn(move || {
                for line in reader.lines().map_while(Result::ok) {
                    let _ = said.send(line);
                }
            });
            return (server, url, lines);
        }
    }
}

/// A request as a stateless (2026-07-28) client sends it: the protocol
/// version and method in headers, the client's version, capabilities and
/// name in `_meta`, with `extra_meta` merged in.
pub fn stateless_request(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    mut params: Value,
    extra_meta: Value,
) -> reqwest::RequestBuilder {
    let mut meta = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "skillbox-e2e", "version": "1"},
    });
    if let (Some(meta), Value::Object(extra)) = (meta.as_object_mut(), extra_meta) {
        meta.extend(extra);
    }
    params["_meta"] = meta;
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("mcp-name", name);
    }
    request
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
}

/// A stateless `tools/call`: the JSON-RPC `result`, or why there is none
/// (a transport failure, an HTTP status, a JSON-RPC error) in words.
pub async fn stateless_call(
    http: &reqwest::Client,
    url: &str,
    tool: &str,
    arguments: Value,
    extra_meta: Value,
) -> Result<Value, String> {
    let params = serde_json::json!({"name": tool, "arguments": arguments});
    let response = stateless_request(http, url, "tools/call", params, extra_meta)
        .send()
        .await
        .map_err(|e| format!("transport: {e}"))?;
    let status = response.status();
    let body = response.text().await.map_err(|e| format!("body: {e}"))?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {body}"));
    }
    let reply: Value =
        serde_json::from_str(&body).map_err(|e| format!("not JSON ({e}): {body}"))?;
    match reply.get("result") {
        Some(result) => Ok(result.clone()),
        None => Err(format!("JSON-RPC error: {}", reply["error"])),
    }
}

/// The server's base URL (without `/mcp`).
pub fn base_url(mcp_url: &str) -> &str {
    mcp_url.trim_end_matches("/mcp")
}

/// `GET /metrics`, parsed as the Prometheus text format.
pub async fn scrape(mcp_url: &str, token: Option<&str>) -> prometheus_parse::Scrape {
    let mut request = reqwest::Client::new().get(format!("{}/metrics", base_url(mcp_url)));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET /metrics");
    assert_eq!(response.status(), 200, "GET /metrics");
    let text = response.text().await.expect("metrics body");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("the Prometheus text format")
}

/// The value of the sample `metric` whose labels include all of `labels`
/// (counters and gauges), or `None`.
pub fn sample(
    scrape: &prometheus_parse::Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

/// Waits until the server's gauge `metric` reads `value`, scraping
/// `/metrics` (with `token` when the server needs one) until it does.
pub async fn wait_for_gauge(mcp_url: &str, token: Option<&str>, metric: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = sample(&scrape(mcp_url, token).await, metric, &[]);
        if now == Some(value) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{metric} never reached {value} (it is {now:?})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
