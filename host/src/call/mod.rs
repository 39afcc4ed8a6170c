//! The one way to run a skill's code. MCP, the command line and the agent
//! all come through [`Host::call`], which does, in order:
//!
//! ```text
//! resolve (skill, tool or script) ─> invocation policy (who may call it now)
//!   ─> folder still in place ─> grants (user policy, declared effect)
//!   ─> limits (manifest clamped to ceilings, user overrides)
//!   ─> call slot ─> sandbox (cancellable) ─> audit record ─> reply
//! ```
//!
//! Every check lives here once; callers only translate their wire format
//! into a [`Target`] and a [`Caller`], and the reply back.

// Internal: reachable to embedders only through `skillbox::unstable`; the
// stable types defined here carry their own `deny(missing_docs)`.
#![allow(missing_docs)]

pub mod audit;
pub mod confirm;
mod host;
pub mod metrics;
pub mod redact;
mod slots;
pub mod trace;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use confirm::{Approval, ConfirmPolicy, Question};
pub use host::{CallRecord, Host, HostOptions, json_size, state_dir};

use crate::sandbox::{NetRequest, SandboxError, ScriptOutcome, SideEffect, Usage};
use crate::skill::policy;
use crate::skill::tools::{SkillTool, split_tool_name};
use crate::skill::{Effect, Skill};

/// The audit log's tool name for script runs.
const SCRIPT_LABEL: &str = "run_script";

/// What to run.
#[derive(Debug, Clone)]
pub enum Target {
    /// A skill tool, `<skill>__<function>`, with JSON arguments.
    Tool { name: String, arguments: Value },
    /// A skill's script (command component) with argv and stdin.
    Script {
        skill: String,
        script: String,
        args: Vec<String>,
        stdin: Vec<u8>,
    },
}

/// Who is calling, and what they have been allowed so far.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's name and version, for the audit log.
    pub client: Option<String>,
    pub idempotency_key: Option<String>,
    pub access: Access,
    /// The user's answer to a confirmation question, if one was asked.
    pub approval: Approval,
    /// Who this is for the fair share of call slots: an authenticated
    /// subject or a network address. `None` is not limited by a share.
    pub principal: Option<String>,
    /// The distributed trace the request arrived in (W3C `traceparent`).
    pub trace: Option<trace::TraceContext>,
}

/// The invocation policy a caller is held to.
#[derive(Debug, Clone, Default)]
pub enum Access {
    /// The user at the command line: any loaded skill.
    #[default]
    User,
    /// A model through a session. A `disable-model-invocation` skill's code
    /// runs only after the user invoked that skill in the session (its
    /// prompt, or `/skill:` in the agent); with `require_loaded`, a skill's
    /// code runs only after `load_skill` in the session.
    Model {
        require_loaded: bool,
        loaded: BTreeSet<String>,
        user_invoked: BTreeSet<String>,
    },
}

/// A finished call.
#[derive(Debug, Clone)]
pub struct CallReply {
    pub outcome: Outcome,
    /// Grants requested but not given, limits clamped: what a model or
    /// person should know to read the result right.
    pub notes: Vec<String>,
    /// What went wrong during the call without failing it (a refused
    /// network request): worth a warning where the caller logs.
    pub warnings: Vec<String>,
    /// The tool that ran (absent for scripts).
    pub tool: Option<SkillTool>,
    /// What a tool printed on stderr (scripts carry theirs in the
    /// outcome), redacted; for debug logging.
    pub stderr: String,
    /// Fuel and time the call used.
    pub usage: Usage,
    /// The HTTP requests the guest sent or tried to send.
    pub network: Vec<NetRequest>,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Value(Value),
    Script(ScriptOutcome),
}

