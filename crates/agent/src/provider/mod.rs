//! Model providers: OpenAI-compatible Chat Completions and Anthropic
//! Messages, over real HTTP with retries.

pub(crate) mod anthropic;
pub(crate) mod openai;
mod retry;

use std::time::Duration;

use super::conversation::{Message, ToolCall, ToolDef};

pub use retry::RetryPolicy;

/// One request to a model.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    /// The system prompt: the loop's rules and the skill catalog.
    pub system: &'a str,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolDef],
    /// What the call is for.
    pub purpose: Purpose,
    /// The most tokens the reply may take, when the caller bounds it.
    pub max_output_tokens: Option<u32>,
}

/// What a model call is for: a step of the loop, or writing the session
/// summary that replaces older turns (a separate, bounded call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// One step: the model answers or asks for tools.
    Step,
    /// The summary of older turns, with no tools offered.
    Summary,
}

/// Tokens a provider reports for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TokenUsage {
    /// Tokens sent, cached or not.
    pub input: u64,
    /// Tokens generated.
    pub output: u64,
    /// Of `input`, the tokens the provider read from its prompt cache
    /// (billed at a fraction of the input price).
    pub cache_read: u64,
    /// Of `input`, the tokens the provider wrote to its prompt cache.
    pub cache_write: u64,
}

#[derive(Debug, Clone)]
#[non_exhaustive]
/// A model's reply. Build one with [`ModelResponse::answer`] or
/// [`ModelResponse::calling`].
pub struct ModelResponse {
    /// Its text, if any.
    pub text: Option<String>,
    /// The tools it asks to call.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens the provider reports for this call.
    pub usage: TokenUsage,
    /// The provider's own stop reason, for the trace.
    pub stop_reason: Option<String>,
}

impl TokenUsage {
    /// `input` tokens sent and `output` tokens generated.
    pub fn new(input: u64, output: u64) -> Self {
        TokenUsage {
            input,
            output,
            cache_read: 0,
            cache_write: 0,
        }
    }

    /// The same, with `read` input tokens read from the provider's prompt
    /// cache and `write` written to it.
    pub fn with_cache(mut self, read: u64, write: u64) -> Self {
        self.cache_read = read;
        self.cache_write = write;
        self
    }

    /// Adds another call's tokens.
    pub fn add(&mut self, other: &TokenUsage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

impl ModelResponse {
    /// A final answer: text and no tool calls.
    pub fn answer(text: impl Into<String>) -> Self {
        ModelResponse {
            text: Some(text.into()),
            tool_calls: Vec::new(),
            usage: TokenUsage::default(),
            stop_reason: None,
        }
    }

    /// A reply that asks for tool calls (with no text).
    pub fn calling(tool_calls: Vec<ToolCall>) -> Self {
        ModelResponse {
            text: None,
            tool_calls,
            usage: TokenUsage::default(),
            stop_reason: None,
        }
    }

    /// The tokens the provider reported for this reply.
    pub fn with_usage(mut self, usage: TokenUsage) -> Self {
        self.usage = usage;
        self
    }
}

#[derive(Debug, thiserror::Error)]
/// Why a model call failed. Each message says what to check.
pub enum ProviderError {
    #[error(
        "{variable} is not set; export it with your API key (or point {base_variable} at a local server that needs none)"
    )]
    /// The API key's environment variable is not set.
    MissingKey {
        /// The key's variable.
        variable: &'static str,
        /// The base URL's variable.
        base_variable: &'static str,
    },
    #[error(
        "cannot reach the model endpoint {url}: {reason}. Check that the server is running and the URL is right"
    )]
    /// The endpoint could not be reached.
    Unreachable {
        /// The endpoint, without credentials.
        url: String,
        /// Why, in words.
        reason: String,
    },
    #[error("the model endpoint {url} answered HTTP {status}: {body}")]
    /// The endpoint answered with an HTTP error.
    Http {
        /// The endpoint, without credentials.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    #[error("the model endpoint {url} did not answer within {} s", timeout.as_secs())]
    /// The endpoint did not answer in time.
    Timeout {
        /// The endpoint, without credentials.
        url: String,
        /// How long the request was given.
        timeout: Duration,
    },
    #[error("the model's reply could not be read: {0}")]
    /// The reply could not be read.
    BadReply(String),
    #[error("replay: {0}")]
    /// A replay cannot go on: the recording has no reply for this call, or
    /// its reply calls a tool that is gone.
    Replay(String),
    #[error("unknown provider `{0}`; use openai:MODEL or anthropic:MODEL")]
    /// `PROVIDER:MODEL` names no provider this build knows.
    UnknownProvider(String),
    #[error(
        "refusing to send the API key to {url}: it is plain http:// to a host that is not this \
         machine, so anyone on the path could read it. Use https://, or a loopback address for a \
         local server"
    )]
    /// The key would travel in the clear to another machine.
    InsecureTransport {
        /// The endpoint, without credentials.
        url: String,
    },
}

