//! Model providers: OpenAI-compatible Chat Completions and Anthropic
//! Messages, over real HTTP with retries.

pub mod anthropic;
pub mod openai;
mod retry;

use std::time::Duration;

use super::conversation::{Message, ToolCall, ToolDef};

pub use retry::RetryPolicy;

/// One request to a model.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolDef],
}

/// Tokens a provider reports for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

#[derive(Debug, Clone)]
pub struct ModelResponse {
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// The provider's own stop reason, for the trace.
    pub stop_reason: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error(
        "{variable} is not set; export it with your API key (or point {base_variable} at a local server that needs none)"
    )]
    MissingKey {
        variable: &'static str,
        base_variable: &'static str,
    },
    #[error(
        "cannot reach the model endpoint {url}: {reason}. Check that the server is running and the URL is right"
    )]
    Unreachable { url: String, reason: String },
    #[error("the model endpoint {url} answered HTTP {status}: {body}")]
    Http {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the model endpoint {url} did not answer within {} s", timeout.as_secs())]
    Timeout { url: String, timeout: Duration },
    #[error("the model's reply could not be read: {0}")]
    BadReply(String),
    #[error("unknown provider `{0}`; use openai:MODEL or anthropic:MODEL")]
    UnknownProvider(String),
    #[error(
        "refusing to send the API key to {url}: it is plain http:// to a host that is not this \
         machine, so anyone on the path could read it. Use https://, or a loopback address for a \
         local server"
    )]
    InsecureTransport { url: String },
}

/// `url` without its userinfo (`user:password@`), for anything printed,
/// traced or put in an error.
pub fn shown_url(url: &str) -> String {
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
    reqwest::Url::parse(url).is_ok_and(|u| crate::net::https_or_loopback(&u))
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

/// A configured model endpoint.
pub enum Provider {
    OpenAi(openai::OpenAi),
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

    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> Result<ModelResponse, ProviderError> {
        match self {
            Provider::OpenAi(p) => p.complete(request).await,
            Provider::Anthropic(p) => p.complete(request).await,
        }
    }

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
