//! One MCP session: the `ServerHandler` that answers a client.

// Logging (`logging/setLevel`) is deprecated from protocol 2026-07-28 on,
// but 2025-11-25 clients still negotiate it, and the server speaks both.
#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::ErrorData as McpError;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use serde_json::{Map, Value};

use super::calls::{ProgressSink, client_name, idempotency_key, with_progress};
use super::host_tools::{self, LOAD_SKILL, READ_SKILL_FILE, RUN_SCRIPT, with_notes};
use super::server::{Server, ToolsMode};
use super::{prompts, resources, results};
use crate::call::{Access, CallError, CallRecord, Caller, Outcome, Target};
use crate::skill::Skill;

const INSTRUCTIONS: &str = "skillbox serves Agent Skills whose tools run in a WebAssembly sandbox.\n\
1. Read load_skill's description: it lists every skill and when to use it.\n\
2. Before a task a skill covers, call load_skill {\"name\": …} and follow the steps it returns.\n\
3. Call the skill's tools (named <skill>__<function>); they appear in the tool list once loaded.\n\
4. read_skill_file reads a skill's references; run_script runs a script a skill ships.\n\
Tools see the user's workspace only if the user granted it; errors say what to change.";

/// A connected client. Cheap to clone; clones share the session's state.
#[derive(Clone)]
pub struct Session {
    server: Arc<Server>,
    /// Skills activated with `load_skill` in this session.
    activated: Arc<Mutex<BTreeSet<String>>>,
    /// Skills the user invoked in this session (their prompt was fetched).
    user_invoked: Arc<Mutex<BTreeSet<String>>>,
    log_level: Arc<Mutex<LoggingLevel>>,
}

fn snapshot(set: &Mutex<BTreeSet<String>>) -> BTreeSet<String> {
    set.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn insert(set: &Mutex<BTreeSet<String>>, name: &str) -> bool {
    set.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string())
}

impl Session {
    pub fn new(server: Arc<Server>) -> Self {
        Session {
            server,
            activated: Arc::new(Mutex::new(BTreeSet::new())),
            user_invoked: Arc::new(Mutex::new(BTreeSet::new())),
            log_level: Arc::new(Mutex::new(LoggingLevel::Warning)),
        }
    }

    /// Who this session is, for the call path's invocation policy.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        Caller {
            client: client_name(context),
            idempotency_key: idempotency_key(context),
            access: Access::Model {
                require_loaded: self.server.options.tools_mode == ToolsMode::Lazy,
                loaded: snapshot(&self.activated),
                user_invoked: snapshot(&self.user_invoked),
            },
        }
    }

    /// The skills whose tools this session lists now.
    fn listed_skills(&self) -> Vec<Arc<Skill>> {
        let catalog = self.server.host.catalog();
        let invoked = snapshot(&self.user_invoked);
        let activated = snapshot(&self.activated);
        catalog
            .skills()
            .filter(|s| {
                invoked.contains(s.name())
                    || match self.server.options.tools_mode {
                        ToolsMode::All => s.model_invocable(),
                        ToolsMode::Lazy => activated.contains(s.name()),
                    }
            })
            .cloned()
            .collect()
    }

    /// Every tool this session lists now.
    pub async fn tools(&self) -> Vec<rmcp::model::Tool> {
        let catalog = self.server.host.catalog();
        let mut tools = host_tools::definitions(&catalog);
        for skill in self.listed_skills() {
            tools.extend(
                self.server
                    .host
                    .tools_of_blocking(&skill)
                    .await
                    .iter()
                    .map(host_tools::skill_tool_definition),
            );
        }
        tools
    }

    async fn call_skill_tool(
        &self,
        name: &str,
        args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let target = Target::Tool {
            name: name.to_string(),
            arguments: Value::Object(args),
        };
        let caller = self.caller(context);
        let call = self.server.host.call(&caller, target, &context.ct);
        match with_progress(ProgressSink::from_context(context), name, call).await {
            Ok(reply) => {
                let Outcome::Value(value) = &reply.outcome else {
                    unreachable!("a tool call returns a value")
                };
                let hint = reply.tool.as_ref().and_then(paging_hint);
                let mut result = results::success(value, self.server.options.output_budget, hint);
                if !reply.notes.is_empty() {
                    result.content.push(rmcp::model::ContentBlock::text(format!(
                        "note: {}",
                        reply.notes.join("\nnote: ")
                    )));
                }
                result
            }
            Err(CallError::UnknownTool { name, why }) => {
                unknown_tool(&name, &why, &self.tools().await)
            }
            Err(e) => results::error(with_notes(e.to_string(), e.notes())),
        }
    }
}

