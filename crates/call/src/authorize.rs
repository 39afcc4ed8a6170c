//! The user's yes: which calls need it, when it is asked, and what an
//! answer does.
//!
//! A call the policy confirms is asked about before it runs, through the
//! caller's [`Ask`]. A call whose only effects are in the workspace runs
//! first with its writes staged, so its question can show the diff; it is
//! held (held.rs) until the answer, which commits or drops the changes
//! without running the tool again.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::audit::WorkspaceRecord;
use super::confirm::{Answer, Question};
use super::error::CallError;
use super::held::Held;
use super::host::Host;
use super::pipeline::{Authorized, Call, Held as HeldChanges};
use super::request::{
    Access, CODE_LABEL, CallReply, Caller, SCRIPT_LABEL, Target, WorkspaceChanges, WorkspaceStatus,
};
use crate::sandbox::stage::ChangeSet;
use crate::sandbox::{PendingChanges, SideEffect};
use crate::skill::tools::split_tool_name;

/// Bytes of diff a staged call's question shows.
const QUESTION_DIFF_BYTES: usize = 4_000;

impl Host {
    /// Decides whether `call` may run now. A call asked about before it
    /// runs gets its answer here; a call that runs staged first is marked
    /// so ([`Call::asks_after`]), unless this request answers the
    /// question its held twin asked, which settles it here.
    pub(super) async fn authorize(
        self: &Arc<Self>,
        call: &mut Call<'_>,
        target: &Target,
    ) -> Authorized {
        if !self.confirms(call) {
            call.caller.asks_nothing_more();
            return Authorized::Run;
        }
        let question = self.question_of(call, target);
        if self.stages_first(call) {
            if let Some(asked) = self.held.question_for(&question.digest)
                && let Some(yes) = carried(call.caller, &asked).await
                && let Some(held) = self.held.take(&asked.digest, &question.digest)
            {
                return Authorized::Done(Box::new(self.answer_held(call, held, Some(yes)).await));
            }
            call.asks_after = Some(question);
            return Authorized::Run;
        }
        let answer = carried_or_ask(call, &question).await;
        let refusal = match answer {
            Answer::Yes => {
                // The call's time, for the audit and the metrics, starts
                // after the user's.
                call.started = Instant::now();
                call.caller.asks_nothing_more();
                return Authorized::Run;
            }
            Answer::No => CallError::Declined {
                what: question.what,
            },
            Answer::Deferred | Answer::Unasked => CallError::NeedsConfirmation {
                question: Box::new(question),
                policy: self.options.confirm,
            },
        };
        // A deferred question is not the call's end: the client sends the
        // call again with the answer, and that call is audited.
        if answer != Answer::Deferred {
            self.record(
                &call.record(),
                refusal.code(),
                call.started,
                None,
                &[],
                None,
            );
        }
        Authorized::Done(Box::new(Err(refusal)))
    }

    /// After a call that ran staged first: asks the question with its
    /// diff and settles the held changes with the answer. Nothing to
    /// change means nothing to ask.
    pub(super) async fn ask_after(
        &self,
        call: &mut Call<'_>,
        reply: Result<CallReply, CallError>,
        held: HeldChanges,
    ) -> Result<CallReply, CallError> {
        let Some(identity) = &call.asks_after else {
            return reply;
        };
        let mut reply = reply?;
        let Some((stage, changes)) = held else {
            return Ok(reply);
        };
        if changes.is_empty() {
            reply.workspace = Some(WorkspaceChanges {
                status: WorkspaceStatus::Committed,
                changes: ChangeSet::default(),
            });
            return Ok(reply);
        }
        let shown = format!(
            "  {}\n{}",
            changes.lines().join("\n  "),
            stage.excerpt(&changes, QUESTION_DIFF_BYTES)
        );
        let content = stage.content_digest(&changes);
        let question = identity
            .clone()
            .with_changes(call.redactor.text(&shown), &content);
        self.held.hold(Held::new(
            identity.digest.clone(),
            question.clone(),
            stage,
            reply,
        ));
        // A retry through another replica, which did not hold the call,
        // ran it again: an answer it carries to this very diff settles it.
        let answer = carried_or_ask(call, &question).await;
        call.started = Instant::now();
        let needs_answer = || CallError::NeedsConfirmation {
            question: Box::new(question.clone()),
            policy: self.options.confirm,
        };
        if answer == Answer::Deferred {
            return Err(needs_answer());
        }
        // Gone only if a retry of this very call answered it meanwhile.
        let Some(held) = self.held.take(&question.digest, &identity.digest) else {
            return Err(needs_answer());
        };
        let yes = match answer {
            Answer::Yes => Some(true),
            Answer::No => Some(false),
            Answer::Deferred | Answer::Unasked => None,
        };
        self.answer_held(call, held, yes).await
    }

