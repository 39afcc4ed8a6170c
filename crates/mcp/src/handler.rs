//! The protocol side of a session: rmcp's `ServerHandler`, each request
//! mapped onto [`Session`] (session.rs) or the module that answers it.

// Logging (`logging/setLevel`) is deprecated from protocol 2026-07-28 on,
// but 2025-11-25 clients still negotiate it, and the server speaks both.
#![allow(deprecated)]

use rmcp::ErrorData as McpError;
use rmcp::ServerHandler;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, DiscoverResult, GetPromptRequestParams, GetPromptResponse,
    GetSkillRequestParams, GetSkillResult, GetTaskParams, GetTaskResult, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceDirectoryRequestParams,
    ReadResourceDirectoryResult, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscriptionFilter, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};

use super::session::{Session, stateless};
use super::{prompts, resources, skills_ext};

const INSTRUCTIONS: &str = "skillbox serves Agent Skills whose tools run in a WebAssembly sandbox.\n\
1. Read load_skill's description: it lists every skill and when to use it.\n\
2. Before a task a skill covers, call load_skill {\"name\": …} and follow the steps it returns.\n\
3. Call the skill's tools (named <skill>__<function>); they appear in the tool list once loaded.\n\
4. read_skill_file reads a skill's references; run_script runs a script a skill ships;\n   run_code runs Python a skill's steps show (give its skill), in the same sandbox.\n\
Tools see the user's workspace only if the user granted it; errors say what to change.";

/// The same guidance for the stateless 2026-07-28 revision, where the tool
/// list is complete from the start and never changes with a request.
const INSTRUCTIONS_STATELESS: &str = "skillbox serves Agent Skills whose tools run in a WebAssembly sandbox.\n\
1. Read load_skill's description: it lists every skill and when to use it (the Skills extension lists them too).\n\
2. Before a task a skill covers, call load_skill {\"name\": …} and follow the steps it returns.\n\
3. Call the skill's tools (named <skill>__<function>); every skill's tools are already in the tool list.\n\
4. read_skill_file reads a skill's references; run_script runs a script a skill ships;\n   run_code runs Python a skill's steps show (give its skill), in the same sandbox.\n\
Tools see the user's workspace only if the user granted it; errors say what to change.";

/// How long a client may cache a list on the stateless revision: about the
/// reload poll, after which a skill change may have altered it.
const LIST_TTL_MS: u64 = 5_000;

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
        if !stable {
            self.catch_up(&context).await;
        }
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
            .get(&request.task_id)
            .await
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.server
            .tasks
            .update(&request.task_id, request.input_responses)
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.server.tasks.cancel(&request.task_id).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.dispatch_call(request, &context).await
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
        self.invoke_prompt(request, &context).await
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
        self.set_log_level(request.level);
        Ok(())
    }
}
