//! The call itself, as named stages over one [`Call`], in the order they
//! run:
//!
//! ```text
//! open       prepare once: resolve, invocation policy, folder, component,
//!            grants, limits, the redactor
//! authorize  the user's yes, through the caller's `Ask` (authorize.rs)
//! run        a call slot, the sandbox (cancellable)
//! settle     the workspace changes: committed, kept in the dry run, or
//!            held for the user's answer
//! record     the audit record and the metrics
//! reply      granted secrets redacted out of everything returned
//! ask after  a call that ran staged first: the question shows its diff
//! ```

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use super::audit::WorkspaceRecord;
use super::confirm::Question;
use super::error::CallError;
use super::host::{CallRecord, CodeSeen, Host, json_size};
use super::prepare::{Prepared, Runs};
use super::redact::Redactor;
use super::request::{CallReply, Caller, Outcome, Target, WorkspaceChanges, WorkspaceStatus};
use crate::runtime::{python, python_full, shell};
use crate::sandbox::stage::{ChangeSet, Stage};
use crate::sandbox::{
    Entry, Grants, GuestCall, Limits, NetRequest, NetTrace, PendingChanges, ProgramRun,
    SandboxError, Usage,
};
use crate::skill::policy;

/// One call on its way through the stages: who asked for what, and what
/// was decided before it ran.
pub(super) struct Call<'a> {
    pub caller: &'a Caller,
    /// Stops the guest, and a question the user has not answered yet.
    pub cancel: &'a CancellationToken,
    pub started: Instant,
    /// The audit log's tool name: the tool, or `run_script`.
    pub label: String,
    pub argument_bytes: usize,
    pub code: Option<CodeSeen>,
    pub prepared: Prepared,
    pub grants: Grants,
    pub limits: Limits,
    /// What the user's policy changed, for the reply.
    pub notes: Vec<String>,
    pub redactor: Redactor,
    /// Set when the call runs staged before its question, so the question
    /// can show what it would change: the question without its changes.
    pub asks_after: Option<Question>,
}

impl Call<'_> {
    /// The call as the audit log records it.
    pub(super) fn record(&self) -> CallRecord<'_> {
        CallRecord {
            client: self.caller.client.clone(),
            tool: &self.label,
            skill: self.prepared.skill.as_deref(),
            component: Some((
                &self.prepared.component_path,
                &self.prepared.component.digest,
            )),
            grants: Some(self.grants.summary()),
            argument_bytes: self.argument_bytes,
            code: self.code.as_ref(),
            idempotency_key: self.caller.idempotency_key.clone(),
            trace: self.caller.trace.clone(),
            tool_resolved: true,
            exit_code: None,
            programs: Vec::new(),
        }
    }

    /// Whether the call may write the workspace at all.
    fn writable(&self) -> bool {
        self.grants.workspace.as_ref().is_some_and(|ws| ws.writable)
    }
}

/// A command component's `argv[0]`: its file's stem.
fn program_name(path: &std::path::Path) -> String {
    path.file_stem().map_or_else(
        || "script".to_string(),
        |stem| stem.to_string_lossy().into_owned(),
    )
}

/// What the guest produced, before redaction.
struct Output {
    outcome: Outcome,
    usage: Usage,
    refusals: Vec<String>,
    /// The programs the guest asked the host for.
    programs: Vec<ProgramRun>,
    stderr: String,
    /// Its workspace changes, still staged.
    staged: Option<Stage>,
}

/// What the run stage leaves for settling.
struct Ran {
    result: Result<Output, SandboxError>,
    /// The call's HTTP requests, logged outside the sandbox's future so
    /// they are recorded whatever ended the call.
    net: NetTrace,
    /// A dry run's changes, taken by this call from before it ran until
    /// its own changes land on top: a dry run's calls take turns.
    dry_run: Option<OwnedMutexGuard<Option<Stage>>>,
}

