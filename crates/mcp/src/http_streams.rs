//! The standalone event streams (`GET /mcp`) a client holds open.
//!
//! Each one holds a connection for as long as it lasts, so they are capped:
//! one per session, and a number per principal (the OAuth subject, else
//! the client's address). A stream on which nothing but keep-alive comments
//! has been sent for [`STREAM_IDLE_TIMEOUT`] is ended; the client
//! reconnects when it wants events again, as SSE clients do.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use axum::middleware::Next;
use bytes::Bytes;
use http_body::Frame;

/// Standalone streams one principal may hold open, by default.
pub const DEFAULT_MAX_STREAMS_PER_CLIENT: usize = 32;
/// A stream that has sent only keep-alives this long is ended.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The streams open now.
pub(crate) struct StreamGuard {
    max_per_principal: usize,
    idle: Duration,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    by_principal: HashMap<String, usize>,
    sessions: HashSet<String>,
}

impl StreamGuard {
    pub(crate) fn new(max_per_principal: usize, idle: Duration) -> Arc<Self> {
        Arc::new(StreamGuard {
            max_per_principal: max_per_principal.max(1),
            idle,
            open: Mutex::new(Open::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn claim(self: &Arc<Self>, principal: String, session: String) -> Result<Claim, Refused> {
        let mut open = self.lock();
        if open.sessions.contains(&session) {
            return Err(Refused::SessionHasOne);
        }
        let held = open.by_principal.get(&principal).copied().unwrap_or(0);
        if held >= self.max_per_principal {
            return Err(Refused::PrincipalFull {
                max: self.max_per_principal,
            });
        }
        *open.by_principal.entry(principal.clone()).or_default() += 1;
        open.sessions.insert(session.clone());
        Ok(Claim {
            guard: self.clone(),
            principal,
            session,
        })
    }
}

enum Refused {
    SessionHasOne,
    PrincipalFull { max: usize },
}

impl Refused {
    fn response(&self) -> Response<Body> {
        let (status, why) = match self {
            Refused::SessionHasOne => (
                StatusCode::CONFLICT,
                "this session already has its event stream open (GET /mcp); use that one, or \
                 close it first"
                    .to_string(),
            ),
            Refused::PrincipalFull { max } => (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "you hold {max} open event streams (GET /mcp), the limit per client \
                     (--max-streams-per-client); close a session you no longer use"
                ),
            ),
        };
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::json!({ "error": why }).to_string()))
            .expect("a static response")
    }
}

/// A stream's place, given back when its body is dropped.
struct Claim {
    guard: Arc<StreamGuard>,
    principal: String,
    session: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut open = self.guard.lock();
        open.sessions.remove(&self.session);
        if let Some(n) = open.by_principal.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                open.by_principal.remove(&self.principal);
            }
        }
    }
}

/// Caps `GET /mcp` streams; everything else passes through.
pub(crate) async fn cap_streams(
    guard: Arc<StreamGuard>,
    request: Request<Body>,
    next: Next,
) -> Response<Body> {
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let principal = super::http_principal::principal_in(request.extensions());
    let (true, Some(session), Some(principal)) =
        (request.method() == http::Method::GET, session, principal)
    else {
        return next.run(request).await;
    };
    let claim = match guard.claim(principal, session) {
        Ok(claim) => claim,
        Err(refused) => return refused.response(),
    };
    let response = next.run(request).await;
    let streaming = response.status() == StatusCode::OK
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streaming {
        return response;
    }
    let idle = guard.idle;
    response.map(|body| {
        Body::new(WatchedBody {
            inner: body,
            _claim: claim,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        })
    })
}

/// An event stream's body that ends after `idle` without an event, and
/// gives its claim back when dropped.
struct WatchedBody {
    inner: Body,
    _claim: Claim,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                // SSE comments (`:` lines) are keep-alives, not events.
                let is_event = frame.data_ref().is_some_and(|d| !d.starts_with(b":"));
                if is_event {
                    let next = tokio::time::Instant::now() + self.idle;
                    self.deadline.as_mut().reset(next);
                }
            }
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
            }
            Poll::Ready(_) => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}