/// Why a call did not produce a result. Each message says what happened,
/// why, and what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum CallError {
    #[error("unknown tool `{name}`: {why}")]
    /// No tool of that name is served.
    UnknownTool {
        /// The name asked for.
        name: String,
        /// Why it is not served.
        why: String,
    },
    #[error("tool `{name}` cannot run now: {why}")]
    /// The tool exists but cannot run now (its component does not load).
    Unavailable {
        /// The tool.
        name: String,
        /// Why.
        why: String,
    },
    #[error(
        "no skill named `{name}`. Loaded skills: {available}. Check the name in load_skill's list."
    )]
    /// No skill of that name is loaded.
    NoSuchSkill {
        /// The name asked for.
        name: String,
        /// The skills loaded.
        available: String,
    },
    #[error("skill `{skill}` has no script `{script}`; its scripts: {available}")]
    /// The skill has no script of that name.
    NoSuchScript {
        /// The skill.
        skill: String,
        /// The script asked for.
        script: String,
        /// Its scripts.
        available: String,
    },
    #[error(
        "skill `{skill}` is not loaded in this session, so its tools and scripts cannot run yet. \
         Call load_skill {{\"name\": \"{skill}\"}} first and follow its steps."
    )]
    /// A model called a skill's code before `load_skill` in its session.
    NotLoaded {
        /// The skill.
        skill: String,
    },
    #[error(
        "skill `{skill}` can only be invoked by the user (disable-model-invocation), and the user \
         has not invoked it in this session; its tools do not run. Ask the user to invoke it."
    )]
    /// A model called a skill only the user may invoke.
    UserOnly {
        /// The skill.
        skill: String,
    },
    #[error(
        "skill `{skill}`'s folder was moved or replaced since it was loaded (renamed, or swapped \
         for a link); nothing was run. The skill is dropped until it is valid again; the catalog \
         is being reloaded."
    )]
    /// The skill's folder was moved or replaced since it was loaded.
    Moved {
        /// The skill.
        skill: String,
    },
    #[error(
        "`{what}` is not served: the user runs skillbox read-only (--read-only), which serves \
         only tools declared `read`. Use a read tool, or ask the user."
    )]
    /// The host is read-only and this is not a `read` tool.
    ReadOnly {
        /// The tool or script.
        what: String,
    },
    #[error(
        "{what} needs the user's confirmation before it runs (it is declared {class}, and the \
         user's policy is --confirm {policy}), and skillbox cannot ask the user through this \
         client: it declared no elicitation support, or gave no answer within five minutes. \
         Nothing ran. Tell the user \
         what you wanted to do; they can approve it from a client that asks, or choose another \
         --confirm policy.",
        class = question.class.as_str(),
        what = question.what,
        policy = policy.as_str()
    )]
    /// The call needs the user's confirmation and no one could give it.
    NeedsConfirmation {
        /// What the user would have been asked.
        question: Box<Question>,
        /// The policy that asked for it.
        policy: ConfirmPolicy,
    },
    #[error(
        "the user declined {what}; nothing ran. Do not call it again with the same arguments; \
         ask the user how to go on."
    )]
    /// The user declined the call.
    Declined {
        /// The call.
        what: String,
    },
    #[error("{error}")]
    /// The call ran in the sandbox and failed there.
    Sandbox {
        /// The sandbox's error kind.
        error: SandboxError,
        /// Grants requested but not given, limits clamped: what may explain it.
        notes: Vec<String>,
    },
}

impl CallError {
    /// A stable short code for audit records and machine-readable output.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. }
            | CallError::NoSuchSkill { .. }
            | CallError::NoSuchScript { .. } => "unknown",
            CallError::NotLoaded { .. }
            | CallError::UserOnly { .. }
            | CallError::ReadOnly { .. } => "refused",
            CallError::NeedsConfirmation { .. } => "unconfirmed",
            CallError::Declined { .. } => "declined",
            CallError::Moved { .. } => "moved",
            CallError::Unavailable { .. } => "unavailable",
            CallError::Sandbox { error, .. } => error.code(),
        }
    }

    /// Notes on grants and limits that may explain the failure.
    pub fn notes(&self) -> &[String] {
        match self {
            CallError::Sandbox { notes, .. } => notes,
            _ => &[],
        }
    }
}

impl From<SandboxError> for CallError {
    fn from(error: SandboxError) -> Self {
        CallError::Sandbox {
            error,
            notes: Vec::new(),
        }
    }
}

/// What a sandbox run produced, before redaction.
struct Ran {
    outcome: Outcome,
    usage: Usage,
    network: Vec<NetRequest>,
    refusals: Vec<String>,
    stderr: String,
}

/// What was resolved before anything runs.
struct Prepared {
    skill: Arc<Skill>,
    tool: Option<SkillTool>,
    component: Arc<crate::sandbox::LoadedComponent>,
    component_path: String,
    effect: Option<Effect>,
    class: SideEffect,
}