/// `url` without its userinfo (`user:password@`), for anything printed,
/// traced or put in an error.
pub(crate) fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string().trim_end_matches('/').to_string()
        }
        _ => url.to_string(),
    }
}

/// A key may travel over https, or over http to this machine only.
fn key_transport_ok(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        skillbox_call::net::https_or_loopback(u.scheme(), u.host_str().unwrap_or_default())
    })
}

/// The endpoint: the flag, else the environment variable, else the
/// provider's public endpoint; without a trailing slash.
fn base_url(flag: Option<&str>, variable: &str, default: &str) -> String {
    flag.map(String::from)
        .or_else(|| std::env::var(variable).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| default.to_string())
        .trim_end_matches('/')
        .to_string()
}

/// What every provider has: the HTTP client, the model, where it is
/// served and how requests are retried.
pub struct Endpoint {
    client: reqwest::Client,
    pub model: String,
    pub base_url: String,
    timeout: Duration,
    retry: RetryPolicy,
}

impl Endpoint {
    /// The base URL as it may be shown: without credentials.
    pub fn shown_url(&self) -> String {
        shown_url(&self.base_url)
    }

    /// Refuses to carry a key where it could be read on the way.
    pub fn check_key_transport(&self) -> Result<(), ProviderError> {
        if key_transport_ok(&self.base_url) {
            Ok(())
        } else {
            Err(ProviderError::InsecureTransport {
                url: self.shown_url(),
            })
        }
    }

    /// POSTs `body` as JSON to `base_url + path`, letting `authorize` add
    /// the provider's headers, with retries; returns the reply's JSON.
    async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        authorize: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<serde_json::Value, ProviderError> {
        let url = format!("{}{path}", self.base_url);
        let shown = format!("{}{path}", self.shown_url());
        retry::send_json(&shown, self.timeout, self.retry, || {
            authorize(self.client.post(&url).json(body))
        })
        .await
    }
}

/// A model the agent loop can call: the built-in [`Provider`], or an
/// embedder's own client (a gateway, a local model, a recorded replay).
pub trait Model: Send + Sync {
    /// Sends one request and returns the model's reply. Retries, if any,
    /// are the implementation's own.
    fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> impl Future<Output = Result<ModelResponse, ProviderError>> + Send;

    /// A short description for traces and progress lines, such as
    /// `openai:gpt-4o-mini at https://api.openai.com/v1`; never a secret.
    fn describe(&self) -> String;
}

impl Model for Provider {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, ProviderError> {
        Provider::complete(self, request).await
    }

    fn describe(&self) -> String {
        Provider::describe(self)
    }
}

/// A configured model endpoint.
pub enum Provider {
    /// An OpenAI-compatible Chat Completions endpoint.
    OpenAi(openai::OpenAi),
    /// Anthropic's Messages API.
    Anthropic(anthropic::Anthropic),
}

impl Provider {
    /// Builds a provider from `PROVIDER:MODEL`, reading keys and base URLs
    /// from the environment (`base_url` overrides the environment's).
    pub fn from_spec(
        spec: &str,
        base_url: Option<&str>,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<Self, ProviderError> {
        let (kind, model) = spec.split_once(':').unwrap_or(("openai", spec));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| ProviderError::BadReply(e.to_string()))?;
        let endpoint = |variable: &str, default: &str| Endpoint {
            client: client.clone(),
            model: model.to_string(),
            base_url: self::base_url(base_url, variable, default),
            timeout,
            retry,
        };
        match kind {
            "openai" => Ok(Provider::OpenAi(openai::OpenAi::from_env(endpoint(
                "OPENAI_BASE_URL",
                openai::DEFAULT_BASE_URL,
            ))?)),
            "anthropic" => Ok(Provider::Anthropic(anthropic::Anthropic::from_env(
                endpoint("ANTHROPIC_BASE_URL", anthropic::DEFAULT_BASE_URL),
            )?)),
            other => Err(ProviderError::UnknownProvider(other.to_string())),
        }
    }

    /// Sends one request, with the retry policy.
    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> Result<ModelResponse, ProviderError> {
        match self {
            Provider::OpenAi(p) => p.complete(request).await,
            Provider::Anthropic(p) => p.complete(request).await,
        }
    }

    /// `KIND:MODEL at URL`, without credentials.
    pub fn describe(&self) -> String {
        match self {
            Provider::OpenAi(p) => {
                format!("openai:{} at {}", p.endpoint.model, p.endpoint.shown_url())
            }
            Provider::Anthropic(p) => {
                format!(
                    "anthropic:{} at {}",
                    p.endpoint.model,
                    p.endpoint.shown_url()
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(
            shown_url("https://me:pw@api.example.com/v1"),
            "https://api.example.com/v1"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1"
        );
    }
}
