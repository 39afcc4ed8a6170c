//! A server's life as HTTP sees it: warming, ready, draining; and the
//! requests in flight that a drain waits for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Where a server is in its life, as `/readyz` reports it.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    state: AtomicU8,
    /// Components whose code could not be loaded during warm-up.
    failed: AtomicUsize,
    /// Whether the shared state store answered when last asked (true
    /// when there is none).
    state_unreachable: AtomicBool,
}

const WARMING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

/// What `/readyz` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Warming,
    Ready,
    Draining,
}

impl Readiness {
    fn set(&self, state: u8) {
        self.state.store(state, Ordering::SeqCst);
    }

    /// The warm-up finished with `failed` components that did not load;
    /// ready unless the server is already draining.
    pub(crate) fn warmed(&self, failed: usize) {
        self.failed.store(failed, Ordering::SeqCst);
        let _ = self
            .state
            .compare_exchange(WARMING, READY, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The server is stopping: tell balancers to send nothing more.
    pub(crate) fn drain(&self) {
        self.set(DRAINING);
    }

    pub(crate) fn phase(&self) -> Phase {
        match self.state.load(Ordering::SeqCst) {
            READY => Phase::Ready,
            DRAINING => Phase::Draining,
            _ => Phase::Warming,
        }
    }

    /// Components whose code could not be loaded during warm-up.
    pub(crate) fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// Records whether the shared state store answers; returns whether
    /// that changed.
    pub(crate) fn set_state_reachable(&self, reachable: bool) -> bool {
        self.state_unreachable.swap(!reachable, Ordering::SeqCst) == reachable
    }

    pub(crate) fn state_reachable(&self) -> bool {
        !self.state_unreachable.load(Ordering::SeqCst)
    }
}

/// Requests being answered right now, so a drain knows when it is done.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until no request is in flight, or `grace` has passed; returns
    /// how many were still in flight then.
    pub(crate) async fn drained(&self, grace: Duration) -> usize {
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
pub(super) async fn track(
    in_flight: Arc<InFlight>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let stream = request.method() != http::Method::POST
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
