//! Request context for calls: the client's name, its idempotency key, and
//! progress notifications while a call runs.

use std::future::Future;
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext, RoleServer};

use skillbox_call::trace::{TRACEPARENT_META_KEY, TraceContext};

/// Calls that run longer than this report progress, when asked to.
pub(super) const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Where progress goes: the client that asked, under its token.
pub(crate) struct ProgressSink {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

impl ProgressSink {
    pub(crate) fn from_context(context: &RequestContext<RoleServer>) -> Option<Self> {
        context.meta.get_progress_token().map(|token| ProgressSink {
            peer: context.peer.clone(),
            token,
        })
    }
}

/// The `_meta` key under which a stateless (2026-07-28) client names
/// itself on every request.
const CLIENT_INFO_META_KEY: &str = "io.modelcontextprotocol/clientInfo";

/// The client's name and version, for the audit log: from the session's
/// `initialize`, else from the request's `_meta` (stateless clients name
/// themselves per request).
pub(super) fn client_name(context: &RequestContext<RoleServer>) -> Option<String> {
    let name = match super::peer::session(context) {
        Some(session) => format!(
            "{} {}",
            session.client_info.name, session.client_info.version
        ),
        None => {
            let info = context.meta.get(CLIENT_INFO_META_KEY)?;
            let name = info.get("name")?.as_str()?;
            let version = info.get("version").and_then(|v| v.as_str()).unwrap_or("");
            format!("{name} {version}")
        }
    };
    let name = name.trim_end();
    // Client-chosen text: kept short in every audit line.
    Some(name[..name.floor_char_boundary(MAX_CLIENT_NAME)].to_string())
}

/// Bytes of a client's name and version kept for the audit log.
const MAX_CLIENT_NAME: usize = 160;

/// The idempotency key a client sent with this request, if any.
pub(super) fn idempotency_key(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .meta
        .get(skillbox_call::audit::IDEMPOTENCY_META_KEY)
        .and_then(|v| v.as_str())
        .map(String::from)
}

/// The W3C trace context of a request: `_meta.traceparent` (the
/// 2026-07-28 convention), else the HTTP `traceparent` header. Anything
/// that does not parse is ignored.
pub(super) fn trace_context(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    let from_meta = context
        .meta
        .get(TRACEPARENT_META_KEY)
        .and_then(|v| v.as_str())
        .and_then(TraceContext::parse);
    from_meta.or_else(|| trace_header(context))
}

#[cfg(feature = "http")]
fn trace_header(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    let header = parts.headers.get(TRACEPARENT_META_KEY)?.to_str().ok()?;
    TraceContext::parse(header)
}

#[cfg(not(feature = "http"))]
fn trace_header(_context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    None
}

/// Runs `call`, sending `notifications/progress` every second once it has
/// run for [`PROGRESS_AFTER`].
pub(super) async fn with_progress<T>(
    sink: Option<ProgressSink>,
    label: &str,
    call: impl Future<Output = T>,
) -> T {
    let Some(sink) = sink else {
        return call.await;
    };
    let started = Instant::now();
    let reporter = async {
        tokio::time::sleep(PROGRESS_AFTER).await;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let secs = started.elapsed().as_secs_f64().floor();
            let mut param = ProgressNotificationParam::new(sink.token.clone(), secs);
            param.message = Some(format!("{label}: running for {secs:.0} s"));
            if sink.peer.notify_progress(param).await.is_err() {
                break;
            }
        }
        // The client is gone; the call itself decides when this ends.
        std::future::pending::<()>().await;
    };
    tokio::select! {
        result = call => result,
        () = reporter => unreachable!("the reporter never completes"),
    }
}
