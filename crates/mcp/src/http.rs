//! MCP over Streamable HTTP at `/mcp`.
//!
//! Loopback by default, with `Host` and `Origin` validated against loopback
//! names (the DNS-rebinding defence) and a request-body cap. rmcp speaks
//! both the session style of 2025-11-25 and the stateless style of
//! 2026-07-28, chosen per request by the negotiated protocol version.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::http_guard::{BearerToken, CappedSessions, require_bearer};
use super::http_listener::{CappedListener, ClientAddr, ConnectionCaps, LANE_WAIT, Lane, Place};
use super::http_streams::StreamGuard;
use super::oauth::{self, Verifier};
use super::server::Shared;
use super::session::Session;
use super::shared_state::SharedSessions;
use super::{lifecycle, ops};
use axum::response::IntoResponse;

/// How the HTTP endpoint is exposed. Start from [`HttpOptions::new`]: a
/// loopback address needs nothing else.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Where to listen (port 0 picks a free port). Only loopback addresses
    /// are served without authentication.
    pub addr: SocketAddr,
    /// Extra `Host` names accepted besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Extra browser origins accepted besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Every request must carry this bearer token.
    pub auth: Option<BearerToken>,
    /// Every request must carry a JWT this verifier accepts.
    pub oauth: Option<Arc<Verifier>>,
    /// Serve a non-loopback address without authentication anyway.
    pub insecure_no_auth: bool,
    /// Connections served at once. Past it, and past a client's share,
    /// a connection is answered only on `/healthz` and `/readyz`.
    pub max_connections: usize,
    /// Connections one address may hold (behind a proxy, every client has
    /// the proxy's address: raise it to `max_connections` there).
    pub max_connections_per_client: usize,
    /// Standalone event streams (`GET /mcp`) one principal may hold; a
    /// session holds at most one.
    pub max_streams_per_client: usize,
    /// A standalone stream that sent only keep-alives this long is ended.
    pub stream_idle_timeout: Duration,
    /// 2025-11-25 sessions open at once.
    pub max_sessions: usize,
    /// On shutdown, how long requests in flight get to finish before they
    /// are cut off.
    pub shutdown_grace: Duration,
}

/// How long requests in flight get to finish on shutdown, by default:
/// inside the 30 seconds an orchestrator such as Kubernetes waits after
/// SIGTERM before it kills.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// The default cap on a request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

impl HttpOptions {
    /// Options for `addr` with the defaults: loopback `Host` names and
    /// origins only, no authentication, the default caps.
    pub fn new(addr: SocketAddr) -> Self {
        HttpOptions {
            addr,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            auth: None,
            oauth: None,
            insecure_no_auth: false,
            max_connections: super::http_listener::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: super::http_listener::DEFAULT_MAX_CONNECTIONS / 2,
            max_streams_per_client: super::http_streams::DEFAULT_MAX_STREAMS_PER_CLIENT,
            stream_idle_timeout: super::http_streams::STREAM_IDLE_TIMEOUT,
            max_sessions: super::http_guard::DEFAULT_MAX_SESSIONS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Parses `--http ADDR`: `PORT`, `:PORT`, `HOST:PORT`; a bare port binds
/// 127.0.0.1.
pub fn parse_addr(text: &str) -> Result<SocketAddr, AddrError> {
    let text = text.trim();
    let candidate = if let Ok(port) = text.trim_start_matches(':').parse::<u16>() {
        format!("127.0.0.1:{port}")
    } else {
        text.to_string()
    };
    candidate.parse().map_err(|_| AddrError {
        text: text.to_string(),
    })
}

/// `--http` was given something that is not a port or an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--http {text}: not an address; use PORT, 127.0.0.1:PORT or [::1]:PORT")]
pub struct AddrError {
    /// What was given.
    pub text: String,
}

fn config(options: &HttpOptions, shutdown: CancellationToken) -> StreamableHttpServerConfig {
    let port = options.addr.port();
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "::1"]
        .iter()
        .flat_map(|h| [h.to_string(), format!("{h}:{port}")])
        .collect();
    hosts.extend(options.allowed_hosts.iter().cloned());
    let mut origins: Vec<String> = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    origins.extend(options.allowed_origins.iter().cloned());
    StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_body_bytes)
        // A stateless reply with nothing streamed before it is sent as
        // plain JSON, which costs both sides less than an event stream.
        .with_json_response(true)
        .with_cancellation_token(shutdown)
}

/// Binds and serves until `shutdown` is cancelled, then drains: see
/// [`serve_connections`]. Returns the bound address once listening (port
/// 0 picks a free port).
pub(crate) async fn serve(
    server: Arc<Shared>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    refuse_unauthenticated(&options)?;
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.addr))?;
    let bound = listener.local_addr()?;
    let bound_options = HttpOptions {
        addr: bound,
        ..options
    };
    // Requests are cancelled only when the drain's grace is over, not when
    // shutdown begins.
    let cut_off = CancellationToken::new();
    let full = router(server.clone(), &bound_options, cut_off.clone());
    let routers = Routers {
        probe_lane: probe_lane(server.clone(), &bound_options, full.clone()),
        full,
    };
    let caps = ConnectionCaps {
        max: bound_options.max_connections,
        per_address: bound_options.max_connections_per_client,
    };
    let listener = CappedListener::new(listener, caps);
    let drain = Drain {
        server,
        grace: bound_options.shutdown_grace,
        cut_off,
    };
    let task = tokio::spawn(serve_connections(listener, routers, shutdown, drain));
    Ok((bound, task))
}