impl Host {
    /// Runs a tool or script for `caller`. Cancelling `cancel` stops the
    /// guest at its next epoch tick; the audit log records every outcome,
    /// refusals included.
    ///
    /// The call runs in a `call` span that carries the caller's trace id
    /// and span, when the caller sent a trace context.
    pub async fn call(
        self: &Arc<Self>,
        caller: &Caller,
        target: Target,
        cancel: &CancellationToken,
    ) -> Result<CallReply, CallError> {
        use tracing::Instrument;
        let tool = match &target {
            Target::Tool { name, .. } => name.as_str(),
            Target::Script { .. } => SCRIPT_LABEL,
        };
        let span = match &caller.trace {
            Some(trace) => tracing::info_span!(
                "call",
                tool,
                trace_id = %trace.trace_id,
                parent_span_id = %trace.parent_id,
            ),
            None => tracing::info_span!("call", tool),
        };
        #[cfg(feature = "otlp")]
        if let Some(trace) = &caller.trace {
            trace.continue_in(&span);
        }
        self.call_in_span(caller, target, cancel)
            .instrument(span)
            .await
    }

    async fn call_in_span(
        self: &Arc<Self>,
        caller: &Caller,
        target: Target,
        cancel: &CancellationToken,
    ) -> Result<CallReply, CallError> {
        let started = Instant::now();
        let (label, argument_bytes) = match &target {
            Target::Tool { name, arguments } => (name.clone(), json_size(arguments)),
            Target::Script {
                skill,
                script,
                args,
                stdin,
            } => (
                SCRIPT_LABEL.to_string(),
                json_size(&json!({"skill": skill, "script": script, "args": args})) + stdin.len(),
            ),
        };
        let prepared = match self.prepare(caller, &target).await {
            Ok(p) => p,
            Err(e) => {
                let skill = self.catalog().get(skill_of(&target)).cloned();
                self.record(
                    &CallRecord {
                        client: caller.client.clone(),
                        tool: &label,
                        skill: skill.as_deref(),
                        component: None,
                        grants: None,
                        argument_bytes,
                        idempotency_key: caller.idempotency_key.clone(),
                        trace: caller.trace.clone(),
                        tool_resolved: false,
                    },
                    e.code(),
                    started,
                    None,
                    &[],
                );
                if matches!(e, CallError::Moved { .. }) {
                    let host = self.clone();
                    tokio::spawn(async move { host.reload_blocking().await });
                }
                return Err(e);
            }
        };
        let skill = &prepared.skill;
        let resolved = self.grants_of(&prepared);
        let record = CallRecord {
            client: caller.client.clone(),
            tool: &label,
            skill: Some(skill),
            component: Some((&prepared.component_path, &prepared.component.digest)),
            grants: Some(resolved.grants.summary()),
            argument_bytes,
            idempotency_key: caller.idempotency_key.clone(),
            trace: caller.trace.clone(),
            tool_resolved: true,
        };
        if let Some(question) = self.question(caller, &prepared, &target, &resolved.grants) {
            let refusal = match &caller.approval {
                Approval::Approved(digest) if *digest == question.digest => None,
                Approval::Declined(digest) if *digest == question.digest => {
                    Some(CallError::Declined {
                        what: question.what.clone(),
                    })
                }
                _ => Some(CallError::NeedsConfirmation {
                    question: Box::new(question),
                    policy: self.options.confirm,
                }),
            };
            if let Some(refusal) = refusal {
                self.record(&record, refusal.code(), started, None, &[]);
                return Err(refusal);
            }
        }
        let (limits, clamped) = policy::limits(
            skill,
            prepared.class,
            &self.options.policy,
            &self.options.overrides,
        );
        let mut notes = resolved.notes;
        notes.extend(clamped);
        let redactor = redact::Redactor::new(
            resolved
                .grants
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let run = async {
            let _slot = self.call_slot(caller.principal.as_deref()).await?;
            let _active = self.metrics.active_call();
            match target {
                Target::Tool { arguments, .. } => {
                    let tool = prepared
                        .tool
                        .as_ref()
                        .expect("a tool target resolves a tool");
                    let out = self
                        .sandbox
                        .call(
                            &prepared.component,
                            &tool.function,
                            &arguments,
                            &resolved.grants,
                            &limits,
                        )
                        .await?;
                    Ok(Ran {
                        outcome: Outcome::Value(out.value),
                        usage: out.usage,
                        network: out.network,
                        refusals: out.refusals,
                        stderr: out.stderr,
                    })
                }
                Target::Script {
                    script,
                    args,
                    stdin,
                    ..
                } => {
                    let mut argv = vec![script];
                    argv.extend(args);
                    let out = self
                        .sandbox
                        .run_script(&prepared.component, argv, stdin, &resolved.grants, &limits)
                        .await?;
                    let ran = Ran {
                        usage: out.usage,
                        network: out.network.clone(),
                        refusals: out.refusals.clone(),
                        stderr: String::new(),
                        outcome: Outcome::Script(out),
                    };
                    Ok(ran)
                }
            }
        };
        let result: Result<Ran, SandboxError> = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(SandboxError::Cancelled),
            result = run => result,
        };
        match &result {
            Ok(ran) => self.record(&record, "ok", started, Some(ran.usage.fuel), &ran.network),
            Err(e) => {
                self.metrics.sandbox_error(e.code());
                self.record(&record, e.code(), started, None, &[]);
            }
        }
        match result {
            Ok(ran) => Ok(CallReply {
                outcome: redact_outcome(&redactor, ran.outcome),
                notes,
                warnings: ran.refusals.iter().map(|w| redactor.text(w)).collect(),
                tool: prepared.tool,
                stderr: redactor.text(&ran.stderr),
                usage: ran.usage,
                network: ran.network,
            }),
            Err(error) => Err(CallError::Sandbox {
                error: redactor.error(error),
                notes,
            }),
        }
    }

