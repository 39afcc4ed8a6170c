//! Replay: a recorded run again with no model. The trace's replies are fed
//! back in order, the tools run for real under the grants given now, and
//! every tool result is compared with the one recorded.

use std::collections::{BTreeSet, VecDeque};
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use super::provider::{Model, ModelRequest, ModelResponse, ProviderError, Purpose, TokenUsage};
pub use super::trace::ToolRecord;
use super::trace::{FORMAT, FORMAT_VERSION, reply_from_record};

/// Why a trace cannot be replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The file cannot be read.
    #[error("the trace cannot be read ({0}); name the file `agent --trace` wrote")]
    Read(String),
    /// The trace is larger than a replay reads.
    #[error("the trace is over {} MiB, more than a replay reads; record a shorter run", MAX_TRACE_BYTES >> 20)]
    TooLarge,
    /// The file is not an agent trace.
    #[error(
        "this is not a skillbox agent trace (its first line does not name the format \
         `{FORMAT}`); traces written before format version {FORMAT_VERSION} cannot be replayed: \
         record the run again with `skillbox agent --trace FILE`"
    )]
    NotATrace,
    /// The trace has another format version.
    #[error(
        "this trace has format version {found}, and this skillbox replays version \
         {FORMAT_VERSION} only; record the run again with this skillbox (`agent --trace FILE`)"
    )]
    Version {
        /// The version the trace names.
        found: u64,
    },
    /// A line cannot be read as what it says it is.
    #[error("line {line} of the trace cannot be read ({why}); the file is damaged or was edited")]
    Malformed {
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// A recorded reply, and what the call was for.
#[derive(Debug, Clone)]
struct RecordedReply {
    purpose: Purpose,
    response: ModelResponse,
}

/// A recorded run: its task, its options, the model's replies and the
/// tools' results.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The task as the user gave it.
    pub task: String,
    /// Model calls the run was allowed.
    pub max_steps: usize,
    /// The context budget it ran with.
    pub context_tokens: usize,
    /// The summary size it ran with.
    pub summary_tokens: u32,
    /// The long-term memory scope it ran with, if any.
    pub memory_scope: Option<String>,
    replies: Vec<RecordedReply>,
    /// Calls the host answered with a correction (an unknown tool, bad
    /// arguments): a replay lets the loop correct them again.
    corrected: BTreeSet<String>,
    /// Every tool call and its result, in order.
    pub tool_results: Vec<ToolRecord>,
}

