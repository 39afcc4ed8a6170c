//! OpenAI-compatible Chat Completions with tools: OpenAI, Ollama,
//! llama.cpp's server, vLLM, LM Studio.

use serde_json::{Value, json};

use super::{Endpoint, ModelRequest, ModelResponse, ProviderError, TokenUsage};
use crate::conversation::{Message, ToolCall};

pub(crate) const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

pub struct OpenAi {
    pub endpoint: Endpoint,
    key: Option<String>,
}

impl OpenAi {
    /// `OPENAI_BASE_URL` (or `base_url`), and `OPENAI_API_KEY`, which only
    /// the default endpoint requires: local servers usually take none.
    pub fn from_env(endpoint: Endpoint) -> Result<Self, ProviderError> {
        let key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        if key.is_none() && endpoint.base_url == DEFAULT_BASE_URL {
            return Err(ProviderError::MissingKey {
                variable: "OPENAI_API_KEY",
                base_variable: "OPENAI_BASE_URL",
            });
        }
        if key.is_some() {
            endpoint.check_key_transport()?;
        }
        Ok(OpenAi { endpoint, key })
    }

    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut messages = vec![json!({"role": "system", "content": request.system})];
        for message in request.messages {
            messages.push(match message {
                Message::User(text) => json!({"role": "user", "content": text}),
                Message::Assistant { text, tool_calls } => {
                    let mut m = json!({"role": "assistant", "content": text});
                    if !tool_calls.is_empty() {
                        m["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                            .collect();
                    }
                    m
                }
                Message::Tool { call_id, content, .. } => {
                    json!({"role": "tool", "tool_call_id": call_id, "content": content})
                }
            });
        }
        let mut body = json!({"model": self.endpoint.model, "messages": messages});
        if let Some(limit) = request.max_output_tokens {
            body["max_tokens"] = json!(limit);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
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
            .post_json("/chat/completions", &body, |builder| match &self.key {
                Some(key) => builder.bearer_auth(key),
                None => builder,
            })
            .await?;
        parse(&reply)
    }
}

pub(crate) fn parse(reply: &Value) -> Result<ModelResponse, ProviderError> {
    let choice = reply["choices"]
        .get(0)
        .ok_or_else(|| ProviderError::BadReply("no `choices` in the reply".into()))?;
    let message = &choice["message"];
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c["id"]
                        .as_str()
                        .map(String::from)
                        .unwrap_or_else(|| format!("call_{i}")),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => "{}".to_string(),
                        other => other.to_string(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ModelResponse {
        text: message["content"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(String::from),
        tool_calls,
        // `prompt_tokens` includes the cached ones; providers without a
        // prompt cache leave the details out.
        usage: TokenUsage::new(
            reply["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            reply["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        )
        .with_cache(
            reply["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
            0,
        ),
        stop_reason: choice["finish_reason"].as_str().map(String::from),
    })
}
