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

use super::calls::{ProgressSink, client_name, idempotency_key, supervise};
use super::host::{CallRecord, Host, ToolsMode};
use super::host_tools::{self, LOAD_SKILL, READ_SKILL_FILE, RUN_SCRIPT, with_notes};
use super::{prompts, resources, results};
use crate::skill::policy;
use crate::skill::tools::split_tool_name;

const INSTRUCTIONS: &str = "skillbox serves Agent Skills whose tools run in a WebAssembly sandbox.\n\
1. Read load_skill's description: it lists every skill and when to use it.\n\
2. Before a task a skill covers, call load_skill {\"name\": …} and follow the steps it returns.\n\
3. Call the skill's tools (named <skill>__<function>); they appear in the tool list once loaded.\n\
4. read_skill_file reads a skill's references; run_script runs a script a skill ships.\n\
Tools see the user's workspace only if the user granted it; errors say what to change.";

/// A connected client. Cheap to clone; clones share the session's state.
#[derive(Clone)]
pub struct Session {
    host: Arc<Host>,
    /// Skills activated with `load_skill` in this session (lazy mode).
    activated: Arc<Mutex<BTreeSet<String>>>,
    log_level: Arc<Mutex<LoggingLevel>>,
}

impl Session {
    pub fn new(host: Arc<Host>) -> Self {
        Session {
            host,
            activated: Arc::new(Mutex::new(BTreeSet::new())),
            log_level: Arc::new(Mutex::new(LoggingLevel::Warning)),
        }
    }

    fn activated(&self) -> BTreeSet<String> {
        self.activated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every tool this session lists now.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        let catalog = self.host.catalog();
        let mut tools = host_tools::definitions(&catalog);
        let listed: Vec<_> = match self.host.options.tools_mode {
            ToolsMode::All => catalog.model_visible().cloned().collect(),
            ToolsMode::Lazy => {
                let activated = self.activated();
                catalog
                    .skills()
                    .filter(|s| activated.contains(s.name()))
                    .cloned()
                    .collect()
            }
        };
        for skill in listed {
            tools.extend(
                self.host
                    .tools_of(&skill)
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
        let catalog = self.host.catalog();
        let Some((skill_name, _)) = split_tool_name(name) else {
            return unknown_tool(name, &self.tools());
        };
        let Some(skill) = catalog.get(skill_name).cloned() else {
            return unknown_tool(name, &self.tools());
        };
        let skill_tools = self.host.tools_of(&skill);
        let Some(tool) = skill_tools.iter().find(|t| t.name == name) else {
            return unknown_tool(name, &self.tools());
        };
        let resolved = policy::grants(&skill, &self.host.options.policy);
        let limits = policy::limits(&skill, tool.effect.into(), &self.host.options.overrides);
        let arguments = Value::Object(args);
        let record = CallRecord {
            client: client_name(context),
            tool: name,
            skill: Some(&skill),
            component: Some((&tool.component_path, &tool.component.digest)),
            grants: Some(resolved.grants.summary()),
            arguments: &arguments,
            idempotency_key: idempotency_key(context),
        };
        let call = async {
            let outcome = self
                .host
                .sandbox
                .call(
                    &tool.component,
                    &tool.function,
                    &arguments,
                    &resolved.grants,
                    &limits,
                )
                .await?;
            let usage = outcome.usage;
            Ok((outcome.value, usage))
        };
        match supervise(
            &self.host,
            &record,
            &context.ct,
            ProgressSink::from_context(context),
            call,
        )
        .await
        {
            Ok(value) => {
                results::success(&value, self.host.options.output_budget, paging_hint(tool))
            }
            Err(e) => results::error(with_notes(e.to_string(), &resolved.notes)),
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

fn unknown_tool(name: &str, listed: &[rmcp::model::Tool]) -> CallToolResult {
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    results::error(format!(
        "unknown tool `{name}`. Available now: {}. Skill tools are named <skill>__<function>; call load_skill first to see a skill's tools.",
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
        self.host.register_peer(context.peer.clone());
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let name = request.name.as_ref();
        let catalog = self.host.catalog();
        let result = match name {
            LOAD_SKILL => {
                let started = Instant::now();
                let arguments = Value::Object(args.clone());
                let outcome = host_tools::load_skill(&self.host, &catalog, &args);
                let record = CallRecord {
                    client: client_name(&context),
                    tool: LOAD_SKILL,
                    skill: outcome.as_ref().ok().map(|(s, _)| s.as_ref()),
                    component: None,
                    grants: None,
                    arguments: &arguments,
                    idempotency_key: None,
                };
                self.host.record(
                    &record,
                    if outcome.is_ok() { "ok" } else { "error" },
                    started,
                    None,
                );
                match outcome {
                    Ok((skill, result)) => {
                        let newly = self
                            .activated
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(skill.name().to_string());
                        if newly && self.host.options.tools_mode == ToolsMode::Lazy {
                            let _ = context.peer.notify_tool_list_changed().await;
                        }
                        result
                    }
                    Err(e) => e,
                }
            }
            READ_SKILL_FILE => {
                host_tools::read_skill_file(&catalog, &args, self.host.options.output_budget)
            }
            RUN_SCRIPT => {
                host_tools::run_script(
                    &self.host,
                    &catalog,
                    &args,
                    client_name(&context),
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
            &self.host.catalog(),
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
        resources::read(&self.host.catalog(), &request.uri).map(Into::into)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        prompts::list(
            &self.host.catalog(),
            request.and_then(|r| r.cursor).as_deref(),
        )
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        prompts::get(
            &self.host.catalog(),
            &request.name,
            request.arguments.as_ref(),
        )
        .map(Into::into)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Ok(resources::complete(&self.host.catalog(), &request))
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
