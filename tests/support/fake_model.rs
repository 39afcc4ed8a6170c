//! A real local HTTP server that speaks a model provider's wire format
//! with a scripted sequence of replies, and records every request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One scripted reply.
#[derive(Clone, Debug)]
pub enum Reply {
    Json(Value),
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

pub struct FakeModel {
    pub base: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    _runtime: tokio::runtime::Runtime,
}

impl FakeModel {
    /// Starts the server on a free loopback port; replies are used in order.
    pub fn start(replies: Vec<Reply>) -> FakeModel {
        Self::start_with_summaries(replies, Vec::new())
    }

    /// The same, with the agent's session-summary requests (those whose
    /// system prompt is the host's summary instruction) answered from
    /// `summaries` in order, apart from the steps' replies.
    pub fn start_with_summaries(replies: Vec<Reply>, summaries: Vec<Reply>) -> FakeModel {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let script = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
        let summaries = Arc::new(Mutex::new(std::collections::VecDeque::from(summaries)));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let recorded = requests.clone();
        let handler = move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let recorded = recorded.clone();
            let script = script.clone();
            let summaries = summaries.clone();
            async move {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let queue = if is_summary_request(&body) {
                    summaries
                } else {
                    script
                };
                recorded.lock().unwrap().push(Recorded {
                    path: uri.path().to_string(),
                    headers: headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                        .collect(),
                    body,
                });
                let next = queue.lock().unwrap().pop_front();
                let response: Response = match next {
                    Some(Reply::Json(v)) => (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        v.to_string(),
                    )
                        .into_response(),
                    Some(Reply::Status {
                        status,
                        headers,
                        body,
                    }) => {
                        let mut r = (StatusCode::from_u16(status).unwrap(), body).into_response();
                        for (k, v) in headers {
                            r.headers_mut().insert(
                                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                                v.parse().unwrap(),
                            );
                        }
                        r
                    }
                    None => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the test script has no more replies",
                    )
                        .into_response(),
                };
                response
            }
        };
        let app = axum::Router::new().fallback(handler);
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeModel {
            base,
            requests,
            _runtime: runtime,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// The start of the host's instruction for a session summary.
pub const SUMMARY_INSTRUCTION_START: &str = "You compress the earlier part of an agent's run";

/// Whether a request (OpenAI or Anthropic) asks for a session summary.
pub fn is_summary_request(body: &Value) -> bool {
    let system = body["system"][0]["text"]
        .as_str()
        .or(body["messages"][0]["content"].as_str())
        .unwrap_or_default();
    system.starts_with(SUMMARY_INSTRUCTION_START)
}

/// An OpenAI Chat Completions reply that calls tools.
pub fn openai_calls(calls: &[(&str, &str, &str)], tokens: (u64, u64)) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    Reply::Json(json!({
        "id": "chatcmpl-test", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}],
        "usage": {"prompt_tokens": tokens.0, "completion_tokens": tokens.1}
    }))
}

/// An OpenAI Chat Completions final answer.
pub fn openai_answer(text: &str, tokens: (u64, u64)) -> Reply {
    Reply::Json(json!({
        "id": "chatcmpl-test", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": tokens.0, "completion_tokens": tokens.1}
    }))
}

/// An Anthropic Messages reply that uses a tool.
pub fn anthropic_tool_use(id: &str, name: &str, input: Value) -> Reply {
    Reply::Json(json!({
        "id": "msg_test", "type": "message", "role": "assistant", "stop_reason": "tool_use",
        "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": id, "name": name, "input": input}],
        "usage": {"input_tokens": 50, "output_tokens": 10}
    }))
}

/// An Anthropic Messages final answer.
pub fn anthropic_answer(text: &str) -> Reply {
    Reply::Json(json!({
        "id": "msg_test", "type": "message", "role": "assistant", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": 80, "output_tokens": 20}
    }))
}
