//! Turning call outcomes into MCP tool results that fit the model's
//! context: structured content when small, text cut head and tail with a
//! note when large, and errors that teach.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

/// What a tool result may put into the model's context by default.
pub const DEFAULT_OUTPUT_BUDGET: usize = 16 * 1024;

/// A successful result: `value` as structured content (wrapped in an object
/// when it is not one, as MCP requires) and as text, cut to `budget` bytes.
/// `paging_hint` names the tool's own arguments for asking for less.
pub(crate) fn success(value: &Value, budget: usize, paging_hint: Option<&str>) -> CallToolResult {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    let (shown, cut) = cut_head_tail(&text, budget, paging_hint);
    let mut result = CallToolResult::success(vec![ContentBlock::text(shown)]);
    if !cut {
        result.structured_content = Some(as_object(value));
    }
    result
}

/// A result with its own text and structured content (already bounded).
pub(crate) fn text_and_structure(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(as_object(&structured));
    result
}

/// A failed call, as an `isError` result the model reads.
pub(crate) fn error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// MCP structured content is an object; other values go under `result`.
pub(crate) fn as_object(value: &Value) -> Value {
    match value {
        Value::Object(_) => value.clone(),
        other => json!({ "result": other }),
    }
}

/// Cuts `text` to about `budget` bytes, keeping the head and the tail, and
/// appends a note with the total size and how to ask for the rest. Returns
/// whether anything was cut.
pub fn cut_head_tail(text: &str, budget: usize, paging_hint: Option<&str>) -> (String, bool) {
    if text.len() <= budget {
        return (text.to_string(), false);
    }
    let half = budget / 2;
    let head_end = text.floor_char_boundary(half);
    let tail_start = text.ceil_char_boundary(text.len() - half);
    let omitted = tail_start - head_end;
    let hint = paging_hint.map_or_else(
        || "call again asking for less (a narrower range, a filter, fewer results)".to_string(),
        |h| format!("call again with {h} to get another part"),
    );
    (
        format!(
            "{}\n\n[… {omitted} bytes omitted: the full result is {} bytes, over this server's {budget}-byte output budget. To see the rest, {hint}.]\n\n{}",
            &text[..head_end],
            text.len(),
            &text[tail_start..]
        ),
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_results_are_whole_and_structured() {
        let r = success(&json!({"a": 1}), 100, None);
        assert_eq!(r.structured_content, Some(json!({"a": 1})));
        let r = success(&json!(42), 100, None);
        assert_eq!(r.structured_content, Some(json!({"result": 42})));
    }

    #[test]
    fn large_results_keep_head_and_tail_with_a_note() {
        let text = format!("HEAD{}TAIL", "x".repeat(10_000));
        let (cut, was_cut) = cut_head_tail(&text, 1000, Some("`start`"));
        assert!(was_cut);
        assert!(cut.starts_with("HEAD") && cut.ends_with("TAIL"));
        assert!(cut.contains("the full result is 10008 bytes"));
        assert!(cut.contains("call again with `start`"));
        assert!(cut.len() < 1400);
    }

    #[test]
    fn cuts_on_character_boundaries() {
        let text = "é".repeat(1000);
        let (cut, _) = cut_head_tail(&text, 101, None);
        assert!(cut.starts_with('é'));
    }
}
