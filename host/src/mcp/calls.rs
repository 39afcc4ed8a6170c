//! Running a sandboxed call for a client: the call limit, cancellation,
//! progress notifications and the audit record around it.

use std::future::Future;
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tokio_util::sync::CancellationToken;

use super::host::{CallRecord, Host};
use crate::sandbox::{SandboxError, Usage};

/// Calls that run longer than this report progress, when asked to.
pub const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Where progress goes: the client that asked, under its token.
pub struct ProgressSink {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

impl ProgressSink {
    pub fn from_context(context: &RequestContext<RoleServer>) -> Option<Self> {
        context.meta.get_progress_token().map(|token| ProgressSink {
            peer: context.peer.clone(),
            token,
        })
    }
}

/// The client's name and version, for the audit log.
pub fn client_name(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .peer
        .peer_info()
        .map(|info| format!("{} {}", info.client_info.name, info.client_info.version))
}

/// The idempotency key a client sent with this request, if any.
pub fn idempotency_key(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .meta
        .get(super::audit::IDEMPOTENCY_META_KEY)
        .and_then(|v| v.as_str())
        .map(String::from)
}

/// Runs `call` under the server's concurrency limit. Cancelling `ct` drops
/// the call, which stops the guest at its next epoch tick.
pub async fn supervise<T>(
    host: &Host,
    record: &CallRecord<'_>,
    ct: &CancellationToken,
    progress: Option<ProgressSink>,
    call: impl Future<Output = Result<(T, Usage), SandboxError>>,
) -> Result<T, SandboxError> {
    let started = Instant::now();
    let result = tokio::select! {
        biased;
        _ = ct.cancelled() => Err(SandboxError::Cancelled),
        result = async {
            let _slot = host.call_slot().await?;
            with_progress(progress, record.tool, call).await
        } => result,
    };
    match &result {
        Ok((_, usage)) => host.record(record, "ok", started, Some(usage.fuel)),
        Err(e) => host.record(record, e.code(), started, None),
    }
    result.map(|(value, _)| value)
}

/// Sends `notifications/progress` every second once the call has run for
/// [`PROGRESS_AFTER`].
async fn with_progress<T>(
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
