//! What stands in front of the HTTP endpoint: bearer-token authentication,
//! a cap on open connections, a deadline for a new connection's first
//! bytes, and a cap on sessions, so idle or half-open connections and
//! session floods cannot pile up and starve real clients.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use axum::middleware::Next;
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections open at once by default; more wait to be accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// How long a new connection may take to send its first bytes.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

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
pub fn bearer_of(request: &Request<Body>) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Answers 401 unless the request carries `Authorization: Bearer <token>`.
pub async fn require_bearer(
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

/// The address a connection came from, in each request's extensions as
/// `ConnectInfo<ClientAddr>`.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// A listener that keeps at most `max` connections open: the next one is
/// accepted only when one closes.
pub struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
}

impl CappedListener {
    pub fn new(inner: TcpListener, max: usize) -> Self {
        CappedListener {
            inner,
            slots: Arc::new(Semaphore::new(max.max(1))),
        }
    }
}

impl axum::serve::Listener for CappedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedStream, SocketAddr) {
        let permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    return (GuardedStream::new(stream, permit), addr);
                }
                // Out of file descriptors and the like: wait, then retry.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that holds its slot until it closes, and is dropped if it
/// sends nothing within [`FIRST_BYTE_TIMEOUT`].
pub struct GuardedStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    first_byte: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl GuardedStream {
    fn new(stream: TcpStream, slot: OwnedSemaphorePermit) -> Self {
        GuardedStream {
            stream,
            _slot: slot,
            first_byte: Some(Box::pin(tokio::time::sleep(FIRST_BYTE_TIMEOUT))),
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.first_byte = None,
            Poll::Pending => {
                if let Some(deadline) = self.first_byte.as_mut()
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing in time",
                    )));
                }
            }
            _ => {}
        }
        polled
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Sessions (2025-11-25) open at once by default.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// rmcp's in-memory sessions with a cap: a client that would open one more
/// is refused until another session ends (sessions idle for five minutes
/// end by themselves), so a flood of sessions cannot grow memory without
/// bound.
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
}

impl CappedSessions {
    pub fn new(max: usize) -> Self {
        CappedSessions {
            inner: LocalSessionManager::default(),
            max: max.max(1),
        }
    }

    /// Sessions open now.
    pub async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionLimitError {
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
