//! When the loop stops: the reasons and their exit codes, how a stuck
//! loop is recognised, and the honest account of a run that stopped early.

use std::collections::VecDeque;

use super::idempotency::canonical;
use super::provider::TokenUsage;
use super::trace::clip;

/// Consecutive failing tool calls after which the loop is considered stuck.
pub(super) const MAX_CONSECUTIVE_TOOL_ERRORS: usize = 5;
/// Identical consecutive calls that mean the model is looping.
pub(super) const MAX_REPEATS: usize = 3;
/// Why the loop stopped; each has its own exit code.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Stop {
    /// The model answered without asking for more tools.
    Done,
    /// The step limit (this many model calls) was reached.
    StepLimit(usize),
    /// The token budget (this many tokens) was used up.
    Budget(u64),
    /// The model provider failed, after its retries.
    Provider(String),
    /// Tool failures or repeated calls left the loop stuck.
    Stuck(String),
    /// A call needed the user's confirmation and no one could give it.
    Unconfirmed(String),
    /// A replay could not follow its recording.
    Replay(String),
}

impl Stop {
    /// Also used when the provider cannot even be configured.
    pub const PROVIDER_EXIT_CODE: u8 = 5;
    /// A replay whose tool results differ from the recording's.
    pub const REPLAY_DIVERGED_EXIT_CODE: u8 = 8;
    /// A replay that could not follow its recording.
    pub const REPLAY_STOPPED_EXIT_CODE: u8 = 9;

    /// The `skillbox agent` exit code for this stop.
    pub fn exit_code(&self) -> u8 {
        match self {
            Stop::Done => 0,
            Stop::StepLimit(_) => 3,
            Stop::Budget(_) => 4,
            Stop::Provider(_) => Self::PROVIDER_EXIT_CODE,
            Stop::Stuck(_) => 6,
            Stop::Unconfirmed(_) => 7,
            Stop::Replay(_) => Self::REPLAY_STOPPED_EXIT_CODE,
        }
    }

    pub(super) fn explain(&self) -> String {
        match self {
            Stop::Done => "done".into(),
            Stop::StepLimit(n) => {
                format!("the step limit ({n}) was reached; raise --max-steps or narrow the task")
            }
            Stop::Budget(n) => format!(
                "the token budget ({n}) was used up; raise --budget-tokens or narrow the task"
            ),
            Stop::Provider(e) => format!("the model provider failed: {e}"),
            Stop::Stuck(why) => format!("tool failures left the loop stuck: {why}"),
            Stop::Unconfirmed(question) => format!(
                "a call needed the user's confirmation and there was no one to ask ({question}); \
                 run on a terminal to be asked, or pass --yes to approve such calls"
            ),
            Stop::Replay(why) => format!("the replay stopped: {why}"),
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
/// How a run ended.
pub struct Outcome {
    /// Why the loop stopped.
    pub stop: Stop,
    /// The model's last answer, or an honest account of why there is none.
    pub answer: String,
    /// Model calls made.
    pub steps: usize,
    /// Tokens the provider reported, in and out.
    pub usage: TokenUsage,
    /// Tool calls made.
    pub tool_calls: usize,
}

/// Watches the tool calls for the two signs of a stuck loop: the same call
/// again and again, and failure after failure.
#[derive(Debug, Default)]
pub(super) struct StuckDetector {
    recent: VecDeque<String>,
    consecutive_errors: usize,
}

impl StuckDetector {
    /// Before a call runs: a stop if the model repeats itself.
    pub(super) fn before(&mut self, name: &str, arguments: &str) -> Option<Stop> {
        let signature = format!("{name}\u{0}{}", canonical(arguments));
        self.recent.push_back(signature.clone());
        if self.recent.len() > MAX_REPEATS {
            self.recent.pop_front();
        }
        (self.recent.len() == MAX_REPEATS && self.recent.iter().all(|s| s == &signature)).then(
            || {
                Stop::Stuck(format!(
                    "the model called `{name}` with the same arguments {MAX_REPEATS} times in a row"
                ))
            },
        )
    }

    /// After a call ran: a stop if too many failed in a row.
    pub(super) fn after(&mut self, is_error: bool, text: &str) -> Option<Stop> {
        if !is_error {
            self.consecutive_errors = 0;
            return None;
        }
        self.consecutive_errors += 1;
        (self.consecutive_errors >= MAX_CONSECUTIVE_TOOL_ERRORS).then(|| {
            Stop::Stuck(format!(
                "{MAX_CONSECUTIVE_TOOL_ERRORS} tool calls in a row failed; the last: {}",
                clip(text, 200)
            ))
        })
    }
}

/// The answer of a run that stopped before the model finished: why, what
/// was done, and the model's last words.
pub(super) fn intermediate_conclusion(
    stop: &Stop,
    done: &[String],
    last_text: Option<&str>,
) -> String {
    let mut out = format!("Stopped before finishing: {}.\n", stop.explain());
    if done.is_empty() {
        out.push_str("Done: no tool call succeeded.\n");
    } else {
        out.push_str("Done so far:\n");
        for d in done {
            out.push_str(&format!("- {d}\n"));
        }
    }
    out.push_str("Not done: the task has no final answer yet.\n");
    if let Some(text) = last_text {
        out.push_str(&format!("The model's last words: {}\n", clip(text, 400)));
    }
    out
}
