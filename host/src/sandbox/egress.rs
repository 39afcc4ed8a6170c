//! Outgoing HTTP for guests (`wasi:http`), deny by default.
//!
//! wasmtime-wasi-http hands every outgoing request to [`Egress`], which
//! decides before any connection is made:
//! - the request's `host:port` must match a rule the call was granted (the
//!   skill requested it *and* the user gave it; see `skill::policy`);
//! - the addresses it resolves to must not be loopback, private, link-local
//!   or other internal ranges, unless the rule names that address itself, so
//!   DNS rebinding cannot turn a public name into the host's own network;
//! - a call has a cap on requests and on response bytes, and every wait is
//!   bounded by the call's own deadline.
//!
//! Redirects are not followed here: a guest that follows one sends a new
//! request, which is checked again. Every request is logged for the audit
//! record; a refusal is remembered so the host can report it as `Denied`.
//! `wasi:sockets` stays disabled: this is the only way out.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// One `host[:port]` a call may reach. Without a port, 80 and 443 match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct NetRule {
    /// A host name or IP address, lowercase.
    pub host: String,
    /// The port; `None` matches 80 and 443.
    pub port: Option<u16>,
}

impl NetRule {
    fn matches(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host)
            && self.port.map_or(port == 80 || port == 443, |p| p == port)
    }

    /// The address this rule names, when its host is an IP literal: such a
    /// rule is an explicit grant of that address, internal or not.
    fn named_address(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

impl std::fmt::Display for NetRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(port) => write!(f, "{host}:{port}"),
            None => f.write_str(&host),
        }
    }
}

impl FromStr for NetRule {
    type Err = String;

    /// `host`, `host:port`, `[v6]` or `[v6]:port`.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{text}` is not host[:port] (for example api.example.com:443 or 127.0.0.1:8080)"
            )
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err(bad()),
            }
        } else {
            match text.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        let valid_host = !host.is_empty()
            && (host.parse::<IpAddr>().is_ok()
                || host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        if !valid_host {
            return Err(bad());
        }
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?),
        };
        Ok(NetRule {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// Whether `ip` is on the host's own or a private network: loopback,
/// private, carrier-grade NAT, link-local (cloud metadata lives there),
/// unique-local, multicast, unspecified or broadcast.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// Per-call caps on outgoing HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NetLimits {
    pub requests: u32,
    pub response_bytes: u64,
}

/// One outgoing request, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NetRequest {
    pub host: String,
    pub port: u16,
    pub method: String,
    pub status: Option<u16>,
    pub bytes: u64,
    /// `ok`, `denied`, `internal-address`, `request-cap`, `response-cap`,
    /// `timeout` or `error`.
    pub outcome: String,
}

/// What a call did on the network.
#[derive(Debug, Clone, Default)]
pub struct NetLog {
    pub requests: Vec<NetRequest>,
    /// Why requests were refused, in words, for the error the host reports.
    pub refusals: Vec<String>,
    pub response_bytes: u64,
    /// The response-byte cap was hit.
    pub overflowed: bool,
}

/// The `wasi:http` hooks of one call.
pub struct Egress {
    rules: Arc<[NetRule]>,
    limits: NetLimits,
    deadline: Instant,
    /// Names the skill in refusals, so they can say which flag grants it.
    grant_prefix: String,
    log: Arc<Mutex<NetLog>>,
}

/// A request the policy let through.
struct Admitted {
    host: String,
    port: u16,
    tls: bool,
    /// The address the matching rule names, if it names one.
    named: Option<IpAddr>,
    index: usize,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);

impl Egress {
    pub fn new(
        rules: Vec<NetRule>,
        limits: NetLimits,
        deadline: Instant,
        skill: Option<&str>,
    ) -> Self {
        Egress {
            rules: rules.into(),
            limits,
            deadline,
            grant_prefix: skill.map_or_else(String::new, |s| format!("{s}:")),
            log: Arc::new(Mutex::new(NetLog::default())),
        }
    }

    pub fn log(&self) -> NetLog {
        lock(&self.log).clone()
    }

    fn admit(&self, request: &http::Request<WasiBody>) -> Result<Admitted, HttpError> {
        let uri = request.uri();
        let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let mut log = lock(&self.log);
        let index = log.requests.len();
        log.requests.push(NetRequest {
            host: host.clone(),
            port,
            method: request.method().to_string(),
            status: None,
            bytes: 0,
            outcome: "pending".into(),
        });
        let refuse = |log: &mut NetLog, outcome: &str, why: String, error: HttpError| {
            log.requests[index].outcome = outcome.into();
            log.refusals.push(why);
            Err(error)
        };
        if index as u32 >= self.limits.requests {
            return refuse(
                &mut log,
                "request-cap",
                format!(
                    "the call sent more than {} HTTP requests, its cap (--net-max-requests)",
                    self.limits.requests
                ),
                HttpError::ConnectionLimitReached,
            );
        }
        let Some(rule) = self.rules.iter().find(|r| r.matches(&host, port)) else {
            let target = NetRule {
                host: host.clone(),
                port: Some(port),
            };
            return refuse(
                &mut log,
                "denied",
                format!(
                    "network access to {target} is not granted: the skill must request it under \
                     grants.network in skillbox.yaml and the user must pass --allow-net {}{target}",
                    self.grant_prefix
                ),
                HttpError::HttpRequestDenied,
            );
        };
        if tls && !cfg!(feature = "tls") {
            return refuse(
                &mut log,
                "no-tls",
                format!(
                    "https://{host}:{port} cannot be reached: this build of skillbox has no TLS \
                     (it was built without the `tls` feature). Rebuild it with that feature, or \
                     use plain http to a host where that is safe"
                ),
                HttpError::HttpRequestDenied,
            );
        }
        Ok(Admitted {
            host,
            port,
            tls,
            named: rule.named_address(),
            index,
        })
    }
}

fn lock(log: &Mutex<NetLog>) -> std::sync::MutexGuard<'_, NetLog> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl WasiHttpHooks for Egress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let admitted = self.admit(&request);
        let log = self.log.clone();
        let deadline = self.deadline;
        let cap = self.limits.response_bytes;
        Box::new(async move {
            let target = admitted?;
            let index = target.index;
            let result = fetch(request, target, options, deadline, cap, log.clone()).await;
            if let Err(e) = &result {
                let mut log = lock(&log);
                if log.requests[index].outcome == "pending" {
                    log.requests[index].outcome = match e {
                        HttpError::ConnectionTimeout | HttpError::ConnectionReadTimeout => {
                            "timeout"
                        }
                        _ => "error",
                    }
                    .into();
                }
            }
            result
        })
    }
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// Resolves, checks the addresses, connects (TLS for https), sends, and
/// returns the response with a counting body.
async fn fetch(
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
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|_| HttpError::TlsProtocolError)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| HttpError::TlsCertificateError)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Tls)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_match() {
        let rule: NetRule = "API.example.com:8443".parse().unwrap();
        assert!(rule.matches("api.example.com", 8443));
        assert!(!rule.matches("api.example.com", 443));
        let any_web: NetRule = "example.com".parse().unwrap();
        assert!(any_web.matches("example.com", 443) && any_web.matches("example.com", 80));
        assert!(!any_web.matches("example.com", 22));
        let v6: NetRule = "[::1]:8080".parse().unwrap();
        assert_eq!(v6.named_address(), Some("::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "[::1]:8080");
        for bad in ["", ":80", "a b", "host:0", "host:99999", "[::1", "x/y"] {
            assert!(bad.parse::<NetRule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn internal_ranges_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }
}
