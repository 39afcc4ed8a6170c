//! One MCP session's state and what it does: who the caller is, which
//! tools it lists now, the host tools, and a skill call from the user's
//! confirmation to the reply. `handler.rs` maps the protocol onto it.

// Logging (`logging/setLevel`) is deprecated from protocol 2026-07-28 on,
// but 2025-11-25 clients still negotiate it, and the server speaks both.
#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, LoggingLevel, LoggingMessageNotificationParam,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::calls::{ProgressSink, client_name, idempotency_key, trace_context};
use super::confirm::ClientAsker;
use super::host_tools::{self, LOAD_SKILL, READ_SKILL_FILE, RUN_CODE, RUN_SCRIPT, with_notes};
use super::server::{Shared, ToolsMode};
use super::{prompts, results};
use crate::skill::Skill;
use crate::skill::resident::FIND_SKILLS;
use skillbox_call::{Access, Asker, CallError, CallReply, Caller, Outcome, Target};

use super::peer::principal;
pub(super) use super::peer::stateless;

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
    pub(super) server: Arc<Shared>,
    /// Skills activated with `load_skill` in this session.
    activated: Arc<Mutex<BTreeSet<String>>>,
    /// Skills the user invoked in this session (their prompt was fetched).
    user_invoked: Arc<Mutex<BTreeSet<String>>>,
    log_level: Arc<Mutex<LoggingLevel>>,
    /// When this replica last read the session's skills from a shared
    /// store (which renews the session's lease there).
    caught_up: Arc<Mutex<Option<Instant>>>,
    /// What this session's calls changed so far, when the server runs dry.
    dry_run: skillbox_call::DryRun,
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
    /// A session whose dry-run changes go to `dry_run`, which the caller
    /// keeps (the agent writes them as a patch).
    pub fn with_dry_run(server: Arc<Shared>, dry_run: skillbox_call::DryRun) -> Self {
        Session {
            dry_run,
            ..Self::new(server)
        }
    }

    /// A session of `server`, before the client's `initialize`.
    pub(crate) fn new(server: Arc<Shared>) -> Self {
        Session {
            server,
            activated: Arc::new(Mutex::new(BTreeSet::new())),
            user_invoked: Arc::new(Mutex::new(BTreeSet::new())),
            log_level: Arc::new(Mutex::new(LoggingLevel::Warning)),
            caught_up: Arc::new(Mutex::new(None)),
            dry_run: Default::default(),
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
            asker: None,
            principal: principal(context),
            trace: trace_context(context),
            dry_run: Some(self.dry_run.clone()),
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
    pub(crate) async fn tools(&self, stable: bool) -> Vec<rmcp::model::Tool> {
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

    /// Runs a skill tool or script for this client on the host's one
    /// path, which asks the user through this request's client when the
    /// policy confirms the call; as a task when it runs long and the
    /// client declared the tasks extension.
    async fn execute(
        &self,
        target: Target,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let asker = Arc::new(ClientAsker::new(
            self.server.seal.clone(),
            context.clone(),
            request.input_responses.clone(),
            request.request_state.clone(),
        ));
        let asking = asker.asking();
        let mut caller = self.caller(context);
        caller.asker = Some(Asker(asker.clone()));
        let label = match &target {
            Target::Script { skill, script, .. } => format!("{RUN_SCRIPT} {skill}/{script}"),
            Target::Code {
                skill: Some(skill), ..
            } => format!("{RUN_CODE} {skill}"),
            other => other.label().to_string(),
        };
        let host = self.server.host.clone();
        let cancel = CancellationToken::new();
        let work = {
            let (session, context, cancel) = (self.clone(), context.clone(), cancel.clone());
            async move {
                let reply = host.call(&caller, target, &cancel).await;
                session.reply(reply, &context).await
            }
        };
        let may_promote = super::peer::takes_task(context);
        let response = self
            .server
            .tasks
            .run_or_promote(
                &label,
                may_promote.then(|| self.server.host.longest_call()),
                work,
                (cancel, asking),
                &context.ct,
                ProgressSink::from_context(context),
            )
            .await?;
        // A question deferred to the client's retry: the client gets the
        // question, not the refusal the call ended with.
        match (response, asker.take_deferred()) {
            (CallToolResponse::Complete(_), Some(deferred)) => {
                Ok(CallToolResponse::InputRequired(deferred))
            }
            (response, _) => Ok(response),
        }
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
                let workspace_note = reply.workspace.as_ref().and_then(|w| w.note());
                let value = match &reply.outcome {
                    Outcome::Value(value) => value,
                    Outcome::Script(outcome) => {
                        // What the host refused the script is a note too.
                        let notes = [reply.notes.as_slice(), reply.warnings.as_slice()]
                            .concat()
                            .into_iter()
                            .chain(workspace_note)
                            .collect::<Vec<_>>();
                        let result = host_tools::script_result(&self.server, outcome, &notes);
                        return Ok(with_workspace_meta(result, &reply));
                    }
                };
                let hint = reply.tool.as_ref().and_then(|t| t.paging.as_deref());
                let mut result = results::success(value, self.server.options.output_budget, hint);
                let notes: Vec<String> = reply
                    .warnings
                    .iter()
                    .cloned()
                    .chain(workspace_note)
                    .collect();
                if !notes.is_empty() {
                    result.content.push(rmcp::model::ContentBlock::text(format!(
                        "note: {}",
                        notes.join("\nnote: ")
                    )));
                    // The notes are not the tool's value, and a client that
                    // prefers structured content would hide them from its
                    // model: the text, which has both, is the whole result.
                    result.structured_content = None;
                }
                Ok(with_workspace_meta(result, &reply))
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

    /// Answers a `tools/call`: the host tools here, skill tools and scripts
    /// through [`Session::execute`].
    pub(super) async fn dispatch_call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.clone().unwrap_or_default();
        let name = request.name.as_ref();
        let skill = match name {
            LOAD_SKILL | FIND_SKILLS | READ_SKILL_FILE => None,
            RUN_SCRIPT | RUN_CODE => args.get("skill").and_then(Value::as_str),
            tool => tool.split_once("__").map(|(skill, _)| skill),
        };
        self.catch_up_for(skill, context).await;
        let host = &self.server.host;
        let result = match name {
            LOAD_SKILL => {
                let started = Instant::now();
                let argument_bytes = skillbox_call::json_size(&Value::Object(args.clone()));
                let outcome =
                    host_tools::load_skill(&self.server, &args, &snapshot(&self.user_invoked))
                        .await;
                host.record_host_tool(
                    &self.caller(context),
                    LOAD_SKILL,
                    outcome.as_ref().ok().map(|(s, _)| s.as_ref()),
                    argument_bytes,
                    if outcome.is_ok() { "ok" } else { "error" },
                    started,
                );
                match outcome {
                    Ok((skill, result)) => {
                        let newly = insert(&self.activated, skill.name());
                        if newly {
                            self.share(context, "activated", skill.name()).await;
                        }
                        if newly
                            && self.server.options.tools_mode == ToolsMode::Lazy
                            && !stateless(context)
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
                Ok(target) => return self.execute(target, &request, context).await,
                Err(result) => result,
            },
            RUN_CODE => match host_tools::code_target(&args) {
                Ok(target) => return self.execute(target, &request, context).await,
                Err(result) => result,
            },
            _ => {
                let target = Target::Tool {
                    name: name.to_string(),
                    arguments: Value::Object(args),
                };
                return self.execute(target, &request, context).await;
            }
        };
        Ok(result.into())
    }

    /// Renders a skill's prompt: the user invoking the skill.
    pub(super) async fn invoke_prompt(
        &self,
        request: GetPromptRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let prompt = prompts::get(
            &self.server.host.catalog(),
            &request.name,
            request.arguments.as_ref(),
        )?;
        // Fetching a skill's prompt is the user invoking it: from now on
        // its tools may run in this session, even if the model may not
        // invoke it on its own.
        self.catch_up(context).await;
        let newly = insert(&self.user_invoked, &request.name);
        if newly {
            self.share(context, "invoked", &request.name).await;
        }
        if newly && self.server.options.tools_mode == ToolsMode::Lazy && !stateless(context) {
            let _ = context.peer.notify_tool_list_changed().await;
        }
        Ok(prompt.into())
    }

    /// Takes in the skills loaded and invoked in this session through
    /// other replicas, when the server shares its state: any replica may
    /// answer any request of a session. The sets only grow, so a union is
    /// the whole truth.
    pub(super) async fn catch_up(&self, context: &RequestContext<RoleServer>) {
        #[cfg(feature = "http")]
        if self.server.state.is_shared()
            && let Some(id) = super::peer::session_id(context)
            && let Some((activated, invoked)) = self.server.state.session_skills(&id).await
        {
            for (set, names) in [(&self.activated, activated), (&self.user_invoked, invoked)] {
                set.lock().unwrap_or_else(|e| e.into_inner()).extend(names);
            }
            *self.caught_up.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        #[cfg(not(feature = "http"))]
        let _ = context;
    }

    /// [`Session::catch_up`], unless the session may already call `skill`
    /// here and this replica read the store within [`RENEW_EVERY`]: what
    /// other replicas added cannot change that call, so the request skips
    /// the round trip, and the session's lease is still renewed that often.
    async fn catch_up_for(&self, skill: Option<&str>, context: &RequestContext<RoleServer>) {
        let recent = self
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < RENEW_EVERY);
        if recent && skill.is_some_and(|skill| self.may_call(skill)) {
            return;
        }
        self.catch_up(context).await;
    }

    /// Whether this session may call `skill`'s tools whatever other
    /// replicas learned, by the call path's own rule: the user invoked it
    /// here, or the model may invoke it (as the catalog says now, after
    /// any reload) and it is loaded here or every such skill is listed.
    fn may_call(&self, skill: &str) -> bool {
        let held = |set: &Mutex<BTreeSet<String>>| {
            set.lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(skill)
        };
        let model_invocable = || {
            self.server
                .host
                .catalog()
                .get(skill)
                .is_some_and(|s| s.model_invocable())
        };
        held(&self.user_invoked)
            || ((self.server.options.tools_mode == ToolsMode::All || held(&self.activated))
                && model_invocable())
    }

    /// Tells the other replicas that `skill` joined this session's `list`
    /// (`activated` or `invoked`).
    async fn share(&self, context: &RequestContext<RoleServer>, list: &str, skill: &str) {
        #[cfg(feature = "http")]
        if self.server.state.is_shared()
            && let Some(id) = super::peer::session_id(context)
        {
            self.server.state.add_session_skill(&id, list, skill).await;
        }
        #[cfg(not(feature = "http"))]
        let _ = (context, list, skill);
    }

    /// The level a 2025-11-25 session asked for with `logging/setLevel`.
    pub(super) fn set_log_level(&self, level: LoggingLevel) {
        *self.log_level.lock().unwrap_or_else(|e| e.into_inner()) = level;
    }
}

/// How often a request that needs nothing from other replicas still reads
/// the session from a shared store, renewing its lease there (an hour).
const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

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

/// The `_meta` key under which a write-granted call's result says what it
/// changed in the workspace (committed, or kept in a dry run).
pub(super) const WORKSPACE_META_KEY: &str = "io.skillbox/workspace";

fn with_workspace_meta(mut result: CallToolResult, reply: &CallReply) -> CallToolResult {
    if let Some(workspace) = &reply.workspace
        && let Ok(value) = serde_json::to_value(workspace)
    {
        let mut meta = result.meta.take().unwrap_or_default();
        meta.insert(WORKSPACE_META_KEY.to_string(), value);
        result.meta = Some(meta);
    }
    result
}
