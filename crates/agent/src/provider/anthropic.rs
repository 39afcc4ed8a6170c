//! Anthropic Messages with tool use.

use serde_json::{Value, json};

use super::{Endpoint, ModelRequest, ModelResponse, ProviderError, TokenUsage};
use crate::conversation::{Message, ToolCall};

pub(crate) const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub(crate) const API_VERSION: &str = "2023-06-01";
const MAX_TOKENS: u32 = 4096;

/// A prompt-cache breakpoint: everything up to and including the block
/// that carries it is cached (for five minutes, refreshed on each use).
fn cache_point() -> Value {
    json!({"type": "ephemeral"})
}

/// Puts the rolling breakpoint on the last non-empty content block of the
/// last message (a text-only message becomes one text block to carry it;
/// the API refuses a breakpoint on an empty block).
fn mark_last_block(messages: &mut [Value]) {
    let Some(last) = messages.last_mut() else {
        return;
    };
    if let Some(text) = last["content"].as_str().map(String::from) {
        last["content"] = json!([{"type": "text", "text": text}]);
    }
    let is_empty = |block: &Value| block["text"] == "" || block["content"] == "";
    if let Some(block) = last["content"]
        .as_array_mut()
        .and_then(|blocks| blocks.iter_mut().rev().find(|b| !is_empty(b)))
    {
        block["cache_control"] = cache_point();
    }
}

pub struct Anthropic {
    pub endpoint: Endpoint,
    key: String,
}

impl Anthropic {
    pub fn from_env(endpoint: Endpoint) -> Result<Self, ProviderError> {
        let key = std::env::var("ANTHROPIC_API_KEY")
            .ok()
            .filter(|k| !k.is_empty())
            .ok_or(ProviderError::MissingKey {
                variable: "ANTHROPIC_API_KEY",
                base_variable: "ANTHROPIC_BASE_URL",
            })?;
        endpoint.check_key_transport()?;
        Ok(Anthropic { endpoint, key })
    }

    /// Anthropic wants tool results inside a user turn, consecutive results
    /// together, and tool inputs as objects.
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for message in request.messages {
            match message {
                Message::User(text) => messages.push(json!({"role": "user", "content": text})),
                Message::Assistant { text, tool_calls } => {
                    let mut content: Vec<Value> = text
                        .iter()
                        .map(|t| json!({"type": "text", "text": t}))
                        .collect();
                    for call in tool_calls {
                        let input = serde_json::from_str::<Value>(&call.arguments)
                            .ok()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| json!({}));
                        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    messages.push(json!({"role": "assistant", "content": content}));
                }
                Message::Tool {
                    call_id,
                    content,
                    is_error,
                    ..
                } => {
                    let block = json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error});
                    match messages.last_mut() {
                        Some(last) if last["role"] == "user" && last["content"].is_array() => {
                            last["content"].as_array_mut().expect("array").push(block);
                        }
                        _ => messages.push(json!({"role": "user", "content": [block]})),
                    }
                }
            }
        }
        mark_last_block(&mut messages);
        // The system prompt and the tool definitions are the same at every
        // step: each ends with a cache breakpoint, so the provider reads
        // them from its prompt cache after the first step. The last
        // message carries a rolling breakpoint, so the conversation so far
        // is read from the cache at the next step too.
        let mut body = json!({
            "model": self.endpoint.model,
            "max_tokens": request.max_output_tokens.map_or(MAX_TOKENS, |n| n.min(MAX_TOKENS)),
            "system": [{"type": "text", "text": request.system, "cache_control": cache_point()}],
            "messages": messages,
        });
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                .collect();
            if let Some(last) = tools.last_mut() {
                last["cache_control"] = cache_point();
            }
            body["tools"] = Value::Array(tools);
        }
        body
    }

    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> Result<ModelResponse, ProviderError> {
        let body = self.body(request);
        let reply = self
            .endpoint
            .post_json("/v1/messages", &body, |builder| {
                builder
                    .header("x-api-key", &self.key)
                    .header("anthropic-version", API_VERSION)
            })
            .await?;
        parse(&reply)
    }
}

/// Anthropic counts cached input apart: `input_tokens` is only what was
/// neither read from nor written to the cache, so all three add up to
/// what was sent.
fn usage(usage: &Value) -> TokenUsage {
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    let (read, write) = (
        count("cache_read_input_tokens"),
        count("cache_creation_input_tokens"),
    );
    TokenUsage::new(count("input_tokens") + read + write, count("output_tokens"))
        .with_cache(read, write)
}

pub(crate) fn parse(reply: &Value) -> Result<ModelResponse, ProviderError> {
    let blocks = reply["content"]
        .as_array()
        .ok_or_else(|| ProviderError::BadReply("no `content` in the reply".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_string(),
                name: block["name"].as_str().unwrap_or_default().to_string(),
                arguments: block["input"].to_string(),
            }),
            _ => {}
        }
    }
    Ok(ModelResponse {
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: usage(&reply["usage"]),
        stop_reason: reply["stop_reason"].as_str().map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rolling_breakpoint_skips_empty_blocks() {
        let mut messages = vec![json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "rows: 3"},
            {"type": "tool_result", "tool_use_id": "b", "content": ""},
        ]})];
        mark_last_block(&mut messages);
        assert_eq!(messages[0]["content"][0]["cache_control"], cache_point());
        assert!(messages[0]["content"][1].get("cache_control").is_none());
        let mut empty = vec![json!({"role": "user", "content": ""})];
        mark_last_block(&mut empty);
        assert!(empty[0]["content"][0].get("cache_control").is_none());
    }
}