/// A call's end, before redaction: its output, what became of its
/// changes, and what the audit log says of them.
struct Settled {
    result: Result<(Output, Option<WorkspaceChanges>), SandboxError>,
    workspace: Option<WorkspaceRecord>,
    /// Every request the guest sent, granted secrets redacted.
    network: Vec<NetRequest>,
    held: Held,
}

/// Changes held for the user's answer (a call that ran staged first), and
/// the list of them.
pub(super) type Held = Option<(Stage, ChangeSet)>;

/// What the authorize stage decided.
pub(super) enum Authorized {
    /// Run the call.
    Run,
    /// The call ended there: refused, or an answer settled a held call.
    Done(Box<Result<CallReply, CallError>>),
}

impl Host {
    /// Runs a tool or script for `caller`. Cancelling `cancel` stops the
    /// guest at its next epoch tick; the audit log records every outcome,
    /// refusals included. A call that needs the user's yes asks it through
    /// the caller's [`super::Ask`], from inside this one path.
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
        let tool = target.label();
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
        // Boxed: the stages make a deep future, and a caller's own future
        // (a server an embedder spawns) would otherwise outgrow the
        // compiler's type-layout depth.
        Box::pin(self.stages(caller, target, cancel))
            .instrument(span)
            .await
    }

    /// The stages, in order.
    async fn stages(
        self: &Arc<Self>,
        caller: &Caller,
        target: Target,
        cancel: &CancellationToken,
    ) -> Result<CallReply, CallError> {
        // Most calls are of a class the policy never asks about, which the
        // target and the cached tool list tell before anything is
        // prepared: such a call may become a task while it is (a cold
        // compile of its code).
        if self.never_asks(caller, &target) {
            caller.asks_nothing_more();
        }
        let mut call = self.open(caller, &target, cancel).await?;
        if let Authorized::Done(reply) = self.authorize(&mut call, &target).await {
            return *reply;
        }
        let ran = self.run(&call, target, cancel).await;
        let settled = self.settle(&call, ran).await;
        self.record_settled(&call, &settled);
        let (reply, held) = reply(&mut call, settled);
        self.ask_after(&mut call, reply, held).await
    }

    /// Prepares the call once: resolve, invocation policy, folder check,
    /// component, grants, limits. A call that cannot be prepared is
    /// audited here.
    async fn open<'a>(
        self: &Arc<Self>,
        caller: &'a Caller,
        target: &Target,
        cancel: &'a CancellationToken,
    ) -> Result<Call<'a>, CallError> {
        let started = Instant::now();
        let label = target.label().to_string();
        let argument_bytes = match target {
            Target::Tool { arguments, .. } | Target::ComponentTool { arguments, .. } => {
                json_size(arguments)
            }
            Target::Script {
                skill,
                script,
                args,
                stdin,
            } => json_size(&json!({"skill": skill, "script": script, "args": args})) + stdin.len(),
            Target::ComponentScript { args, stdin, .. } => {
                json_size(&json!({"args": args})) + stdin.len()
            }
            Target::Code {
                skill,
                code,
                args,
                stdin,
            } => json_size(&json!({"skill": skill, "code": code, "args": args})) + stdin.len(),
        };
        let code = CodeSeen::of(target);
        let prepared = match self.prepare(caller, target).await {
            Ok(prepared) => prepared,
            Err(e) => {
                let skill = self.catalog().get(target.skill()).cloned();
                let record = CallRecord {
                    client: caller.client.clone(),
                    tool: &label,
                    skill: skill.as_deref(),
                    component: None,
                    grants: None,
                    argument_bytes,
                    code: code.as_ref(),
                    idempotency_key: caller.idempotency_key.clone(),
                    trace: caller.trace.clone(),
                    tool_resolved: false,
                    exit_code: None,
                    programs: Vec::new(),
                };
                self.record(&record, e.code(), started, None, &[], None);
                if matches!(e, CallError::Moved { .. }) {
                    let host = self.clone();
                    tokio::spawn(async move { host.reload_blocking().await });
                }
                return Err(e);
            }
        };
        let resolved = self.grants_of(&prepared);
        let granted = prepared
            .skill
            .as_deref()
            .and_then(|s| self.options.policy.grant_for(s));
        let mut defaults = Limits::for_class(prepared.class);
        if prepared.full_python.is_some() {
            // The runtime's larger needs, within the ceilings the user set
            // for what a skill may get without the user's word: a script
            // chooses this runtime by its imports.
            let ceilings = &self.options.policy.ceilings;
            let memory = python_full::MEMORY_BYTES.min(ceilings.memory_bytes);
            defaults.memory_bytes = defaults.memory_bytes.max(memory);
            defaults.fuel = defaults.fuel.max(python_full::FUEL.min(ceilings.fuel));
        }
        let (limits, clamped) = policy::limits(
            prepared.skill.as_deref(),
            defaults,
            &self.options.policy.ceilings,
            granted.as_ref().map(|g| &g.limits),
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
        Ok(Call {
            caller,
            cancel,
            started,
            label,
            argument_bytes,
            code,
            prepared,
            grants: resolved.grants,
            limits,
            notes,
            redactor,
            asks_after: None,
        })
    }

    /// The sandbox run: a call slot, then the guest, until it ends or
    /// `cancel` stops it.
    async fn run(&self, call: &Call<'_>, target: Target, cancel: &CancellationToken) -> Ran {
        let net = NetTrace::default();
        // A caller without a dry run of its own gets one for this call.
        let dry_run = if call.writable() && self.options.dry_run {
            let run = call.caller.dry_run.clone().unwrap_or_default();
            Some(run.0.lock_owned().await)
        } else {
            None
        };
        let from = dry_run.as_deref().and_then(Option::as_ref);
        let prepared = &call.prepared;
        let entry = match target {
            Target::Tool { arguments, .. } => Entry::Function {
                name: prepared
                    .tool
                    .as_ref()
                    .expect("a tool target resolves a tool")
                    .function
                    .clone(),
                args: arguments,
            },
            Target::ComponentTool {
                function,
                arguments,
                ..
            } => Entry::Function {
                name: function,
                args: arguments,
            },
            Target::Script {
                script,
                args,
                stdin,
                ..
            } => Entry::Command {
                argv: match &prepared.runs {
                    Runs::Python { script } if prepared.full_python.is_some() => {
                        python_full::argv(script, args)
                    }
                    Runs::Python { script } => python::argv(script, args),
                    Runs::Component => std::iter::once(script).chain(args).collect(),
                    Runs::Shell {
                        script,
                        shell,
                        options,
                    } => shell::launcher_argv(shell, options, script, args),
                    Runs::PythonCode => unreachable!("only a run_code target prepares code"),
                },
                stdin,
            },
            Target::ComponentScript { path, args, stdin } => Entry::Command {
                argv: std::iter::once(program_name(&path)).chain(args).collect(),
                stdin,
            },
            Target::Code {
                code, args, stdin, ..
            } => Entry::Command {
                argv: if prepared.full_python.is_some() {
                    python_full::code_argv(code, args)
                } else {
                    python::code_argv(code, args)
                },
                stdin,
            },
        };
        let is_command = matches!(entry, Entry::Command { .. });
        let guest = async {
            // A component still compiling is waited for before a call slot
            // is taken, and outside the call's own wall clock.
            let component = prepared
                .component
                .compiled()
                .await
                .map_err(SandboxError::Load)?;
            let _slot = self.call_slot(call.caller.principal.as_deref()).await?;
            let _active = self.metrics.active_call();
            let out = self
                .sandbox
                .run(GuestCall {
                    component: &component,
                    entry,
                    grants: &call.grants,
                    limits: &call.limits,
                    net: net.clone(),
                    from,
                })
                .await?;
            let staged = out.staged.take();
            // A command's stdout and stderr are its outcome; a function's
            // stderr is for debug logging.
            Ok(if is_command {
                Output {
                    staged,
                    usage: out.usage,
                    refusals: out.refusals.clone(),
                    programs: out.programs.clone(),
                    stderr: String::new(),
                    outcome: Outcome::Script(out),
                }
            } else {
                Output {
                    staged,
                    usage: out.usage,
                    refusals: out.refusals,
                    programs: out.programs,
                    stderr: out.stderr,
                    outcome: Outcome::Value(out.value),
                }
            })
        };
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(SandboxError::Cancelled),
            result = guest => result,
        };
        Ran {
            result,
            net,
            dry_run,
        }
    }

    /// Where the call's staged changes go: held for the user's answer
    /// (a call that runs staged first), into the dry run, or into the
    /// workspace. A failed call's changes are dropped.
    async fn settle(&self, call: &Call<'_>, ran: Ran) -> Settled {
        let Ran {
            result,
            net,
            mut dry_run,
        } = ran;
        let mut held = None;
        let (result, workspace) = match result {
            Ok(mut output) if call.asks_after.is_some() && output.staged.is_some() => {
                let stage = output.staged.take().expect("checked above");
                let changes = stage.changes();
                let word = if changes.is_empty() {
                    "committed"
                } else {
                    "held"
                };
                let record = WorkspaceRecord::new(word, &changes);
                held = Some((stage, changes));
                (Ok((output, None)), Some(record))
            }
            Ok(mut output) if call.writable() => {
                let staged = output.staged.take();
                match land(staged, dry_run.as_deref_mut()).await {
                    Ok(changes) => {
                        let record = WorkspaceRecord::new(changes.status.audit(), &changes.changes);
                        (Ok((output, Some(changes))), Some(record))
                    }
                    Err(e) => (Err(e), Some(WorkspaceRecord::conflicted())),
                }
            }
            Ok(output) => (Ok((output, None)), None),
            Err(e) => (Err(e), call.writable().then(WorkspaceRecord::discarded)),
        };
        drop(dry_run);
        let network = net
            .log()
            .requests
            .iter()
            .map(|r| call.redactor.request(r))
            .collect();
        Settled {
            result,
            workspace,
            network,
            held,
        }
    }

    /// The audit record and the metrics of a call that ran.
    fn record_settled(&self, call: &Call<'_>, settled: &Settled) {
        let mut record = call.record();
        let workspace = settled.workspace.clone();
        match &settled.result {
            Ok((output, _)) => {
                if let Outcome::Script(out) = &output.outcome {
                    record.exit_code = Some(out.exit_code);
                }
                record.programs = output
                    .programs
                    .iter()
                    .map(|run| ProgramRun {
                        args: run.args.iter().map(|a| call.redactor.text(a)).collect(),
                        ..run.clone()
                    })
                    .collect();
                let outcome = match record.exit_code {
                    Some(code) if code != 0 => "nonzero_exit",
                    _ => "ok",
                };
                self.record(
                    &record,
                    outcome,
                    call.started,
                    Some(output.usage.fuel),
                    &settled.network,
                    workspace,
                );
            }
            Err(e) => {
                self.metrics.sandbox_error(e.code());
                self.record(
                    &record,
                    e.code(),
                    call.started,
                    None,
                    &settled.network,
                    workspace,
                );
            }
        }
    }
}

/// The reply as the caller receives it, every granted secret redacted;
/// and the changes held for the question after, if any.
fn reply(call: &mut Call<'_>, settled: Settled) -> (Result<CallReply, CallError>, Held) {
    let redactor = &call.redactor;
    let notes = std::mem::take(&mut call.notes);
    let reply = match settled.result {
        Ok((output, workspace)) => Ok(CallReply {
            workspace,
            outcome: redact_outcome(redactor, output.outcome),
            notes,
            warnings: output.refusals.iter().map(|w| redactor.text(w)).collect(),
            tool: call.prepared.tool.take(),
            stderr: redactor.text(&output.stderr),
            usage: output.usage,
            network: settled.network,
        }),
        Err(error) => Err(CallError::Sandbox {
            error: redactor.error(error),
            notes,
        }),
    };
    (reply, settled.held)
}

/// Lands a successful call's staged changes: into the dry run, when there
/// is one; else into the workspace. A script that exited non-zero left
/// none.
async fn land(
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