impl Recording {
    /// Reads a trace file, at most [`MAX_TRACE_BYTES`] of it.
    pub fn load(path: &Path) -> Result<Self, ReplayError> {
        let reason = |e: std::io::Error| ReplayError::Read(crate::sandbox::io_reason(&e));
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .map_err(reason)?
            .take(MAX_TRACE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(reason)?;
        if bytes.len() as u64 > MAX_TRACE_BYTES {
            return Err(ReplayError::TooLarge);
        }
        let text = String::from_utf8(bytes).map_err(|_| ReplayError::Malformed {
            line: 0,
            why: "it is not UTF-8 text".into(),
        })?;
        Self::parse(&text)
    }

    /// Reads a trace's text: the format line first, then the events.
    pub fn parse(text: &str) -> Result<Self, ReplayError> {
        let mut lines = text.lines().enumerate();
        let header: Value = lines
            .next()
            .and_then(|(_, l)| serde_json::from_str(l).ok())
            .ok_or(ReplayError::NotATrace)?;
        if header["event"] != "trace" || header["format"] != FORMAT {
            return Err(ReplayError::NotATrace);
        }
        match header["version"].as_u64() {
            Some(FORMAT_VERSION) => {}
            Some(found) => return Err(ReplayError::Version { found }),
            None => return Err(ReplayError::NotATrace),
        }
        let mut recording = Recording {
            task: String::new(),
            max_steps: 0,
            context_tokens: 0,
            summary_tokens: 0,
            memory_scope: None,
            replies: Vec::new(),
            tool_results: Vec::new(),
            corrected: BTreeSet::new(),
        };
        let mut has_run = false;
        for (index, line) in lines {
            let malformed = |why: &str| ReplayError::Malformed {
                line: index + 1,
                why: why.to_string(),
            };
            if line.trim().is_empty() {
                continue;
            }
            let event: Value = serde_json::from_str(line).map_err(|e| malformed(&e.to_string()))?;
            let number = |key: &str| {
                event[key]
                    .as_u64()
                    .ok_or_else(|| malformed(&format!("`{key}` is not a whole number")))
            };
            match event["event"].as_str() {
                Some("trace") => return Err(malformed("a second trace starts here")),
                Some("run") => {
                    if has_run {
                        return Err(malformed("a second `run` event"));
                    }
                    has_run = true;
                    recording.task = event["task"]
                        .as_str()
                        .ok_or_else(|| malformed("the run has no task"))?
                        .to_string();
                    recording.max_steps = number("max_steps")? as usize;
                    recording.context_tokens = number("context_tokens")? as usize;
                    recording.summary_tokens = u32::try_from(number("summary_tokens")?)
                        .map_err(|_| malformed("`summary_tokens` is out of range"))?;
                    recording.memory_scope = event["memory_scope"].as_str().map(String::from);
                }
                Some(kind @ ("model_response" | "summary")) => {
                    let response = reply_from_record(&event["reply"])
                        .ok_or_else(|| malformed("a model reply without its record"))?;
                    recording.replies.push(RecordedReply {
                        purpose: if kind == "summary" {
                            Purpose::Summary
                        } else {
                            Purpose::Step
                        },
                        response,
                    });
                }
                Some("tool_call") => {
                    let text = |key: &str| event[key].as_str().map(String::from);
                    let (Some(id), Some(name), Some(arguments), Some(result), Some(is_error)) = (
                        text("id"),
                        text("name"),
                        text("arguments"),
                        text("result"),
                        event["is_error"].as_bool(),
                    ) else {
                        return Err(malformed(
                            "a tool call without its id, name, arguments, result or is_error",
                        ));
                    };
                    if event["outcome"] == "corrected" {
                        recording.corrected.insert(id);
                    }
                    recording.tool_results.push(ToolRecord {
                        step: number("step")? as usize,
                        name,
                        arguments,
                        result,
                        is_error,
                    });
                }
                _ => {}
            }
        }
        if !has_run {
            return Err(ReplayError::Malformed {
                line: 1,
                why: "the trace has no `run` event naming the task".into(),
            });
        }
        Ok(recording)
    }

    /// The model that gives the recorded replies back.
    pub fn model(&self) -> Replayer {
        Replayer {
            replies: Mutex::new(self.replies.iter().cloned().collect()),
            corrected: self.corrected.clone(),
        }
    }
}

/// A [`Model`] that answers with a recording's replies, in order, and
/// reports no tokens: nothing is sent anywhere.
pub struct Replayer {
    replies: Mutex<VecDeque<RecordedReply>>,
    corrected: BTreeSet<String>,
}

impl Model for Replayer {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, ProviderError> {
        let mut replies = self
            .replies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if request.purpose == Purpose::Step {
            // A summary the recorded run wrote where this one does not
            // need one is skipped.
            while replies
                .front()
                .is_some_and(|r| r.purpose == Purpose::Summary)
            {
                replies.pop_front();
            }
        }
        let next = match replies.front() {
            Some(reply) if reply.purpose == request.purpose => replies.pop_front(),
            _ => None,
        };
        let Some(reply) = next else {
            return Err(ProviderError::Replay(match request.purpose {
                Purpose::Step => {
                    "the recording has no more model replies, but the run goes on".into()
                }
                Purpose::Summary => "the recording has no summary at this point".into(),
            }));
        };
        let mut response = reply.response;
        // A call the recorded run could make but this one cannot offer is
        // where the replay must stop; one the host corrected then (a tool
        // that never existed) is corrected again by the loop.
        if let Some(gone) = response.tool_calls.iter().find(|call| {
            !self.corrected.contains(&call.id) && !request.tools.iter().any(|t| t.name == call.name)
        }) {
            return Err(ProviderError::Replay(format!(
                "the recorded model calls `{}`, which no tool offers now (is its skill, server or \
                 --memory scope missing?)",
                gone.name
            )));
        }
        response.usage = TokenUsage::default();
        Ok(response)
    }