/// The parameters a tool offers for asking for a different part.
fn paging_hint(tool: &crate::skill::SkillTool) -> Option<&'static str> {
    let props = tool.input_schema.get("properties")?.as_object()?;
    [
        ("start", "a later `start` or a smaller `count`"),
        (
            "max-matches",
            "a narrower `pattern` or a smaller `max-matches`",
        ),
        (
            "max-results",
            "a narrower `filter` or a smaller `max-results`",
        ),
        (
            "max-entries",
            "a narrower `glob` or a smaller `max-entries`",
        ),
    ]
    .into_iter()
    .find(|(param, _)| props.contains_key(*param))
    .map(|(_, hint)| hint)
}

fn unknown_tool(name: &str, why: &str, listed: &[rmcp::model::Tool]) -> CallToolResult {
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    results::error(format!(
        "unknown tool `{name}`: {why} Available now: {}. Call load_skill first to see a skill's tools.",
        names.join(", ")
    ))
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_completions()
            .enable_logging()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("skillbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.server.register_peer(context.peer.clone());
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools().await))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let name = request.name.as_ref();
        let host = &self.server.host;
        let result = match name {
            LOAD_SKILL => {
                let started = Instant::now();
                let argument_bytes = crate::call::json_size(&Value::Object(args.clone()));
                let outcome =
                    host_tools::load_skill(&self.server, &args, &snapshot(&self.user_invoked))
                        .await;
                let record = CallRecord {
                    client: client_name(&context),
                    tool: LOAD_SKILL,
                    skill: outcome.as_ref().ok().map(|(s, _)| s.as_ref()),
                    component: None,
                    grants: None,
                    argument_bytes,
                    idempotency_key: None,
                };
                host.record(
                    &record,
                    if outcome.is_ok() { "ok" } else { "error" },
                    started,
                    None,
                    &[],
                );
                match outcome {
                    Ok((skill, result)) => {
                        let newly = insert(&self.activated, skill.name());
                        if newly && self.server.options.tools_mode == ToolsMode::Lazy {
                            let _ = context.peer.notify_tool_list_changed().await;
                        }
                        result
                    }
                    Err(e) => e,
                }
            }
            READ_SKILL_FILE => {
                host_tools::read_skill_file(host.catalog(), args, self.server.options.output_budget)
                    .await
            }
            RUN_SCRIPT => {
                let caller = self.caller(&context);
                host_tools::run_script(
                    &self.server,
                    &caller,
                    &args,
                    &context.ct,
                    ProgressSink::from_context(&context),
                )
                .await
            }
            _ => self.call_skill_tool(name, args, &context).await,
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        resources::list(
            &self.server.host.catalog(),
            request.and_then(|r| r.cursor).as_deref(),
        )
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        resources::read(self.server.host.catalog(), request.uri)
            .await
            .map(Into::into)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        prompts::list(
            &self.server.host.catalog(),
            request.and_then(|r| r.cursor).as_deref(),
        )
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let prompt = prompts::get(
            &self.server.host.catalog(),
            &request.name,
            request.arguments.as_ref(),
        )?;
        // Fetching a skill's prompt is the user invoking it: from now on
        // its tools may run in this session, even if the model may not
        // invoke it on its own.
        if insert(&self.user_invoked, &request.name)
            && self.server.options.tools_mode == ToolsMode::Lazy
        {
            let _ = context.peer.notify_tool_list_changed().await;
        }
        Ok(prompt.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Ok(resources::complete(&self.server.host.catalog(), &request))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.log_level.lock().unwrap_or_else(|e| e.into_inner()) = request.level;
        Ok(())
    }
}
