//! What stands in front of the HTTP endpoint besides the connection caps
//! (`http_listener.rs`) and the stream caps (`http_streams.rs`):
//! bearer-token authentication, and a cap on sessions, so a session flood
//! cannot grow memory without bound.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use axum::middleware::Next;
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::RestoreOutcome;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use subtle::ConstantTimeEq;

/// The bearer token every request must carry, compared in constant time.
#[derive(Clone)]
pub struct BearerToken(Arc<[u8]>);

/// Never prints the token.
impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(…)")
    }
}

/// Why `--auth-token-file` cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum TokenFileError {
    /// The file cannot be read.
    #[error("--auth-token-file {}: cannot read it ({reason})", path.display())]
    Unreadable {
        /// The file given.
        path: std::path::PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// The token is too short to resist guessing.
    #[error(
        "--auth-token-file {}: the token is shorter than 16 characters; use a long random one \
         (for example: head -c 32 /dev/urandom | base64)",
        path.display()
    )]
    TooShort {
        /// The file given.
        path: std::path::PathBuf,
    },
}

impl BearerToken {
    /// Reads the token from a file (surrounding whitespace trimmed); a
    /// token shorter than 16 characters is refused as guessable.
    pub fn from_file(path: &std::path::Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| TokenFileError::Unreadable {
            path: path.to_path_buf(),
            reason: crate::sandbox::io_reason(&e),
        })?;
        let token = text.trim();
        if token.len() < 16 {
            return Err(TokenFileError::TooShort {
                path: path.to_path_buf(),
            });
        }
        Ok(BearerToken(token.as_bytes().into()))
    }

    fn accepts(&self, presented: &[u8]) -> bool {
        presented.ct_eq(&self.0).into()
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub(crate) fn bearer_of(request: &Request<Body>) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Answers 401 unless the request carries `Authorization: Bearer <token>`.
pub(crate) async fn require_bearer(
    token: BearerToken,
    request: Request<Body>,
    next: Next,
) -> Response<Body> {
    let presented = bearer_of(&request).map(str::as_bytes);
    if presented.is_some_and(|p| token.accepts(p)) {
        return next.run(request).await;
    }
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(header::WWW_AUTHENTICATE, "Bearer")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            r#"{"error":"unauthorized: this MCP endpoint needs Authorization: Bearer <token>, the token the server was started with (--auth-token-file)"}"#,
        ))
        .expect("a static response")
}

/// Sessions (2025-11-25) open at once by default.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// rmcp's in-memory sessions with a cap: a client that would open one more
/// is refused until another session ends (sessions idle for five minutes
/// end by themselves), so a flood of sessions cannot grow memory without
/// bound.
pub(crate) struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
}

impl CappedSessions {
    pub(crate) fn new(max: usize) -> Self {
        CappedSessions {
            inner: LocalSessionManager::default(),
            max: max.max(1),
        }
    }

    /// Sessions open now.
    pub(crate) async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionLimitError {
    #[error(
        "the server has {max} open sessions, its limit (--max-sessions); close an unused session \
         or retry after one ends"
    )]
    Full { max: usize },
    #[error(transparent)]
    Inner(#[from] LocalSessionManagerError),
}

type SessionResult<T> = Result<T, SessionLimitError>;

impl SessionManager for CappedSessions {
    type Error = SessionLimitError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> SessionResult<(SessionId, Self::Transport)> {
        if self.inner.sessions.read().await.len() >= self.max {
            return Err(SessionLimitError::Full { max: self.max });
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> SessionResult<ServerJsonRpcMessage> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    /// A session another replica started, re-created here from the shared
    /// state store; it counts against the cap like any other.
    async fn restore_session(
        &self,
        id: SessionId,
    ) -> SessionResult<RestoreOutcome<Self::Transport>> {
        if self.inner.sessions.read().await.len() >= self.max {
            return Err(SessionLimitError::Full { max: self.max });
        }
        Ok(self.inner.restore_session(id).await?)
    }

    async fn has_session(&self, id: &SessionId) -> SessionResult<bool> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> SessionResult<()> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> SessionResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> SessionResult<()> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> SessionResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> SessionResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }
}
