//! The tools the model can call: skillbox's own (served by the same MCP
//! server code, in-process over an in-memory pipe) and those of external
//! MCP servers, prefixed with their server's name.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, RequestMetaObject, ServerResult, Tool,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};

use super::conversation::ToolDef;
use super::mcp_config::{McpConfig, ServerSpec};
use crate::call::audit::IDEMPOTENCY_META_KEY;
use crate::mcp::{Server, Session};
use crate::sandbox::SideEffect;

type Client = RunningService<RoleClient, ()>;

struct Connection {
    /// `None` for skillbox itself, whose tool names are used as they are.
    prefix: Option<String>,
    client: Client,
}

/// The variables a child MCP server inherits; everything else it gets
/// only by name in its config's `env`.
pub const CHILD_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "TERM", "TMPDIR"];

/// A tool and where it lives.
#[derive(Debug, Clone)]
pub struct HubTool {
    pub def: ToolDef,
    server: usize,
    remote_name: String,
    pub class: SideEffect,
}

impl HubTool {
    /// Whether calling it twice could do something twice.
    pub fn has_side_effects(&self) -> bool {
        self.class != SideEffect::Read
    }
}

/// The result of one call, as the model will read it.
#[derive(Debug, Clone)]
pub struct CallResult {
    pub text: String,
    pub is_error: bool,
}

pub struct ToolHub {
    connections: Vec<Connection>,
}

impl ToolHub {
    /// Connects skillbox in-process and every configured external server.
    pub async fn connect(host: Arc<Server>, config: Option<&McpConfig>) -> Result<Self, String> {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(server) = Session::new(host).serve(server_io).await {
                let _ = server.waiting().await;
            }
        });
        let own = ()
            .serve(client_io)
            .await
            .map_err(|e| format!("cannot start skillbox's MCP server: {e}"))?;
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
                            format!("MCP server `{name}`: cannot start `{command}` ({e})")
                        })?;
                    ().serve(transport).await
                }
                ServerSpec::Http { url } => {
                    ().serve(StreamableHttpClientTransport::from_uri(url.as_str()))
                        .await
                }
            }
            .map_err(|e| format!("MCP server `{name}`: the handshake failed ({e})"))?;
            connections.push(Connection {
                prefix: Some(name.clone()),
                client,
            });
        }
        Ok(ToolHub { connections })
    }

    /// Tells skillbox's own server that the user invoked `skill`, the way
    /// an MCP client does: by fetching the skill's prompt.
    pub async fn invoke_skill(&self, skill: &str) -> Result<(), String> {
        let mut params = rmcp::model::GetPromptRequestParams::new(skill);
        params.arguments = None;
        self.connections[0]
            .client
            .peer()
            .get_prompt(params)
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot invoke skill `{skill}`: {e}"))
    }

    /// Every tool now, by model-facing name. Two tools with one name are
    /// refused: the model could not tell them apart.
    pub async fn list(&self) -> Result<BTreeMap<String, HubTool>, String> {
        let mut out: BTreeMap<String, HubTool> = BTreeMap::new();
        for (server, connection) in self.connections.iter().enumerate() {
            let tools = connection
                .client
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| format!("cannot list the tools of {}: {e}", describe(connection)))?;
            for tool in tools {
                let hub_tool = to_hub_tool(&tool, server, connection.prefix.as_deref());
                if let Some(existing) = out.get(&hub_tool.def.name) {
                    return Err(format!(
                        "two tools are named `{}` (from {} and {}); rename the server in --mcp-config",
                        hub_tool.def.name,
                        describe(&self.connections[existing.server]),
                        describe(connection)
                    ));
                }
                out.insert(hub_tool.def.name.clone(), hub_tool);
            }
        }
        Ok(out)
    }

    /// Calls a tool, giving up (and cancelling it) after `timeout`. An
    /// idempotency key travels in the request's `_meta` under
    /// [`IDEMPOTENCY_META_KEY`], for servers that record or honour it.
    pub async fn call(
        &self,
        tool: &HubTool,
        arguments: Map<String, Value>,
        timeout: Duration,
        idempotency_key: Option<&str>,
    ) -> CallResult {
        let peer = self.connections[tool.server].client.peer();
        let params = CallToolRequestParams::new(tool.remote_name.clone()).with_arguments(arguments);
        let mut options = PeerRequestOptions::with_timeout(timeout);
        if let Some(key) = idempotency_key {
            let mut meta = RequestMetaObject::new();
            meta.insert(IDEMPOTENCY_META_KEY.to_string(), Value::from(key));
            options = options.with_meta(meta);
        }
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
        match handle.await_response().await {
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

    pub async fn close(self) {
        for connection in self.connections {
            let _ = connection.client.cancel().await;
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
    let class = if tool.name == crate::mcp::host_tools::RUN_SCRIPT && prefix.is_none() {
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
pub fn check_arguments(schema: &Value, args: &Map<String, Value>) -> Result<(), String> {
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
