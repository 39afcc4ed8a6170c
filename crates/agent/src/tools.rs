//! The tools the model can call: skillbox's own (served by the same MCP
//! server code, in-process over an in-memory pipe) and those of external
//! MCP servers, prefixed with their server's name.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelTaskParams, CancelTaskRequest,
    ClientCapabilities, ClientRequest, GetTaskParams, GetTaskRequest, RequestMetaObject,
    ServerResult, Task, TaskPayload, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};

use super::approve::AgentClient;
use super::conversation::ToolDef;
use super::mcp_config::{McpConfig, ServerSpec};
use crate::sandbox::SideEffect;
use skillbox_call::audit::IDEMPOTENCY_META_KEY;
use skillbox_mcp::{Session, Shared};

type Client = RunningService<RoleClient, AgentClient>;

/// Calls that may run longer than this ask for a task: the server answers
/// at once with a task id, and the agent polls it, so a long call holds no
/// request open and can be cancelled on the server when the agent gives up.
pub(crate) const TASK_AFTER: Duration = Duration::from_secs(15);

struct Connection {
    /// `None` for skillbox itself, whose tool names are used as they are.
    prefix: Option<String>,
    client: Client,
}

/// The variables a child MCP server inherits; everything else it gets
/// only by name in its config's `env`.
pub(crate) const CHILD_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "TERM", "TMPDIR"];

/// A tool and where it lives.
#[derive(Debug, Clone)]
pub(crate) struct HubTool {
    pub def: ToolDef,
    server: usize,
    remote_name: String,
    pub class: SideEffect,
}

impl HubTool {
    /// Whether calling it twice could do something twice.
    pub(crate) fn has_side_effects(&self) -> bool {
        self.class != SideEffect::Read
    }
}

/// The result of one call, as the model will read it.
#[derive(Debug, Clone)]
pub(crate) struct CallResult {
    pub text: String,
    pub is_error: bool,
}

/// Why the agent's tools are not available. A fault in the run's own
/// configuration is the user's to fix (exit 2); a server that fails while
/// running is a runtime failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Server(String),
}

pub(crate) struct ToolHub {
    connections: Vec<Connection>,
    /// Answers the servers' confirmation questions.
    client: AgentClient,
}

