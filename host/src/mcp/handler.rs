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
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, DiscoverResult, GetPromptRequestParams,
    GetPromptResponse, GetSkillRequestParams, GetSkillResult, GetTaskParams, GetTaskResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListSkillsResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscriptionFilter, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::calls::{ProgressSink, client_name, idempotency_key, trace_context};
use super::confirm::{self, Asked};
use super::host_tools::{self, LOAD_SKILL, READ_SKILL_FILE, RUN_SCRIPT, with_notes};
use super::server::{Shared, ToolsMode};
use super::{prompts, resources, results, skills_ext};
use crate::call::{Access, CallError, CallRecord, CallReply, Caller, Outcome, Target};
use crate::skill::Skill;
use crate::skill::resident::FIND_SKILLS;

const INSTRUCTIONS: &str = "skillbox serves Agent Skills whose tools run in a WebAssembly sandbox.\n\
1. Read load_skill's description: it lists every skill and when to use it.\n\
2. Before a task a skill covers, call load_skill {\"name\": …} and follow the steps it returns.\n\
3. Call the skill's tools (named <skill>__<function>); they appear in the tool list once loaded.\n\
4. read_skill_file reads a skill's references; run_script runs a script a skill ships.\n\
Tools see the user's workspace only if the user granted it; errors say what to change.";

/// The same guidance for the stateless 2026-07-28 revision, where the tool
/// list is complete from the start and never changes with a request.
const INSTRUCTIONS_STATELESS: &str = "skillbox serves Agent Skills whose tools run in a WebAssembly sandbox.\n\
1. Read load_skill's description: it lists every skill and when to use it (the Skills extension lists them too).\n\
2. Before a task a skill covers, call load_skill {\"name\": …} and follow the steps it returns.\n\
3. Call the skill's tools (named <skill>__<function>); every skill's tools are already in the tool list.\n\
4. read_skill_file reads a skill's references; run_script runs a script a skill ships.\n\
Tools see the user's workspace only if the user granted it; errors say what to change.";

/// The first revision whose tool list must not vary per connection.
const STATELESS_REVISION: &str = "2026-07-28";

/// How long a client may cache a list on the stateless revision: about the
/// reload poll, after which a skill change may have altered it.
const LIST_TTL_MS: u64 = 5_000;

/// Whether the request speaks the stateless revision (or later).
fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= STATELESS_REVISION)
}

/// Who is calling, for the per-client share of call slots: the subject of
/// a verified OAuth token, else the client's network address. Over stdio
/// there is one client and no share.
#[cfg(feature = "http")]
fn principal(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    if let Some(subject) = parts.extensions.get::<super::oauth::Subject>() {
        return Some(format!("sub:{}", subject.0));
    }
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<super::http_guard::ClientAddr>>()
        .map(|info| format!("ip:{}", info.0.0.ip()))
}

/// Without the HTTP transport every client is a byte stream's one client.
#[cfg(not(feature = "http"))]
fn principal(_context: &RequestContext<RoleServer>) -> Option<String> {
    None
}