/// A non-loopback address needs authentication, unless the user said
/// otherwise in so many words.
fn refuse_unauthenticated(options: &HttpOptions) -> anyhow::Result<()> {
    let authenticated = options.auth.is_some() || options.oauth.is_some();
    if !options.addr.ip().is_loopback() && !authenticated && !options.insecure_no_auth {
        anyhow::bail!(
            "--http {}: refusing to serve a non-loopback address without authentication: anyone \
             who can reach it could run the skills with your grants. Pass --auth-token-file FILE \
             (clients send Authorization: Bearer <token>) or --oauth-issuer URL with \
             --oauth-resource URL (tokens from your authorization server), or bind 127.0.0.1 and \
             put an authenticating proxy in front; --insecure-no-auth overrides this",
            options.addr
        );
    }
    Ok(())
}

/// The `/mcp` endpoint and `/metrics` (and the OAuth metadata when OAuth
/// is on) as an axum router, with the authentication the options ask for,
/// and the public probes `/healthz` and `/readyz` beside them.
/// Cancelling `cut_off` ends the requests in flight.
pub(crate) fn router(
    server: Arc<Shared>,
    bound_options: &HttpOptions,
    cut_off: CancellationToken,
) -> axum::Router {
    let sessions = Arc::new(CappedSessions::new(bound_options.max_sessions));
    let mut config = config(bound_options, cut_off);
    if server.state.is_shared() {
        config.session_store = Some(Arc::new(SharedSessions(server.state.clone())));
    }
    let service = StreamableHttpService::new(
        {
            let server = server.clone();
            move || Ok(Session::new(server.clone()))
        },
        sessions.clone(),
        config,
    );
    let streams = StreamGuard::new(
        bound_options.max_streams_per_client,
        bound_options.stream_idle_timeout,
    );
    let mut router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(session_ended_is_200))
        .layer(axum::middleware::from_fn(sessions_keep_their_revision))
        .layer(axum::middleware::from_fn(move |request, next| {
            super::http_streams::cap_streams(streams.clone(), request, next)
        }))
        .merge(ops::metrics(server.clone(), sessions));
    if let Some(token) = bound_options.auth.clone() {
        router = router.layer(axum::middleware::from_fn(move |request, next| {
            require_bearer(token.clone(), request, next)
        }));
    }
    if let Some(verifier) = bound_options.oauth.clone() {
        let guard = verifier.clone();
        router = router.layer(axum::middleware::from_fn(move |request, next| {
            oauth::require_token(guard.clone(), request, next)
        }));
        // The metadata is public: a client reads it to learn where to get
        // a token. Both the root form and the form with the resource's
        // path (RFC 9728) are served.
        let metadata = (
            [(http::header::CONTENT_TYPE, "application/json")],
            verifier.metadata().to_string(),
        );
        let resource_path = reqwest::Url::parse(&verifier.options().resource)
            .map(|u| u.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        let mut public = axum::Router::new().route(
            oauth::METADATA_PATH,
            axum::routing::get({
                let metadata = metadata.clone();
                move || async move { metadata }
            }),
        );
        if !resource_path.is_empty() {
            public = public.route(
                &format!("{}{resource_path}", oauth::METADATA_PATH),
                axum::routing::get(move || async move { metadata }),
            );
        }
        router = router.merge(public);
    }
    let in_flight = server.in_flight.clone();
    router
        .layer(axum::middleware::from_fn(move |request, next| {
            lifecycle::track(in_flight.clone(), request, next)
        }))
        .merge(ops::probes(server))
}