impl ToolHub {
    /// Connects skillbox in-process and every configured external server;
    /// `client` answers their confirmation questions.
    pub(crate) async fn connect(
        host: Arc<Shared>,
        config: Option<&McpConfig>,
        client: AgentClient,
        dry_run: skillbox_call::DryRun,
    ) -> Result<Self, HubError> {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(server) = Session::with_dry_run(host, dry_run).serve(server_io).await {
                let _ = server.waiting().await;
            }
        });
        let own =
            client.clone().serve(client_io).await.map_err(|e| {
                HubError::Server(format!("cannot start skillbox's MCP server: {e}"))
            })?;
        let mut connections = vec![Connection {
            prefix: None,
            client: own,
        }];
        for (name, spec) in config.map(|c| &c.mcp_servers).into_iter().flatten() {
            let client = match spec {
                ServerSpec::Stdio { command, args, env } => {
                    let mut cmd = tokio::process::Command::new(command);
                    // A child server gets a minimal environment plus what
                    // its config names: never the provider keys or tokens
                    // this process holds.
                    cmd.args(args).env_clear();
                    for key in CHILD_ENV {
                        if let Some(value) = std::env::var_os(key) {
                            cmd.env(key, value);
                        }
                    }
                    cmd.envs(env);
                    let (transport, _) = TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .map_err(|e| {
                            HubError::Config(format!(
                                "MCP server `{name}`: cannot start `{command}` ({e}); check \
                                 `command` in --mcp-config"
                            ))
                        })?;
                    client.clone().serve(transport).await
                }
                ServerSpec::Http { url } => {
                    client
                        .clone()
                        .serve(StreamableHttpClientTransport::from_uri(url.as_str()))
                        .await
                }
            }
            .map_err(|e| {
                HubError::Server(format!("MCP server `{name}`: the handshake failed ({e})"))
            })?;
            connections.push(Connection {
                prefix: Some(name.clone()),
                client,
            });
        }
        Ok(ToolHub {
            connections,
            client,
        })
    }

    /// A confirmation refused since the last look because no one could
    /// answer it.
    pub(crate) fn take_refusal(&self) -> Option<String> {
        self.client.take_refusal()
    }

    /// Tells skillbox's own server that the user invoked `skill`, the way
    /// an MCP client does: by fetching the skill's prompt.
    pub(crate) async fn invoke_skill(&self, skill: &str) -> Result<(), HubError> {
        let mut params = rmcp::model::GetPromptRequestParams::new(skill);
        params.arguments = None;
        self.connections[0]
            .client
            .peer()
            .get_prompt(params)
            .await
            .map(|_| ())
            .map_err(|e| HubError::Server(format!("cannot invoke skill `{skill}`: {e}")))
    }

    /// Every tool now, by model-facing name. Two tools with one name are
    /// refused: the model could not tell them apart.
    pub(crate) async fn list(&self) -> Result<BTreeMap<String, HubTool>, HubError> {
        let mut out: BTreeMap<String, HubTool> = BTreeMap::new();
        for (server, connection) in self.connections.iter().enumerate() {
            let tools = connection
                .client
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| {
                    HubError::Server(format!(
                        "cannot list the tools of {}: {e}",
                        describe(connection)
                    ))
                })?;
            for tool in tools {
                let hub_tool = to_hub_tool(&tool, server, connection.prefix.as_deref());
                if let Some(existing) = out.get(&hub_tool.def.name) {
                    return Err(HubError::Config(format!(
                        "two tools are named `{}` (from {} and {}); rename the server in --mcp-config",
                        hub_tool.def.name,
                        describe(&self.connections[existing.server]),
                        describe(connection)
                    )));
                }
                out.insert(hub_tool.def.name.clone(), hub_tool);
            }
        }
        Ok(out)
    }

    /// Calls a tool, giving up (and cancelling it) after `timeout`. An
    /// idempotency key travels in the request's `_meta` under
    /// [`IDEMPOTENCY_META_KEY`], for servers that record or honour it.
    pub(crate) async fn call(
        &self,
        tool: &HubTool,
        arguments: Map<String, Value>,
        timeout: Duration,
        idempotency_key: Option<&str>,
    ) -> CallResult {
        let peer = self.connections[tool.server].client.peer();
        let params = CallToolRequestParams::new(tool.remote_name.clone()).with_arguments(arguments);
        let mut meta = RequestMetaObject::new();
        if let Some(key) = idempotency_key {
            meta.insert(IDEMPOTENCY_META_KEY.to_string(), Value::from(key));
        }
        let as_task = timeout > TASK_AFTER;
        if as_task {
            meta.set_client_capabilities(task_capabilities());
        }
        let options = PeerRequestOptions::with_timeout(timeout).with_meta(meta.clone());
        let handle = match peer
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                options,
            )
            .await
        {
            Ok(h) => h,
            Err(e) => {
                return CallResult {
                    text: format!(
                        "`{}` could not be called ({e}): its MCP server may have stopped. Use another tool or finish with what you have.",
                        tool.def.name
                    ),
                    is_error: true,
                };
            }
        };
        let started = std::time::Instant::now();
        let mut response = handle.await_response().await;
        if let Ok(ServerResult::CreateTaskResult(created)) = &response {
            let left = timeout.saturating_sub(started.elapsed());
            response = follow_task(peer, &tool.def.name, &created.task, left, meta).await;
        }
        match response {
            Ok(ServerResult::CallToolResult(result)) => {
                let mut text: Vec<String> = result
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect();
                if text.is_empty()
                    && let Some(structured) = &result.structured_content
                {
                    text.push(structured.to_string());
                }
                CallResult {
                    text: text.join("\n"),
                    is_error: result.is_error == Some(true),
                }
            }
            Ok(other) => CallResult {
                text: format!("the server answered something other than a tool result: {other:?}"),
                is_error: true,
            },
            // A protocol error (an unknown tool, bad params) carries the
            // server's teaching text.
            Err(ServiceError::McpError(error)) => CallResult {
                text: error.message.to_string(),
                is_error: true,
            },
            Err(ServiceError::Timeout { timeout }) => CallResult {
                text: format!(
                    "timeout: the tool did not answer within {} ms and was cancelled. Ask for less, or try another approach.",
                    timeout.as_millis()
                ),
                is_error: true,
            },
            Err(e) => CallResult {
                text: format!(
                    "the call to `{}` failed ({e}): the MCP server did not answer it. Try once more, or use another tool.",
                    tool.def.name
                ),
                is_error: true,
            },
        }
    }

    pub(crate) async fn close(self) {
        for connection in self.connections {
            let _ = connection.client.cancel().await;
        }
    }
}

/// What a request says about the agent when it may take a task.
fn task_capabilities() -> ClientCapabilities {
    ClientCapabilities::builder()
        .enable_elicitation()
        .enable_tasks()
        .build()
}

