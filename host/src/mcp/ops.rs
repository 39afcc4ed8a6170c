//! Operations endpoints beside `/mcp`, for load balancers, orchestrators
//! and Prometheus:
//!
//! - `/healthz`: the process serves HTTP (liveness). No authentication.
//! - `/readyz`: the catalog is loaded and every component is compiled or
//!   loaded from the cache, and the server is not draining (readiness).
//!   No authentication; the body holds counts, never names or paths.
//! - `/metrics`: the Prometheus text format, behind the same
//!   authentication as `/mcp` (it names the tools).
//!
//! And the drain on shutdown: readiness turns false, new connections are
//! refused, and requests in flight get a grace period to finish.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;
use tokio::sync::Notify;

use super::server::Shared;

/// Where a server is in its life, as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Readiness {
    state: AtomicU8,
    /// Components whose code could not be loaded during warm-up.
    failed: AtomicUsize,
}

const WARMING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

impl Readiness {
    fn set(&self, state: u8) {
        self.state.store(state, Ordering::SeqCst);
    }

    /// The server is stopping: tell balancers to send nothing more.
    pub fn drain(&self) {
        self.set(DRAINING);
    }
}

/// Requests being answered right now, so a drain knows when it is done.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until no request is in flight, or `grace` has passed; returns
    /// how many were still in flight then.
    pub async fn drained(&self, grace: Duration) -> usize {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.count() == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(grace, wait).await;
        self.count()
    }
}

struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Counts a request as in flight until its response body is sent. Not
/// notification streams (a GET on `/mcp`, a 2026-07-28
/// `subscriptions/listen`): they last as long as the client wants, and
/// waiting for them would hold every shutdown to its full grace.
pub async fn track(
    in_flight: Arc<InFlight>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let stream = request.method() != axum::http::Method::POST
        || request.headers().get("mcp-method").map(|m| m.as_bytes())
            == Some(b"subscriptions/listen");
    if stream {
        return next.run(request).await;
    }
    let guard = in_flight.enter();
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    let body = axum::body::Body::new(GuardedBody {
        inner: body,
        _guard: guard,
    });
    axum::response::Response::from_parts(parts, body)
}

/// A response body that keeps its request counted until it is sent.
struct GuardedBody {
    inner: axum::body::Body,
    _guard: InFlightGuard,
}

impl http_body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Loads every skill's components once, from the cache where it has
/// them, then marks the server ready. Runs once per server.
pub async fn warm_up(shared: Arc<Shared>) {
    let host = shared.host.clone();
    let skills: Vec<_> = host.catalog().skills().cloned().collect();
    host.tools_of_many(&skills).await;
    let failed = skills
        .iter()
        .map(|s| host.problems_of(s.name()).len())
        .sum();
    shared.readiness.failed.store(failed, Ordering::SeqCst);
    if shared.readiness.state.load(Ordering::SeqCst) == WARMING {
        shared.readiness.set(READY);
    }
}

/// `/healthz` and `/readyz`: public, and saying nothing sensitive.
pub fn probes(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route(
            "/healthz",
            axum::routing::get(|| async {
                json_response(StatusCode::OK, &json!({"status": "alive"}))
            }),
        )
        .route(
            "/readyz",
            axum::routing::get(move || {
                let shared = shared.clone();
                async move { readyz(&shared) }
            }),
        )
}

fn readyz(shared: &Shared) -> axum::response::Response {
    let (from_cache, compiled) = shared.host.sandbox.load_counts();
    let state = shared.readiness.state.load(Ordering::SeqCst);
    let mut body = json!({
        "status": match state { READY => "ready", DRAINING => "draining", _ => "warming" },
        "skills": shared.host.catalog().len(),
        "components": {
            "from_cache": from_cache,
            "compiled_here": compiled,
            "failed": shared.readiness.failed.load(Ordering::SeqCst),
        },
    });
    if state == WARMING {
        body["hint"] = json!(
            "loading the skills' components; a replica whose compiled-code cache was filled \
             with `skillbox compile` is ready in moments, one that compiles takes longer"
        );
    } else if compiled > 0 {
        body["hint"] = json!(format!(
            "this replica compiled {compiled} component(s) itself; fill the shared cache with \
             `skillbox compile SKILLS_DIR --cache DIR` so new replicas start without compiling"
        ));
    }
    let status = if state == READY {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &body)
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `/metrics`, for behind the same authentication as `/mcp`.
pub fn metrics(
    shared: Arc<Shared>,
    open_sessions: Arc<super::http_guard::CappedSessions>,
) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (shared, open_sessions) = (shared.clone(), open_sessions.clone());
            async move {
                shared.host.metrics.set_sessions(open_sessions.open().await);
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    shared.host.metrics_text(),
                )
            }
        }),
    )
}
