//! The call itself, in order: prepare, confirmation, limits, a call slot,
//! the sandbox (cancellable), the audit record, redaction, the reply.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::audit::WorkspaceRecord;
use super::confirm::{Approval, Question};
use super::error::CallError;
use super::host::{CallRecord, Host, json_size};
use super::prepare::{Prepared, Runs};
use super::redact::Redactor;
use super::request::{
    Access, CallReply, Caller, Outcome, SCRIPT_LABEL, Target, WorkspaceChanges, WorkspaceStatus,
};
use crate::runtime::python;
use crate::sandbox::stage::{ChangeSet, Stage};
use crate::sandbox::{Grants, NetRequest, NetTrace, PendingChanges, SandboxError, Usage};
use crate::skill::Skill;
use crate::skill::policy;

/// Bytes of diff a staged call's question shows.
const QUESTION_DIFF_BYTES: usize = 4_000;

/// What a sandbox run produced, before redaction.
struct Ran {
    outcome: Outcome,
    usage: Usage,
    refusals: Vec<String>,
    stderr: String,
    /// Its workspace changes, still staged.
    staged: Option<Stage>,
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
                let skill = self.catalog().get(target.skill()).cloned();
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
                    None,
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
        // A call confirmed after it ran staged: its answer settles the
        // held changes, and the tool does not run again.
        let staged_first = self
            .stages_first(caller, &prepared, &resolved.grants)
            .then(|| self.question_of(&prepared, &target, &resolved.grants));
        if let Some(identity) = &staged_first {
            let answer = match &caller.approval {
                Approval::Approved(digest) => Some((digest, Some(true))),
                Approval::Declined(digest) => Some((digest, Some(false))),
                Approval::Unanswered(digest) => Some((digest, None)),
                Approval::NotAsked => None,
            };
            if let Some((digest, yes)) = answer
                && let Some(held) = self.held.take(digest, &identity.digest)
            {
                return self.answer_held(held, yes, &record, started).await;
            }
        }
        if staged_first.is_none()
            && let Some(question) = self.question(caller, &prepared, &target, &resolved.grants)
        {
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
                self.record(&record, refusal.code(), started, None, &[], None);
                return Err(refusal);
            }
        }
        let (limits, clamped) = policy::limits(
            skill,
            prepared.class,
            &self.options.policy.ceilings,
            &self.options.overrides,
        );
        let mut notes = resolved.notes;
        notes.extend(clamped);
        let redactor = Redactor::new(
            resolved
                .grants
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        // The call's HTTP requests are logged here, outside the sandbox's
        // future, so they are recorded whatever ends the call.
        let net = NetTrace::default();
        let writable = resolved
            .grants
            .workspace
            .as_ref()
            .is_some_and(|ws| ws.writable);
        // A dry run's calls take turns on its changes; each starts from
        // what the ones before it left.
        let dry_run =
            (writable && self.options.dry_run).then(|| caller.dry_run.clone().unwrap_or_default());
        let mut dry_changes = match &dry_run {
            Some(run) => Some(run.0.clone().lock_owned().await),
            None => None,
        };
        let from = dry_changes.as_deref().and_then(Option::as_ref);
        let run = async {
            // A component still compiling is waited for before a call slot
            // is taken, and outside the call's own wall clock.
            let component = prepared
                .component
                .compiled()
                .await
                .map_err(SandboxError::Load)?;
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
                        .call_traced(
                            &component,
                            &tool.function,
                            &arguments,
                            &resolved.grants,
                            &limits,
                            &net,
                            from,
                        )
                        .await?;
                    Ok(Ran {
                        staged: out.staged.take(),
                        outcome: Outcome::Value(out.value),
                        usage: out.usage,
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
                    let argv = match &prepared.runs {
                        Runs::Python { script } => python::argv(script, args),
                        Runs::Component => std::iter::once(script).chain(args).collect(),
                    };
                    let out = self
                        .sandbox
                        .run_script_traced(
                            &component,
                            argv,
                            stdin,
                            &resolved.grants,
                            &limits,
                            &net,
                            from,
                        )
                        .await?;
                    let ran = Ran {
                        staged: out.staged.take(),
                        usage: out.usage,
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
        let mut to_hold = None;
        let (result, workspace) = match result {
            Ok(mut ran) if staged_first.is_some() && ran.staged.is_some() => {
                let stage = ran.staged.take().expect("checked above");
                let changes = stage.changes();
                let held = if changes.is_empty() {
                    "committed"
                } else {
                    "held"
                };
                let record = WorkspaceRecord::new(held, &changes);
                to_hold = Some((stage, changes));
                (Ok((ran, None)), Some(record))
            }
            Ok(mut ran) if writable => {
                let staged = ran.staged.take();
                match settle(staged, dry_changes.as_deref_mut()).await {
                    Ok(changes) => {
                        let record = WorkspaceRecord::new(changes.status.audit(), &changes.changes);
                        (Ok((ran, Some(changes))), Some(record))
                    }
                    Err(e) => (Err(e), Some(WorkspaceRecord::conflicted())),
                }
            }
            Ok(ran) => (Ok((ran, None)), None),
            Err(e) => {
                let record = writable.then(WorkspaceRecord::discarded);
                (Err(e), record)
            }
        };
        drop(dry_changes);
        // Every request the guest sent, whatever ended the call, with any
        // granted secret redacted from the host names it chose.
        let network: Vec<NetRequest> = net
            .log()
            .requests
            .iter()
            .map(|r| redactor.request(r))
            .collect();
        match &result {
            Ok((ran, _)) => self.record(
                &record,
                "ok",
                started,
                Some(ran.usage.fuel),
                &network,
                workspace,
            ),
            Err(e) => {
                self.metrics.sandbox_error(e.code());
                self.record(&record, e.code(), started, None, &network, workspace);
            }
        }
        let reply = match result {
            Ok((ran, workspace)) => Ok(CallReply {
                workspace,
                outcome: redact_outcome(&redactor, ran.outcome),
                notes,
                warnings: ran.refusals.iter().map(|w| redactor.text(w)).collect(),
                tool: prepared.tool,
                stderr: redactor.text(&ran.stderr),
                usage: ran.usage,
                network,
            }),
            Err(error) => Err(CallError::Sandbox {
                error: redactor.error(error),
                notes,
            }),
        };
        match (reply, to_hold, staged_first) {
            (Ok(reply), Some((stage, changes)), Some(identity)) if !changes.is_empty() => {
                let shown = format!(
                    "  {}\n{}",
                    changes.lines().join("\n  "),
                    stage.excerpt(&changes, QUESTION_DIFF_BYTES)
                );
                let question = identity.clone().with_changes(redactor.text(&shown));
                self.held.hold(super::held::Held::new(
                    identity.digest,
                    question.clone(),
                    stage,
                    reply,
                ));
                Err(CallError::NeedsConfirmation {
                    question: Box::new(question),
                    policy: self.options.confirm,
                })
            }
            // Nothing would change: there is nothing to confirm.
            (Ok(mut reply), Some(_), _) => {
                reply.workspace = Some(WorkspaceChanges {
                    status: WorkspaceStatus::Committed,
                    changes: ChangeSet::default(),
                });
                Ok(reply)
            }
            (reply, _, _) => reply,
        }
    }

    /// Settles a held call with the user's answer: an approval commits its
    /// staged changes (the tool does not run again), a decline drops them.
    /// `yes` is `None` when no one could be asked.
    async fn answer_held(
        &self,
        held: super::held::Held,
        yes: Option<bool>,
        record: &CallRecord<'_>,
        started: Instant,
    ) -> Result<CallReply, CallError> {
        let super::held::Held {
            stage,
            mut reply,
            question,
            ..
        } = held;
        if yes != Some(true) {
            let changes = stage.changes();
            drop(stage);
            let (refusal, outcome) = match yes {
                Some(_) => (
                    CallError::Declined {
                        what: question.what,
                    },
                    "declined",
                ),
                None => (
                    CallError::NeedsConfirmation {
                        question: Box::new(question),
                        policy: self.options.confirm,
                    },
                    "discarded",
                ),
            };
            let workspace = WorkspaceRecord::new(outcome, &changes);
            self.record(record, refusal.code(), started, None, &[], Some(workspace));
            return Err(refusal);
        }
        match crate::sandbox::commit(&PendingChanges::holding(stage)).await {
            Ok(changes) => {
                let workspace = WorkspaceRecord::new("committed", &changes);
                self.record(record, "ok", started, None, &reply.network, Some(workspace));
                reply.workspace = Some(WorkspaceChanges {
                    status: WorkspaceStatus::Committed,
                    changes,
                });
                Ok(reply)
            }
            Err(error) => {
                let workspace = Some(WorkspaceRecord::conflicted());
                self.record(record, error.code(), started, None, &[], workspace);
                Err(CallError::Sandbox {
                    error,
                    notes: reply.notes,
                })
            }
        }
    }

    /// Whether a model's call runs staged before its question, so the
    /// question can show the diff: the policy confirms it, and its only
    /// effects are in the workspace (a call granted network access is
    /// asked before it runs, since what it sends cannot be taken back).
    fn stages_first(&self, caller: &Caller, prepared: &Prepared, grants: &Grants) -> bool {
        !matches!(caller.access, Access::User)
            && self.options.confirm.needs(prepared.class)
            && !self.options.dry_run
            && grants.network.is_empty()
            && grants.workspace.as_ref().is_some_and(|ws| ws.writable)
    }

    /// Whether the call `target` would run staged before its question
    /// (see [`Host::call`]); the transport then asks after the first
    /// [`Host::call`] returns the question.
    pub async fn runs_before_asking(self: &Arc<Self>, caller: &Caller, target: &Target) -> bool {
        if matches!(caller.access, Access::User)
            || self
                .class_of(target)
                .is_some_and(|class| !self.options.confirm.needs(class))
        {
            return false;
        }
        let Ok(prepared) = self.prepare(caller, target).await else {
            return false;
        };
        let resolved = self.grants_of(&prepared);
        self.stages_first(caller, &prepared, &resolved.grants)
    }

    /// Audits a host tool that runs no guest code (`load_skill`) with the
    /// same record and metrics as every call.
    pub fn record_host_tool(
        &self,
        caller: &Caller,
        tool: &str,
        skill: Option<&Skill>,
        argument_bytes: usize,
        outcome: &str,
        started: Instant,
    ) {
        let record = CallRecord {
            client: caller.client.clone(),
            tool,
            skill,
            component: None,
            grants: None,
            argument_bytes,
            idempotency_key: caller.idempotency_key.clone(),
            trace: caller.trace.clone(),
            tool_resolved: true,
        };
        self.record(&record, outcome, started, None, &[], None);
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
        if self.stages_first(caller, &prepared, &resolved.grants) {
            // Asked after the call ran staged; a client answering by
            // sending the call again answers the held question.
            let identity = self.question_of(&prepared, target, &resolved.grants);
            return self.held.question_for(&identity.digest);
        }
        self.question(caller, &prepared, target, &resolved.grants)
    }

    /// A model's calls of a class the policy confirms need the user's yes;
    /// the user's own calls (the command line) do not.
    fn question(
        &self,
        caller: &Caller,
        prepared: &Prepared,
        target: &Target,
        grants: &Grants,
    ) -> Option<Question> {
        if matches!(caller.access, Access::User) || !self.options.confirm.needs(prepared.class) {
            return None;
        }
        // A dry run writes nothing; only a call that reaches the network
        // still has something to confirm.
        if self.options.dry_run && grants.network.is_empty() {
            return None;
        }
        Some(self.question_of(prepared, target, grants))
    }

    /// The question for `target`, asked or not.
    fn question_of(&self, prepared: &Prepared, target: &Target, grants: &Grants) -> Question {
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
        Question::new(
            what,
            prepared.class,
            arguments,
            grants.summary(),
            &prepared.component.digest,
        )
    }
}

/// Where a successful call's staged changes go: into the dry run, when
/// there is one; else into the workspace. A script that exited non-zero
/// left none.
async fn settle(
    staged: Option<Stage>,
    dry_run: Option<&mut Option<Stage>>,
) -> Result<WorkspaceChanges, SandboxError> {
    let Some(stage) = staged else {
        return Ok(WorkspaceChanges {
            status: WorkspaceStatus::Discarded,
            changes: ChangeSet::default(),
        });
    };
    if let Some(kept) = dry_run {
        let changes = stage.changes();
        *kept = Some(stage);
        return Ok(WorkspaceChanges {
            status: WorkspaceStatus::DryRun,
            changes,
        });
    }
    let pending = PendingChanges::holding(stage);
    Ok(WorkspaceChanges {
        status: WorkspaceStatus::Committed,
        changes: crate::sandbox::commit(&pending).await?,
    })
}

/// The outcome with every granted secret replaced by `[redacted:KEY]`.
fn redact_outcome(redactor: &Redactor, outcome: Outcome) -> Outcome {
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