/// What a connection on the probe lane is served: the probes at once;
/// anything else once a full place frees up (then by `full`), or the
/// reason it was turned away.
fn probe_lane(server: Arc<Shared>, options: &HttpOptions, full: axum::Router) -> axum::Router {
    use tower::ServiceExt;
    let hint = format!(
        "--max-connections {}, --max-connections-per-client {}",
        options.max_connections, options.max_connections_per_client
    );
    ops::probes(server).fallback(move |request: axum::extract::Request| {
        let (full, hint) = (full.clone(), hint.clone());
        async move {
            let place = request.extensions().get::<Arc<Place>>().cloned();
            let promoted = match place {
                Some(place) => place.promote(LANE_WAIT).await,
                None => Err(Lane::ProbesOnlyListenerFull),
            };
            if let Err(lane) = promoted {
                let (status, body) = super::http_listener::turned_away(lane, &hint);
                let headers = [
                    (http::header::CONTENT_TYPE, "application/json"),
                    (http::header::RETRY_AFTER, "1"),
                ];
                return (status, headers, body).into_response();
            }
            match full.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    })
}

/// The routers a connection may be served with, by lane.
struct Routers {
    full: axum::Router,
    probe_lane: axum::Router,
}

/// A request that names a session (`Mcp-Session-Id`, which only 2025-11-25
/// has) but says it speaks a stateless revision is refused: the MCP library
/// would serve it outside the session, without the session's rules (such
/// as loading a skill before its tools run). A session's revision is the
/// one its `initialize` chose.
async fn sessions_keep_their_revision(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let headers = request.headers();
    let stateless_in_a_session = headers.contains_key("mcp-session-id")
        && headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(super::peer::is_stateless_revision);
    if !stateless_in_a_session {
        return next.run(request).await;
    }
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32600,
            "message": "Invalid Request: this request names a session (Mcp-Session-Id), and a \
                session speaks the revision its initialize chose (2025-11-25). Send it with \
                MCP-Protocol-Version: 2025-11-25, or as a stateless request without \
                Mcp-Session-Id."
        }
    });
    (
        http::StatusCode::BAD_REQUEST,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A session ended with `DELETE /mcp` is answered 200, as the official
/// SDKs' servers answer it (the Python SDK accepts only 200 or 204 and
/// warns on every close otherwise); the MCP library answers 202.
async fn session_ended_is_200(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = request.method() == http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == http::StatusCode::ACCEPTED {
        *response.status_mut() = http::StatusCode::OK;
    }
    response
}

/// How long a client may take to send a request's headers, so a client
/// that trickles them cannot hold a connection slot.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What happens after the listener stops: who to mark as draining, how
/// long requests get, and the token that cuts them off.
struct Drain {
    server: Arc<Shared>,
    grace: Duration,
    cut_off: CancellationToken,
}

/// After the grace, how long connections get to close before the task
/// ends anyway.
const CLOSE_AFTER_CUT_OFF: Duration = Duration::from_secs(2);

/// Accepts connections until `shutdown`, serving each with HTTP/1.1 under
/// a header-read deadline (axum's own `serve` sets none), with the
/// client's address as [`ClientAddr`] for the per-client share.
///
/// Then drains: `/readyz` turns 503, the listening socket closes (a
/// balancer's next connection is refused and goes to another replica),
/// requests in flight get `drain.grace` to finish, and the audit log is
/// synced to disk.
async fn serve_connections(
    mut listener: CappedListener,
    routers: Routers,
    shutdown: CancellationToken,
    drain: Drain,
) {
    use axum::serve::Listener;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    // A probe-lane connection answers one request and closes.
    let mut once = http.clone();
    once.keep_alive(false);
    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let place = stream.place();
        let (router, builder) = match place.lane() {
            Lane::Full => (&routers.full, &http),
            _ => (&routers.probe_lane, &once),
        };
        let service = router
            .clone()
            .layer(axum::Extension(place))
            .layer(axum::Extension(axum::extract::ConnectInfo(ClientAddr(
                addr,
            ))));
        let connection = builder.serve_connection(
            hyper_util::rt::TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(service),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("HTTP connection ended: {e}");
            }
        });
    }
    drain.server.readiness.drain();
    drop(listener);
    let waiting = drain.server.in_flight.count();
    let left = drain.server.in_flight.drained(drain.grace).await;
    if left > 0 {
        tracing::warn!(
            "shutdown: {left} request(s) still running after the {} s grace were cut off              (their clients get an error; --shutdown-grace gives more time)",
            drain.grace.as_secs()
        );
    } else if waiting > 0 {
        tracing::info!("shutdown: {waiting} request(s) in flight finished");
    }
    drain.cut_off.cancel();
    let _ = tokio::time::timeout(CLOSE_AFTER_CUT_OFF, graceful.shutdown()).await;
    drain.server.host.sync_audit();
}

