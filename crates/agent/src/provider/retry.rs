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
    /// The waits before each retry: doubling from `base_delay`, with
    /// random jitter so clients that failed together do not retry
    /// together, and at most `max_delay`; `retries` of them.
    fn delays(&self) -> impl Iterator<Item = Duration> + use<> {
        use backon::BackoffBuilder;
        let max = self.max_delay;
        backon::ExponentialBuilder::default()
            .with_min_delay(self.base_delay)
            .with_max_delay(max)
            .with_max_times(self.retries as usize)
            .with_jitter()
            .build()
            .map(move |delay| delay.min(max))
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
pub(super) async fn send_json(
    url: &str,
    timeout: Duration,
    policy: RetryPolicy,
    build: impl Fn() -> RequestBuilder,
) -> Result<serde_json::Value, ProviderError> {
    let mut delays = policy.delays();
    let mut connect_retried = false;
    loop {
        let outcome = build().send().await;
        let delay = match outcome {
            Ok(response) if response.status().is_success() => {
                return response.json().await.map_err(|e| {
                    ProviderError::BadReply(format!("the body is not the expected JSON ({e})"))
                });
            }
            Ok(response) if retryable(response.status()) => {
                let Some(backoff) = delays.next() else {
                    return Err(http_error(url, response).await);
                };
                let wait = retry_after(&response).unwrap_or(backoff);
                tracing::warn!(
                    "{url} answered {}; retrying in {} ms",
                    response.status(),
                    wait.as_millis()
                );
                wait.min(policy.max_delay)
            }
            Ok(response) => return Err(http_error(url, response).await),
            Err(e) if e.is_timeout() => {
                return Err(ProviderError::Timeout {
                    url: url.to_string(),
                    timeout,
                });
            }
            // A refused connection is retried once: a local server may be
            // starting; past that, the message says what to check.
            Err(e) if e.is_connect() && !connect_retried && policy.retries > 0 => {
                connect_retried = true;
                policy.base_delay
            }
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
        tokio::time::sleep(delay).await;
    }
}

/// A response that will not be retried, as the error the caller sees.
async fn http_error(url: &str, response: Response) -> ProviderError {
    let status = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    ProviderError::Http {
        url: url.to_string(),
        status,
        body: crate::trace::clip(&body, 300),
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
    fn delays_grow_are_capped_and_run_out() {
        let p = RetryPolicy {
            retries: 8,
            ..RetryPolicy::default()
        };
        let delays: Vec<Duration> = p.delays().collect();
        assert_eq!(delays.len(), 8);
        assert!(delays[0] >= p.base_delay, "{delays:?}");
        assert!(delays[1] >= 2 * p.base_delay, "{delays:?}");
        assert!(delays.iter().all(|d| *d <= p.max_delay), "{delays:?}");
        assert_eq!(delays[7], p.max_delay, "{delays:?}");
    }
}
