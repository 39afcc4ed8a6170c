//! Sending a request with retries: backoff with jitter on 429 and 5xx,
//! honouring `Retry-After`, and a request timeout.

use std::time::{Duration, SystemTime};

use reqwest::{RequestBuilder, Response, StatusCode};

use super::ProviderError;

/// How the built-in providers retry a failed request (429, 5xx, a dropped
/// connection): exponential backoff from `base_delay`, at most `max_delay`,
/// or the server's `Retry-After` when it sends one.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: u32,
    /// The first wait.
    pub base_delay: Duration,
    /// The longest wait.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(1 << attempt.min(16));
        let jitter_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() % 250)
            .unwrap_or(0);
        (exp + Duration::from_millis(u64::from(jitter_ms))).min(self.max_delay)
    }
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(response: &Response) -> Option<Duration> {
    let value = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    if let Ok(secs) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value.trim()).ok()?;
    when.duration_since(SystemTime::now())
        .ok()
        .or(Some(Duration::ZERO))
}

/// Sends the request built by `build`, retrying transient failures, and
/// returns the successful response's body as JSON.
pub async fn send_json(
    url: &str,
    timeout: Duration,
    policy: RetryPolicy,
    build: impl Fn() -> RequestBuilder,
) -> Result<serde_json::Value, ProviderError> {
    let mut attempt = 0;
    loop {
        let outcome = build().send().await;
        let delay = match outcome {
            Ok(response) if response.status().is_success() => {
                return response.json().await.map_err(|e| {
                    ProviderError::BadReply(format!("the body is not the expected JSON ({e})"))
                });
            }
            Ok(response) if retryable(response.status()) && attempt < policy.retries => {
                let wait = retry_after(&response).unwrap_or_else(|| policy.backoff(attempt));
                tracing::warn!(
                    "{url} answered {}; retrying in {} ms",
                    response.status(),
                    wait.as_millis()
                );
                wait.min(policy.max_delay)
            }
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.text().await.unwrap_or_default();
                return Err(ProviderError::Http {
                    url: url.to_string(),
                    status,
                    body: crate::agent::trace::clip(&body, 300),
                });
            }
            Err(e) if e.is_timeout() => {
                return Err(ProviderError::Timeout {
                    url: url.to_string(),
                    timeout,
                });
            }
            Err(e) if e.is_connect() && attempt < policy.retries.min(1) => policy.backoff(attempt),
            Err(e) => {
                let reason = if e.is_connect() {
                    "connection refused or no route".to_string()
                } else {
                    e.to_string()
                };
                return Err(ProviderError::Unreachable {
                    url: url.to_string(),
                    reason,
                });
            }
        };
        attempt += 1;
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_http_dates() {
        let t = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            784_111_777
        );
        assert!(httpdate::parse_http_date("soon").is_err());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        assert!(p.backoff(0) >= Duration::from_millis(500));
        assert!(p.backoff(1) >= Duration::from_millis(1000));
        assert_eq!(p.backoff(20), p.max_delay);
    }
}