impl super::Server {
    /// Binds `options.addr` and serves Streamable HTTP at `/mcp`, with
    /// `/healthz`, `/readyz` and `/metrics` beside it, until `shutdown` is
    /// cancelled. Then it drains: `/readyz` turns 503, no connection is
    /// accepted, requests in flight get `options.shutdown_grace` to
    /// finish, and the audit log is synced; the task ends after that.
    /// Returns the bound address and the serving task. A non-loopback
    /// address without authentication is refused.
    pub async fn serve_http(
        &self,
        options: HttpOptions,
        shutdown: CancellationToken,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        self.watch_for_changes();
        self.warm_up();
        serve(self.shared().clone(), options, shutdown)
            .await
            .map_err(|e| std::io::Error::other(format!("{e:#}")))
    }

    /// The Streamable HTTP service as an axum router, to mount into an
    /// application of the embedder's own (`Router::merge`, or `nest` under
    /// a prefix). `options.addr` names the address clients use, for the
    /// `Host` header check; connection caps are the application's to set.
    /// The router also serves `/healthz`, `/readyz` and `/metrics` (see
    /// [`HttpOptions`]); cancelling `shutdown` ends requests in flight, so
    /// an application that drains does so before it cancels. A
    /// non-loopback address without authentication is refused.
    pub fn http_router(
        &self,
        options: &HttpOptions,
        shutdown: CancellationToken,
    ) -> std::io::Result<axum::Router> {
        refuse_unauthenticated(options).map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        self.watch_for_changes();
        self.warm_up();
        Ok(router(self.shared().clone(), options, shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_addr;

    #[test]
    fn a_bare_port_binds_loopback() {
        assert_eq!(parse_addr("8080").unwrap().to_string(), "127.0.0.1:8080");
        assert_eq!(parse_addr(":9").unwrap().to_string(), "127.0.0.1:9");
        assert_eq!(parse_addr("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(parse_addr("localhost").is_err());
    }
}