/// Polls a task until it ends or `left` runs out (then cancels it), showing
/// its status on stderr, and returns its outcome as a `tools/call` answer.
async fn follow_task(
    peer: &Peer<RoleClient>,
    label: &str,
    task: &Task,
    left: Duration,
    meta: RequestMetaObject,
) -> Result<ServerResult, ServiceError> {
    let deadline = tokio::time::Instant::now() + left;
    let poll = Duration::from_millis(task.poll_interval_ms.unwrap_or(500).clamp(50, 5_000));
    let request = |r: ClientRequest| {
        let options =
            PeerRequestOptions::with_timeout(Duration::from_secs(30)).with_meta(meta.clone());
        async move {
            peer.send_request_with_option(r, options)
                .await?
                .await_response()
                .await
        }
    };
    let mut shown = None;
    loop {
        if tokio::time::Instant::now() >= deadline {
            let cancel = CancelTaskRequest::new(CancelTaskParams::new(task.task_id.clone()));
            let _ = request(ClientRequest::CancelTaskRequest(cancel)).await;
            return Err(ServiceError::Timeout { timeout: left });
        }
        tokio::time::sleep(poll.min(deadline - tokio::time::Instant::now())).await;
        let get = GetTaskRequest::new(GetTaskParams::new(task.task_id.clone()));
        let ServerResult::GetTaskResult(now) = request(ClientRequest::GetTaskRequest(get)).await?
        else {
            return Err(ServiceError::UnexpectedResponse);
        };
        let status = now.task.task.status_message.clone();
        if status.is_some() && status != shown {
            eprintln!(
                "skillbox: {label} (task): {}",
                status.as_deref().unwrap_or_default()
            );
            shown = status;
        }
        match now.task.payload {
            TaskPayload::Completed { result } => {
                return serde_json::from_value::<CallToolResult>(Value::Object(result))
                    .map(ServerResult::CallToolResult)
                    .map_err(|_| ServiceError::UnexpectedResponse);
            }
            TaskPayload::Failed { error } => {
                return Err(ServiceError::McpError(
                    serde_json::from_value(Value::Object(error))
                        .map_err(|_| ServiceError::UnexpectedResponse)?,
                ));
            }
            TaskPayload::Cancelled => return Err(ServiceError::Cancelled { reason: None }),
            _ => {}
        }
    }
}

fn describe(connection: &Connection) -> String {
    match &connection.prefix {
        None => "skillbox".to_string(),
        Some(p) => format!("MCP server `{p}`"),
    }
}

fn to_hub_tool(tool: &Tool, server: usize, prefix: Option<&str>) -> HubTool {
    let name = match prefix {
        None => tool.name.to_string(),
        Some(p) => format!("{p}__{}", tool.name),
    };
    let annotations = tool.annotations.as_ref();
    let runs_code = [
        skillbox_mcp::host_tools::RUN_SCRIPT,
        skillbox_mcp::host_tools::RUN_CODE,
    ]
    .contains(&tool.name.as_ref());
    let class = if runs_code && prefix.is_none() {
        SideEffect::Script
    } else if annotations.and_then(|a| a.read_only_hint) == Some(true) {
        SideEffect::Read
    } else if annotations.and_then(|a| a.destructive_hint) == Some(true) {
        SideEffect::Destructive
    } else {
        SideEffect::Write
    };
    HubTool {
        def: ToolDef {
            name,
            description: tool.description.as_deref().unwrap_or_default().to_string(),
            input_schema: Value::Object((*tool.input_schema).clone()),
        },
        server,
        remote_name: tool.name.to_string(),
        class,
    }
}

/// Checks arguments against the top level of a tool's JSON Schema
/// (required keys, unknown keys, basic types), so a model gets a precise
/// correction even from servers that answer vaguely. Skillbox's own tools
/// check fully on the server side too.
pub(crate) fn check_arguments(schema: &Value, args: &Map<String, Value>) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if !args.contains_key(key) {
                return Err(format!("`{key}` is required but missing"));
            }
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false))
        && let Some(properties) = properties
        && let Some(unknown) = args.keys().find(|k| !properties.contains_key(*k))
    {
        let known: Vec<&str> = properties.keys().map(String::as_str).collect();
        return Err(format!(
            "`{unknown}` is not a parameter of this tool; it takes: {}",
            known.join(", ")
        ));
    }
    for (key, value) in args {
        let Some(expected) = properties
            .and_then(|p| p.get(key))
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let ok = match expected {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => true,
        };
        if !ok {
            return Err(format!("`{key}` must be of type {expected}; got {value}"));
        }
    }
    Ok(())
}