    /// The question the user must answer before `target` runs for
    /// `caller`, if the confirmation policy asks for one. `None` also when
    /// the call would be refused anyway: [`Host::call`] then says why.
    ///
    /// Most calls are of a class the policy does not confirm; that is
    /// decided from the cached tool list alone, so they are not resolved
    /// twice.
    pub async fn confirmation(
        self: &Arc<Self>,
        caller: &Caller,
        target: &Target,
    ) -> Option<Question> {
        if matches!(caller.access, Access::User)
            || self
                .class_of(target)
                .is_some_and(|class| !self.options.confirm.needs(class))
        {
            return None;
        }
        let prepared = self.prepare(caller, target).await.ok()?;
        let resolved = self.grants_of(&prepared);
        self.question(caller, &prepared, target, &resolved.grants)
    }

    /// The side-effect class of a target, from the cached tool list; `None`
    /// when that cannot say (a tool not resolved yet, or unknown).
    fn class_of(&self, target: &Target) -> Option<SideEffect> {
        match target {
            Target::Script { .. } => Some(SideEffect::Script),
            Target::Tool { name, .. } => {
                let (skill, _) = split_tool_name(name)?;
                let tools = self.cached_tools_of(skill)?;
                let tool = tools.iter().find(|t| &t.name == name)?;
                Some(tool.effect.into())
            }
        }
    }

    /// A model's calls of a class the policy confirms need the user's yes;
    /// the user's own calls (the command line) do not.
    fn question(
        &self,
        caller: &Caller,
        prepared: &Prepared,
        target: &Target,
        grants: &crate::sandbox::Grants,
    ) -> Option<Question> {
        if matches!(caller.access, Access::User) || !self.options.confirm.needs(prepared.class) {
            return None;
        }
        let (what, arguments) = match target {
            Target::Tool { name, arguments } => (name.clone(), arguments.clone()),
            Target::Script {
                skill,
                script,
                args,
                stdin,
            } => (
                format!("{SCRIPT_LABEL} {skill}/{script}"),
                json!({"args": args, "stdin": String::from_utf8_lossy(stdin)}),
            ),
        };
        Some(Question::new(
            what,
            prepared.class,
            arguments,
            grants.summary(),
            &prepared.component.digest,
        ))
    }

    /// The grants a prepared call runs with.
    fn grants_of(&self, prepared: &Prepared) -> policy::Resolved {
        let mut resolved = policy::grants(&prepared.skill, &self.options.policy, prepared.effect);
        if self.options.read_only
            && let Some(workspace) = &mut resolved.grants.workspace
        {
            workspace.writable = false;
        }
        resolved
    }