    fn describe(&self) -> String {
        "replay of a recorded trace (no model)".into()
    }
}

/// A tool result that differs from the recording.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Divergence {
    /// The step of the run.
    pub step: usize,
    /// The tool.
    pub tool: String,
    /// Its arguments, as the model wrote them.
    pub arguments: String,
    /// A unified diff, recorded against now.
    pub diff: String,
}

/// Lines of a divergence's diff shown at most.
const DIFF_LINES: usize = 60;

/// The largest trace a replay reads.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;

/// Whether a replayed call matches its recording. A memory save or
/// forget is not executed in a replay, so only the call itself is
/// compared.
fn same_result(then: &ToolRecord, now: &ToolRecord) -> bool {
    use super::memory::{MEMORY_FORGET, MEMORY_SAVE};
    if [MEMORY_SAVE, MEMORY_FORGET].contains(&now.name.as_str()) {
        return then.name == now.name && then.arguments == now.arguments;
    }
    then == now
}

/// Each call whose result differs from the recording's, in order.
pub fn compare(recorded: &[ToolRecord], replayed: &[ToolRecord]) -> Vec<Divergence> {
    recorded
        .iter()
        .zip(replayed)
        .filter(|(then, now)| !same_result(then, now))
        .map(|(then, now)| {
            let mark = |r: &ToolRecord| {
                format!(
                    "{}({}){}\n{}",
                    r.name,
                    r.arguments,
                    if r.is_error { " [error]" } else { "" },
                    r.result
                )
            };
            let (old, new) = (mark(then), mark(now));
            let diff = similar::TextDiff::from_lines(&old, &new)
                .unified_diff()
                .context_radius(2)
                .header("recorded", "replayed")
                .to_string();
            let mut lines: Vec<&str> = diff.lines().collect();
            let cut = lines.len() > DIFF_LINES;
            lines.truncate(DIFF_LINES);
            let mut diff = lines.join("\n");
            if cut {
                diff.push_str("\n… (diff cut)");
            }
            Divergence {
                step: now.step,
                tool: now.name.clone(),
                arguments: now.arguments.clone(),
                diff,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_versions_and_files_are_refused_never_misread() {
        let v2 = r#"{"event":"trace","format":"skillbox-agent-trace","version":2}"#;
        assert!(matches!(
            Recording::parse(v2),
            Err(ReplayError::Version { found: 2 })
        ));
        let old = r#"{"t":0.1,"event":"model_request","step":1}"#;
        assert!(matches!(Recording::parse(old), Err(ReplayError::NotATrace)));
        assert!(matches!(Recording::parse(""), Err(ReplayError::NotATrace)));
        let header = r#"{"event":"trace","format":"skillbox-agent-trace","version":1}"#;
        let run =
            r#"{"event":"run","task":"t","max_steps":3,"context_tokens":100,"summary_tokens":10}"#;
        let twice = format!("{header}\n{run}\n{header}\n{run}\n");
        assert!(matches!(
            Recording::parse(&twice),
            Err(ReplayError::Malformed { line: 3, .. })
        ));
        let edited = format!("{header}\n{}\n", r#"{"event":"run","task":"t"}"#);
        assert!(matches!(
            Recording::parse(&edited),
            Err(ReplayError::Malformed { line: 2, .. })
        ));
        assert!(Recording::parse(&format!("{header}\n{run}\n")).is_ok());
    }

    #[test]
    fn a_changed_result_is_a_divergence_with_a_diff() {
        let record = |result: &str| ToolRecord {
            step: 2,
            name: "count".into(),
            arguments: "{}".into(),
            result: result.into(),
            is_error: false,
        };
        assert!(compare(&[record("a\nb")], &[record("a\nb")]).is_empty());
        let found = compare(&[record("a\nb")], &[record("a\nc")]);
        assert_eq!(found.len(), 1);
        assert!(found[0].diff.contains("-b") && found[0].diff.contains("+c"));
    }
}