/// Severity rank of a logging level, lowest first.
fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A connected client. Cheap to clone; clones share the session's state.
#[derive(Clone)]
pub struct Session {
    server: Arc<Shared>,
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
    /// A session of `server`, before the client's `initialize`.
    pub fn new(server: Arc<Shared>) -> Self {
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
                require_loaded: self.server.options.tools_mode == ToolsMode::Lazy
                    && !stateless(context),
                loaded: snapshot(&self.activated),
                user_invoked: snapshot(&self.user_invoked),
            },
            approval: Default::default(),
            principal: principal(context),
            trace: trace_context(context),
        }
    }

    /// The skills whose tools this session lists now. On the stateless
    /// revision the list is the same for every client and request: every
    /// skill the model may use.
    fn listed_skills(&self, stable: bool) -> Vec<Arc<Skill>> {
        let catalog = self.server.host.catalog();
        if stable {
            return catalog.model_visible().cloned().collect();
        }
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

    /// Every tool this session lists now (`stable`: the stateless
    /// revision's fixed list).
    pub async fn tools(&self, stable: bool) -> Vec<rmcp::model::Tool> {
        let host = &self.server.host;
        let catalog = host.catalog();
        let mut tools = host_tools::definitions(
            &catalog,
            host.options.read_only,
            self.server.options.catalog_budget,
        );
        let skills = self.listed_skills(stable);
        for skill_tools in host.tools_of_many(&skills).await {
            tools.extend(
                skill_tools
                    .iter()
                    .filter(|t| host.serves(t))
                    .map(host_tools::skill_tool_definition),
            );
        }
        tools
    }

    /// Sends a log message to this client when its level lets it through.
    async fn log(
        &self,
        context: &RequestContext<RoleServer>,
        level: LoggingLevel,
        logger: &str,
        text: String,
    ) {
        // On the stateless revision each request says its own level, and a
        // request that says none gets no log messages.
        let threshold = if stateless(context) {
            context.meta.log_level()
        } else {
            Some(*self.log_level.lock().unwrap_or_else(|e| e.into_inner()))
        };
        let Some(threshold) = threshold else { return };
        if level_rank(level) < level_rank(threshold) || text.is_empty() {
            return;
        }
        let mut param = LoggingMessageNotificationParam::new(level, Value::from(text));
        param.logger = Some(logger.to_string());
        let _ = context.peer.notify_logging_message(param).await;
    }

    /// Runs a skill tool or script for this client: the user's
    /// confirmation first when the policy asks for it, then the call on the
    /// host's one path, as a task when it runs long and the client declared
    /// the tasks extension.
    async fn execute(
        &self,
        target: Target,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut caller = self.caller(context);
        let host = self.server.host.clone();
        if let Some(question) = host.confirmation(&caller, &target).await {
            let seal = &self.server.seal;
            let answered = confirm::answer_in(
                seal,
                &question,
                request.input_responses.as_ref(),
                request.request_state.as_deref(),
            );
            caller.approval = match answered {
                Some(approval) => approval,
                None => match confirm::ask(seal, &question, stateless(context), context).await {
                    Asked::Answer(approval) => approval,
                    Asked::InputRequired(result) => return Ok(result.into()),
                    Asked::CannotAsk => caller.approval,
                },
            };
        }
        let label = match &target {
            Target::Tool { name, .. } => name.clone(),
            Target::Script { skill, script, .. } => format!("{RUN_SCRIPT} {skill}/{script}"),
        };
        let cancel = CancellationToken::new();
        let work = {
            let (session, context, cancel) = (self.clone(), context.clone(), cancel.clone());
            async move {
                let reply = host.call(&caller, target, &cancel).await;
                session.reply(reply, &context).await
            }
        };
        let may_promote = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        self.server
            .tasks
            .run_or_promote(
                &label,
                may_promote.then(|| self.server.host.longest_call()),
                work,
                cancel,
                &context.ct,
                ProgressSink::from_context(context),
            )
            .await
    }

    /// A finished call as the client reads it.
    async fn reply(
        &self,
        reply: Result<CallReply, CallError>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        match reply {
            Ok(reply) => {
                self.log(
                    context,
                    LoggingLevel::Debug,
                    "skillbox.guest",
                    reply.stderr.clone(),
                )
                .await;
                for warning in &reply.warnings {
                    self.log(context, LoggingLevel::Warning, "skillbox", warning.clone())
                        .await;
                }
                let value = match &reply.outcome {
                    Outcome::Value(value) => value,
                    Outcome::Script(outcome) => {
                        return Ok(host_tools::script_result(
                            &self.server,
                            outcome,
                            &reply.notes,
                        ));
                    }
                };
                let hint = reply.tool.as_ref().and_then(|t| t.paging.as_deref());
                let mut result = results::success(value, self.server.options.output_budget, hint);
                if !reply.warnings.is_empty() {
                    result.content.push(rmcp::model::ContentBlock::text(format!(
                        "note: {}",
                        reply.warnings.join("\nnote: ")
                    )));
                }
                Ok(result)
            }
            // An unknown tool is a protocol error (-32602), with the
            // teaching text in its message.
            Err(CallError::UnknownTool { name, why }) => {
                let listed = self.tools(stateless(context)).await;
                Err(unknown_tool(&name, &why, &listed))
            }
            Err(e) => {
                // Refusals the host enforced are worth a warning beside the
                // error the model reads.
                let host_event = matches!(
                    &e,
                    CallError::Moved { .. }
                        | CallError::NeedsConfirmation { .. }
                        | CallError::Declined { .. }
                        | CallError::Sandbox {
                            error: crate::sandbox::SandboxError::Denied { .. }
                                | crate::sandbox::SandboxError::Quota { .. },
                            ..
                        }
                );
                if host_event {
                    self.log(context, LoggingLevel::Warning, "skillbox", e.to_string())
                        .await;
                }
                Ok(results::error(with_notes(e.to_string(), e.notes())))
            }
        }
    }
}