    /// Resolve, invocation policy, folder check and component load.
    async fn prepare(
        self: &Arc<Self>,
        caller: &Caller,
        target: &Target,
    ) -> Result<Prepared, CallError> {
        let catalog = self.catalog();
        let skill_name = skill_of(target);
        let skill = match catalog.get(skill_name) {
            Some(skill) => skill.clone(),
            None => {
                let available = catalog
                    .model_visible()
                    .map(|s| s.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(match target {
                    Target::Tool { name, .. } if skill_name.is_empty() => CallError::UnknownTool {
                        name: name.clone(),
                        why: format!(
                            "skill tools are named <skill>__<function>, and this name has no `__` \
                             (loaded skills: {available})."
                        ),
                    },
                    Target::Tool { name, .. } => CallError::UnknownTool {
                        name: name.clone(),
                        why: format!(
                            "there is no skill `{skill_name}` (loaded skills: {available}). \
                             Skill tools are named <skill>__<function>."
                        ),
                    },
                    Target::Script { .. } => CallError::NoSuchSkill {
                        name: skill_name.to_string(),
                        available,
                    },
                });
            }
        };
        allowed(caller, &skill)?;
        if !skill.is_in_place() {
            tracing::warn!(
                "skill `{}`: its folder was moved or replaced since it was loaded; refusing calls until it is reloaded",
                skill.name()
            );
            return Err(CallError::Moved {
                skill: skill.name().to_string(),
            });
        }
        match target {
            Target::Tool { name, .. } => {
                let skill_tools = self.tools_of_blocking(&skill).await;
                let Some(tool) = skill_tools.iter().find(|t| &t.name == name).cloned() else {
                    let names: Vec<&str> = skill_tools.iter().map(|t| t.name.as_str()).collect();
                    let problems = self.problems_of(skill.name());
                    if !problems.is_empty() {
                        return Err(CallError::Unavailable {
                            name: name.clone(),
                            why: format!(
                                "skill `{}` cannot serve all of its tools: {}.",
                                skill.name(),
                                problems.join("; ")
                            ),
                        });
                    }
                    return Err(CallError::UnknownTool {
                        name: name.clone(),
                        why: format!(
                            "skill `{}` has no such tool; its tools: {}.",
                            skill.name(),
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    });
                };
                if !self.serves(&tool) {
                    return Err(CallError::ReadOnly { what: tool.name });
                }
                Ok(Prepared {
                    component: tool.component.clone(),
                    component_path: tool.component_path.clone(),
                    effect: Some(tool.effect),
                    class: tool.effect.into(),
                    tool: Some(tool),
                    skill,
                })
            }
            Target::Script { script, .. } => {
                if self.options.read_only {
                    return Err(CallError::ReadOnly {
                        what: format!("run_script {}/{script}", skill.name()),
                    });
                }
                let Some(spec) = skill
                    .manifest
                    .as_ref()
                    .and_then(|m| m.script(script))
                    .cloned()
                else {
                    let names = skill.script_names();
                    return Err(CallError::NoSuchScript {
                        skill: skill.name().to_string(),
                        script: script.clone(),
                        available: if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        },
                    });
                };
                let (host, loader_skill, name) = (self.clone(), skill.clone(), script.clone());
                let component =
                    tokio::task::spawn_blocking(move || host.script_of(&loader_skill, &name))
                        .await
                        .map_err(|_| SandboxError::Host("the loader stopped".into()))?
                        .ok_or_else(|| CallError::Unavailable {
                            name: format!("{}/{script}", skill.name()),
                            why: format!(
                                "its component could not be loaded: {}",
                                self.problems_of(skill.name()).join("; ")
                            ),
                        })?;
                Ok(Prepared {
                    skill,
                    tool: None,
                    component,
                    component_path: spec.component,
                    effect: None,
                    class: SideEffect::Script,
                })
            }
        }
    }
}

/// The outcome with every granted secret replaced by `[redacted:KEY]`.
fn redact_outcome(redactor: &redact::Redactor, outcome: Outcome) -> Outcome {
    if redactor.is_empty() {
        return outcome;
    }
    match outcome {
        Outcome::Value(mut value) => {
            redactor.json(&mut value);
            Outcome::Value(value)
        }
        Outcome::Script(mut script) => {
            script.stdout = redactor.text(&script.stdout);
            script.stderr = redactor.text(&script.stderr);
            Outcome::Script(script)
        }
    }
}

fn skill_of(target: &Target) -> &str {
    match target {
        Target::Tool { name, .. } => split_tool_name(name).map_or("", |(skill, _)| skill),
        Target::Script { skill, .. } => skill,
    }
}

/// The invocation policy, checked at call time.
fn allowed(caller: &Caller, skill: &Skill) -> Result<(), CallError> {
    let Access::Model {
        require_loaded,
        loaded,
        user_invoked,
    } = &caller.access
    else {
        return Ok(());
    };
    let name = skill.name();
    if !skill.model_invocable() && !user_invoked.contains(name) {
        return Err(CallError::UserOnly {
            skill: name.to_string(),
        });
    }
    if *require_loaded && !loaded.contains(name) && !user_invoked.contains(name) {
        return Err(CallError::NotLoaded {
            skill: name.to_string(),
        });
    }
    Ok(())
}