    /// Settles a held call with the user's answer: an approval commits its
    /// staged changes (the tool does not run again), a decline drops them.
    /// `yes` is `None` when no one could be asked.
    async fn answer_held(
        &self,
        call: &Call<'_>,
        held: Held,
        yes: Option<bool>,
    ) -> Result<CallReply, CallError> {
        let Held {
            stage,
            mut reply,
            question,
            ..
        } = held;
        let record = call.record();
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
            self.record(
                &record,
                refusal.code(),
                call.started,
                None,
                &[],
                Some(workspace),
            );
            return Err(refusal);
        }
        match crate::sandbox::commit(&PendingChanges::holding(stage)).await {
            Ok(changes) => {
                let workspace = WorkspaceRecord::new("committed", &changes);
                self.record(
                    &record,
                    "ok",
                    call.started,
                    None,
                    &reply.network,
                    Some(workspace),
                );
                reply.workspace = Some(WorkspaceChanges {
                    status: WorkspaceStatus::Committed,
                    changes,
                });
                Ok(reply)
            }
            Err(error) => {
                let workspace = Some(WorkspaceRecord::conflicted());
                self.record(&record, error.code(), call.started, None, &[], workspace);
                Err(CallError::Sandbox {
                    error,
                    notes: reply.notes,
                })
            }
        }
    }

    /// Whether `target` is, before it is prepared, known never to be asked
    /// about: the user's own call, or a class the policy does not confirm,
    /// from the target and the cached tool list alone. `false` when that
    /// cannot tell; [`Host::authorize`] then decides.
    pub(super) fn never_asks(&self, caller: &Caller, target: &Target) -> bool {
        if matches!(caller.access, Access::User) {
            return true;
        }
        let class = match target {
            Target::Script { .. } | Target::ComponentScript { .. } | Target::Code { .. } => {
                SideEffect::Script
            }
            Target::Tool { name, .. } => {
                let Some((skill, _)) = split_tool_name(name) else {
                    return false;
                };
                let Some(effect) = self
                    .cached_tools_of(skill)
                    .and_then(|tools| tools.iter().find(|t| &t.name == name).map(|t| t.effect))
                else {
                    return false;
                };
                effect.into()
            }
            Target::ComponentTool { .. } => return false,
        };
        !self.options.confirm.needs(class)
    }

    /// A model's calls of a class the policy confirms need the user's yes;
    /// the user's own calls (the command line) do not. A dry run writes
    /// nothing, so only a call that reaches the network still has
    /// something to confirm there.
    fn confirms(&self, call: &Call<'_>) -> bool {
        !matches!(call.caller.access, Access::User)
            && self.options.confirm.needs(call.prepared.class)
            && !(self.options.dry_run && call.grants.network.is_empty())
    }

    /// Whether a confirmed call runs staged before its question, so the
    /// question can show the diff: its only effects are in the workspace
    /// (a call granted network access is asked before it runs, since what
    /// it sends cannot be taken back).
    fn stages_first(&self, call: &Call<'_>) -> bool {
        !self.options.dry_run
            && call.grants.network.is_empty()
            && call.grants.workspace.as_ref().is_some_and(|ws| ws.writable)
    }

    /// The question for `target`, without any changes.
    fn question_of(&self, call: &Call<'_>, target: &Target) -> Question {
        let (what, arguments) = match target {
            Target::Tool { name, arguments } => (name.clone(), arguments.clone()),
            Target::ComponentTool {
                function,
                arguments,
                ..
            } => (function.clone(), arguments.clone()),
            Target::ComponentScript { path, args, stdin } => (
                format!("{SCRIPT_LABEL} {}", path.display()),
                json!({"args": args, "stdin": String::from_utf8_lossy(stdin)}),
            ),
            Target::Script {
                skill,
                script,
                args,
                stdin,
            } => (
                format!("{SCRIPT_LABEL} {skill}/{script}"),
                json!({"args": args, "stdin": String::from_utf8_lossy(stdin)}),
            ),
            Target::Code {
                skill,
                code,
                args,
                stdin,
            } => (
                match skill {
                    Some(skill) => format!("{CODE_LABEL} as {skill}'s code"),
                    None => CODE_LABEL.to_string(),
                },
                json!({"code": code, "args": args, "stdin": String::from_utf8_lossy(stdin)}),
            ),
        };
        Question::new(
            what,
            call.prepared.class,
            arguments,
            call.grants.summary(),
            &call.prepared.component.digest,
        )
    }
}

/// The answer the caller's request already carries to `question`.
async fn carried(caller: &Caller, question: &Question) -> Option<bool> {
    caller.asker.as_ref()?.0.carried(question).await
}

/// The answer this request carries to `question`, else the user's.
async fn carried_or_ask(call: &Call<'_>, question: &Question) -> Answer {
    match carried(call.caller, question).await {
        Some(true) => Answer::Yes,
        Some(false) => Answer::No,
        None => ask(call, question).await,
    }
}

/// Puts `question` to the caller's user; a caller no one can ask, and a
/// call cancelled while it waits, get [`Answer::Unasked`].
async fn ask(call: &Call<'_>, question: &Question) -> Answer {
    let Some(asker) = &call.caller.asker else {
        return Answer::Unasked;
    };
    tokio::select! {
        answer = asker.0.ask(question) => answer,
        () = call.cancel.cancelled() => Answer::Unasked,
    }
}
