//! The provider-neutral conversation, and trimming it to a context budget.

use serde_json::Value;

/// One tool call the model asked for. `arguments` is the raw JSON text the
/// model produced, which may not be valid JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in the tool's result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them.
    pub arguments: String,
}

/// One message of the conversation a model is sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The user's words (the task, or a skill's prompt).
    User(String),
    /// What the model said and the tools it asked for.
    Assistant {
        /// Its text, if any.
        text: Option<String>,
        /// The tool calls it asked for, in order.
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result, answering one [`ToolCall`].
    Tool {
        /// The [`ToolCall::id`] answered.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result as text, cut to fit.
        content: String,
        /// Whether the call failed.
        is_error: bool,
    },
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
}

/// Messages kept whole at the end of the conversation when trimming.
pub(crate) const KEEP_RECENT: usize = 6;
/// Tool results shorter than this are never worth trimming.
const TRIM_MIN_CHARS: usize = 400;

/// Replaces large tool results older than the last [`KEEP_RECENT`]
/// messages with a short reference the model can re-query, oldest first,
/// until `fits` says the conversation fits. The first user message (the
/// task and its constraints) and loaded skills' instructions are never
/// touched. Returns how many results
/// were trimmed.
pub(crate) fn trim(messages: &mut [Message], mut fits: impl FnMut(&[Message]) -> bool) -> usize {
    let mut trimmed = 0;
    let protected_from = messages.len().saturating_sub(KEEP_RECENT);
    for i in 0..protected_from {
        if fits(messages) {
            break;
        }
        if let Message::Tool { name, content, .. } = &mut messages[i]
            && name != skillbox_mcp::host_tools::LOAD_SKILL
            && content.chars().count() > TRIM_MIN_CHARS
            && !content.starts_with("[trimmed")
        {
            *content = format!(
                "[trimmed: this result of `{name}` ({} bytes) was removed to keep the context small; call `{name}` again with the same arguments if you need it]",
                content.len()
            );
            trimmed += 1;
        }
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(content: &str) -> Message {
        Message::Tool {
            call_id: "c".into(),
            name: "t".into(),
            content: content.into(),
            is_error: false,
        }
    }

    #[test]
    fn trims_old_large_results_and_keeps_the_task_and_recent_turns() {
        let big = "x".repeat(1000);
        let mut messages = vec![Message::User("TASK".into())];
        for _ in 0..8 {
            messages.push(tool(&big));
        }
        let n = trim(&mut messages, |_| false);
        // 9 messages, the last 6 kept: of the first 3, the task is kept and 2 trimmed.
        assert_eq!(n, 2);
        assert_eq!(messages[0], Message::User("TASK".into()));
        assert!(
            matches!(&messages[1], Message::Tool { content, .. } if content.starts_with("[trimmed"))
        );
        assert!(
            matches!(messages.last().unwrap(), Message::Tool { content, .. } if content == &big)
        );
    }

    #[test]
    fn stops_as_soon_as_it_fits() {
        let big = "x".repeat(1000);
        let mut messages: Vec<Message> = std::iter::once(Message::User("T".into()))
            .chain((0..10).map(|_| tool(&big)))
            .collect();
        let mut calls = 0;
        let n = trim(&mut messages, |_| {
            calls += 1;
            calls > 2
        });
        assert_eq!(n, 1);
    }
}
