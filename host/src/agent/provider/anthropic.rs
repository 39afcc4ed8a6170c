//! Anthropic Messages with tool use.

use serde_json::{Value, json};

use super::{Endpoint, ModelRequest, ModelResponse, ProviderError, TokenUsage};
use crate::agent::conversation::{Message, ToolCall};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
const MAX_TOKENS: u32 = 4096;

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
        let mut body = json!({
            "model": self.endpoint.model,
            "max_tokens": MAX_TOKENS,
            "system": request.system,
            "messages": messages,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                .collect();
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

pub fn parse(reply: &Value) -> Result<ModelResponse, ProviderError> {
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
        usage: TokenUsage {
            input: reply["usage"]["input_tokens"].as_u64().unwrap_or(0),
            output: reply["usage"]["output_tokens"].as_u64().unwrap_or(0),
        },
        stop_reason: reply["stop_reason"].as_str().map(String::from),
    })
}
