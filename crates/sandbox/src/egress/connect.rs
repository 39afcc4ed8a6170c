//! Connecting an admitted request: resolve, refuse internal addresses the
//! grant does not name, connect (TLS for https), send, and count the
//! response against the call's byte cap.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use super::address::is_internal;
use super::admission::{Admitted, NetLog, lock};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// Resolves, checks the addresses, connects (TLS for https), sends, and
/// returns the response with a counting body.
pub(super) async fn fetch(
    mut request: http::Request<WasiBody>,
    target: Admitted,
    options: Option<RequestOptions>,
    deadline: Instant,
    cap: u64,
    log: Arc<Mutex<NetLog>>,
) -> SendResult {
    let left = || deadline.saturating_duration_since(Instant::now());
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(CONNECT_TIMEOUT)
        .min(left());
    let first_byte_timeout = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(FIRST_BYTE_TIMEOUT)
        .min(left());

    let addresses: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, target.port)],
        Err(_) => tokio::time::timeout(
            connect_timeout,
            tokio::net::lookup_host((target.host.as_str(), target.port)),
        )
        .await
        .map_err(|_| HttpError::DnsTimeout)?
        .map_err(|_| HttpError::DestinationNotFound)?
        .collect(),
    };
    let allowed: Vec<SocketAddr> = addresses
        .into_iter()
        .filter(|a| target.named == Some(a.ip()) || !is_internal(a.ip()))
        .collect();
    if allowed.is_empty() {
        let mut log = lock(&log);
        log.requests[target.index].outcome = "internal-address".into();
        log.refusals.push(format!(
            "{} resolves only to internal addresses (loopback, private or link-local), which are \
             refused unless the grant names the address itself, e.g. --allow-net SKILL:127.0.0.1:{}",
            target.host, target.port
        ));
        return Err(HttpError::DestinationIpProhibited);
    }

    let tcp = tokio::time::timeout(connect_timeout, TcpStream::connect(&allowed[..]))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => HttpError::ConnectionRefused,
            _ => HttpError::Connect(e),
        })?;
    let stream: Box<dyn Stream> = if target.tls {
        Box::new(tls_connect(&target.host, tcp, connect_timeout).await?)
    } else {
        Box::new(tcp)
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(HttpError::from)?;
    // The connection is driven beside the request; it ends with the
    // response, or with the call's deadline at the latest.
    let until = left() + Duration::from_secs(1);
    tokio::spawn(async move {
        let _ = tokio::time::timeout(until, connection).await;
    });

    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let response = tokio::time::timeout(first_byte_timeout, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)?
        .map_err(HttpError::from)?;
    {
        let mut log = lock(&log);
        log.requests[target.index].status = Some(response.status().as_u16());
        log.requests[target.index].outcome = "ok".into();
    }
    let index = target.index;
    let response = response.map(|incoming| {
        CountingBody {
            inner: incoming,
            log,
            index,
            cap,
        }
        .boxed_unsync()
    });
    Ok((response, Box::new(async { Ok(()) })))
}

#[cfg(feature = "tls")]
async fn tls_connect(
    host: &str,
    tcp: TcpStream,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
    let config = tls_config().ok_or(HttpError::TlsProtocolError)?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| HttpError::TlsCertificateError)?;
    let connector = tokio_rustls::TlsConnector::from(config);
    tokio::time::timeout(timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Tls)
}

/// The TLS client configuration, built once per process: the system's
/// roots are read from disk, and parsed, only the first time a guest
/// reaches an https host.
#[cfg(feature = "tls")]
fn tls_config() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: std::sync::OnceLock<Option<Arc<rustls::ClientConfig>>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
            Some(Arc::new(config))
        })
        .clone()
}

/// Never reached: [`Egress::admit`] refuses https:// without the feature.
#[cfg(not(feature = "tls"))]
async fn tls_connect(
    _host: &str,
    _tcp: TcpStream,
    _timeout: Duration,
) -> Result<TcpStream, HttpError> {
    Err(HttpError::HttpRequestDenied)
}

/// A response body that counts what it passes against the call's cap.
struct CountingBody {
    inner: hyper::body::Incoming,
    log: Arc<Mutex<NetLog>>,
    index: usize,
    cap: u64,
}

impl Body for CountingBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(HttpError::from(e)))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let Some(data) = frame.data_ref() {
            let mut log = lock(&self.log);
            let len = data.len() as u64;
            log.response_bytes += len;
            log.requests[self.index].bytes += len;
            if log.response_bytes > self.cap {
                log.overflowed = true;
                log.requests[self.index].outcome = "response-cap".into();
                return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(self.cap)))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}