fn unknown_tool(name: &str, why: &str, listed: &[rmcp::model::Tool]) -> McpError {
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    McpError::invalid_params(
        format!(
            "unknown tool `{name}`: {why} Available now: {}. Call load_skill first to see a skill's tools.",
            names.join(", ")
        ),
        Some(serde_json::json!({"tool": name})),
    )
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
            .enable_skills_with_directory_read()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("skillbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.server.register_peer(context.peer.clone());
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let _ = context;
        let info = self.get_info().with_instructions(INSTRUCTIONS_STATELESS);
        let mut result =
            DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), info);
        result.ttl_ms = LIST_TTL_MS;
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let stable = stateless(&context);
        let mut result = ListToolsResult::with_all_items(self.tools(stable).await);
        if stable {
            result.ttl_ms = Some(LIST_TTL_MS);
            result.cache_scope = Some(CacheScope::Private);
        }
        Ok(result)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.server.changes();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let sink = context.sink();
                        let accepted = context.accepted();
                        if accepted.tools_list_changed == Some(true) {
                            let _ = sink.notify_tool_list_changed().await;
                        }
                        if accepted.resources_list_changed == Some(true) {
                            let _ = sink.notify_resource_list_changed().await;
                        }
                        if accepted.prompts_list_changed == Some(true) {
                            let _ = sink.notify_prompt_list_changed().await;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        skills_ext::list(self.server.host.catalog(), request.and_then(|r| r.cursor)).await
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        skills_ext::get(self.server.host.catalog(), request.uri).await
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceDirectoryResult, McpError> {
        skills_ext::directory(self.server.host.catalog(), request.uri).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.server
            .tasks
            .manager
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.server
            .tasks
            .manager
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.server.tasks.manager.cancel_task(&request.task_id)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.clone().unwrap_or_default();
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
                    trace: trace_context(&context),
                    tool_resolved: true,
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
                        if newly
                            && self.server.options.tools_mode == ToolsMode::Lazy
                            && !stateless(&context)
                        {
                            let _ = context.peer.notify_tool_list_changed().await;
                        }
                        result
                    }
                    Err(e) => e,
                }
            }
            FIND_SKILLS => host_tools::find_skills(&host.catalog(), &args),
            READ_SKILL_FILE => {
                host_tools::read_skill_file(host.catalog(), args, self.server.options.output_budget)
                    .await
            }
            RUN_SCRIPT => match host_tools::script_target(&args) {
                Ok(target) => return self.execute(target, &request, &context).await,
                Err(result) => result,
            },
            _ => {
                let target = Target::Tool {
                    name: name.to_string(),
                    arguments: Value::Object(args),
                };
                return self.execute(target, &request, &context).await;
            }
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
            && !stateless(&context)
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
