//! HTTP that a script's own libraries send through the door (`program`).
//!
//! The Python runtimes have no sockets and no `ssl`, so `http.client`,
//! `urllib.request` and `requests` cannot reach anything by themselves.
//! `runtimes/python/skillbox_http.py` gives them a socket that keeps what
//! they write, a whole HTTP/1.1 request, and hands it to the host with the
//! scheme, host and port the library connected to. The request is parsed
//! here and sent like a `wasi:http` request of the call: the same
//! admission (grants, request cap), address checks, TLS, deadline,
//! response cap and log. The response goes back as HTTP/1.1 bytes that
//! end the connection, so the library reads it as it would off a socket
//! and opens a new connection (a new, checked request) for the next one.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use super::admission::{Admission, NetLog, NetRequest, lock};
use super::{connect, note_failure};

/// The most headers a request may carry.
const MAX_HEADERS: usize = 128;

/// Headers about the connection to the host, which the host makes: the
/// script's are dropped, and `Host` is set from where it connected.
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
    "expect",
];

/// Where a script's library connected, and the bytes it wrote.
pub(crate) struct RelayedRequest<'a> {
    pub tls: bool,
    pub host: &'a str,
    pub port: u16,
    pub raw: &'a [u8],
    /// The library's own timeout, in seconds, if it set one.
    pub timeout: Option<f64>,
}

/// Why a relayed request got no response.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RelayError {
    /// The call may not send it; the words say which grant would allow it.
    Refused(String),
    /// What the script wrote is not an HTTP/1.1 request the host sends.
    Invalid(String),
    /// It was sent, and failed on the way.
    Failed(String),
    /// It was sent, and the server did not answer in time.
    TimedOut(String),
}

/// One call's way out for its scripts' libraries; see the module docs.
#[derive(Clone)]
pub(crate) struct Relay {
    pub(super) admission: Arc<Admission>,
    pub(super) deadline: Instant,
    pub(super) log: Arc<Mutex<NetLog>>,
}

impl Relay {
    /// Sends one request; the response as HTTP/1.1 bytes that end the
    /// connection (`Connection: close`, a `Content-Length`).
    pub(crate) async fn send(&self, asked: RelayedRequest<'_>) -> Result<Vec<u8>, RelayError> {
        let request = match parse(&asked) {
            Ok(request) => request,
            Err(invalid) => {
                self.note_invalid(asked.host, asked.port, asked.raw);
                return Err(invalid);
            }
        };
        let head_only = request.method() == http::Method::HEAD;
        // The log's lock is let go before a refusal reads it.
        let admitted = self.admission.admit(&request, &mut lock(&self.log));
        let Ok(target) = admitted else {
            return Err(self.refusal());
        };
        let index = target.index;
        let own = asked
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| std::time::Duration::from_secs_f64(t.min(1e6)));
        let options = own.map(|t| RequestOptions {
            connect_timeout: Some(t),
            first_byte_timeout: Some(t),
            between_bytes_timeout: Some(t),
        });
        let cap = self.admission.limits.response_bytes;
        let sent = connect::fetch(
            request,
            target,
            options,
            self.deadline,
            cap,
            self.log.clone(),
        )
        .await;
        let response = match sent {
            Ok((response, _)) => response,
            Err(HttpError::DestinationIpProhibited) => return Err(self.refusal()),
            Err(e) => {
                note_failure(&self.log, index, &e);
                return Err(failure(&e, &asked));
            }
        };
        let (parts, body) = response.into_parts();
        let left = self.deadline.saturating_duration_since(Instant::now());
        let body = match tokio::time::timeout(left, body.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) => {
                note_failure(&self.log, index, &e);
                return Err(failure(&e, &asked));
            }
            Err(_) => {
                note_failure(&self.log, index, &HttpError::ConnectionReadTimeout);
                return Err(RelayError::TimedOut(format!(
                    "the response of {} had not ended when the call's time ran out",
                    shown(&asked)
                )));
            }
        };
        Ok(serialize(&parts, &body, head_only))
    }

    /// Logs a request that was not sent because it was not valid HTTP, so
    /// the audit shows every attempt; it counts against the request cap.
    pub(crate) fn note_invalid(&self, host: &str, port: u16, raw: &[u8]) {
        let method = raw
            .split(|b| *b == b' ')
            .next()
            .filter(|m| !m.is_empty() && m.len() <= 16 && m.iter().all(u8::is_ascii_uppercase))
            .map_or_else(
                || "?".to_string(),
                |m| String::from_utf8_lossy(m).into_owned(),
            );
        let cap = self.admission.limits.requests;
        let mut log = lock(&self.log);
        if log.fold_past_cap(cap) {
            return;
        }
        let host: String = host.chars().take(253).collect();
        let mut entry = NetRequest::pending(host.to_ascii_lowercase(), port, method);
        entry.outcome = if log.requests.len() as u64 >= u64::from(cap) {
            "request-cap"
        } else {
            "invalid"
        }
        .into();
        log.requests.push(entry);
    }

    /// The refusal the admission or address check just logged.
    fn refusal(&self) -> RelayError {
        let log = lock(&self.log);
        RelayError::Refused(
            log.refusals.last().cloned().unwrap_or_else(|| {
                "the request was refused by the call's network policy".to_string()
            }),
        )
    }
}

fn shown(asked: &RelayedRequest<'_>) -> String {
    let scheme = if asked.tls { "https" } else { "http" };
    format!("{scheme}://{}:{}", asked.host, asked.port)
}

fn failure(e: &HttpError, asked: &RelayedRequest<'_>) -> RelayError {
    let target = shown(asked);
    match e {
        HttpError::HttpResponseBodySize(Some(cap)) => RelayError::Failed(format!(
            "the responses of this call passed its cap of {cap} bytes while reading {target}; \
             the user can raise it with --net-max-response-mib"
        )),
        HttpError::ConnectionTimeout | HttpError::DnsTimeout => {
            RelayError::TimedOut(format!("{target} did not answer in time (connecting)"))
        }
        HttpError::ConnectionReadTimeout => {
            RelayError::TimedOut(format!("{target} did not answer in time"))
        }
        HttpError::ConnectionRefused => {
            RelayError::Failed(format!("{target} refused the connection"))
        }
        HttpError::DestinationNotFound => {
            RelayError::Failed(format!("{} has no address (DNS)", asked.host))
        }
        other => RelayError::Failed(format!("the request to {target} failed: {other}")),
    }
}

/// The request the library wrote, as the host sends it.
fn parse(asked: &RelayedRequest<'_>) -> Result<http::Request<WasiBody>, RelayError> {
    let invalid = |why: &str| RelayError::Invalid(format!("the request is not HTTP/1.1: {why}"));
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let length = match head.parse(asked.raw) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Err(invalid("its head is incomplete")),
        Err(e) => return Err(invalid(&e.to_string())),
    };
    let method = head.method.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(invalid("CONNECT (a tunnel) is not sent"));
    }
    let path = head.path.unwrap_or_default();
    if !path.starts_with('/') {
        return Err(invalid(
            "its target must be a path (a request through a proxy is not sent)",
        ));
    }
    let rest = &asked.raw[length..];
    let values = |name: &str| {
        head.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
            .collect::<Vec<_>>()
    };
    let encodings = values("transfer-encoding");
    let lengths = values("content-length");
    if !encodings.is_empty() && !lengths.is_empty() {
        return Err(invalid("it has both Transfer-Encoding and Content-Length"));
    }
    let body_end;
    let body = match (&encodings[..], &lengths[..]) {
        ([], []) => {
            body_end = 0;
            Vec::new()
        }
        ([only], []) if only.trim_ascii().eq_ignore_ascii_case(b"chunked") => {
            let (data, used) =
                dechunk(rest).ok_or_else(|| invalid("its chunked body is malformed"))?;
            body_end = used;
            data
        }
        (_, []) => return Err(invalid("its Transfer-Encoding is not chunked alone")),
        (_, [first, others @ ..]) => {
            if others.iter().any(|v| v != first) {
                return Err(invalid("it has Content-Length headers that disagree"));
            }
            let declared: usize = std::str::from_utf8(first)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| invalid("its Content-Length is not a number"))?;
            if rest.len() < declared {
                return Err(invalid("its body is shorter than its Content-Length"));
            }
            body_end = declared;
            rest[..declared].to_vec()
        }
    };
    if body_end < rest.len() {
        return Err(invalid(
            "it has bytes after its body (one request per connection)",
        ));
    }
    let declared_length = !lengths.is_empty();

    if !plain_host(asked.host) {
        return Err(RelayError::Invalid(format!(
            "`{}` is not a host name or an IP address",
            asked.host.escape_debug()
        )));
    }
    let authority: http::uri::Authority = authority(asked)
        .parse()
        .map_err(|_| invalid("its host and port do not form an address"))?;
    let uri = http::Uri::builder()
        .scheme(if asked.tls { "https" } else { "http" })
        .authority(authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|_| invalid("its target is not a valid path"))?;
    let mut builder = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, authority.as_str());
    for h in head.headers.iter() {
        if HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| invalid(&format!("`{}` is not a header name", h.name)))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| invalid(&format!("the value of `{}` is not valid", h.name)))?;
        builder = builder.header(name, value);
    }
    if !body.is_empty() || declared_length {
        builder = builder.header(header::CONTENT_LENGTH, body.len());
    }
    let body = Full::new(Bytes::from(body))
        .map_err(|never| match never {})
        .boxed_unsync();
    builder
        .body(body)
        .map_err(|e| invalid(&format!("{e} (its method or target)")))
}

/// A DNS name or an IP address, and nothing a URI would read as more
/// (user info, a path, a port): what the request is checked against and
/// where it goes must be the same host.
fn plain_host(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

/// `host:port` as a URI writes it: IPv6 in brackets, the scheme's own
/// port left out.
fn authority(asked: &RelayedRequest<'_>) -> String {
    let host = if asked.host.contains(':') {
        format!("[{}]", asked.host)
    } else {
        asked.host.to_string()
    };
    let default = if asked.tls { 443 } else { 80 };
    if asked.port == default {
        host
    } else {
        format!("{host}:{}", asked.port)
    }
}

/// A chunked body's data and the bytes it took (trailers included), or
/// None when it is malformed or unfinished.
fn dechunk(all: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut rest = all;
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        if size_text.is_empty() || !size_text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let size = usize::from_str_radix(size_text, 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            // Trailer lines, then the empty line that ends the body.
            loop {
                let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
                rest = &rest[line_end + 2..];
                if line_end == 0 {
                    return Some((body, all.len() - rest.len()));
                }
            }
        }
        let end = size.checked_add(2)?;
        if rest.len() < end || &rest[size..end] != b"\r\n" {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[end..];
    }
}

/// The response as the library reads it off a socket: its own framing
/// (chunks, keep-alive) replaced by a length and the end of the
/// connection. A `HEAD` response keeps the length the server gave.
fn serialize(parts: &http::response::Parts, body: &[u8], head_only: bool) -> Vec<u8> {
    let status = parts.status;
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &parts.headers {
        let framing = [
            header::CONNECTION,
            header::TRANSFER_ENCODING,
            header::CONTENT_LENGTH,
        ]
        .contains(name)
            || name.as_str() == "keep-alive";
        if framing && !(head_only && name == header::CONTENT_LENGTH) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !head_only {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(raw: &[u8]) -> RelayedRequest<'_> {
        RelayedRequest {
            tls: false,
            host: "example.com",
            port: 8080,
            raw,
            timeout: None,
        }
    }

    #[test]
    fn a_request_is_sent_to_where_the_library_connected_whatever_its_host_header_says() {
        let raw = b"POST /a?b=1 HTTP/1.1\r\nHost: internal.example\r\nContent-Length: 5\r\n\
                    Connection: keep-alive\r\nX-Token: t\r\n\r\nhello";
        let request = parse(&asked(raw)).unwrap();
        assert_eq!(request.uri(), "http://example.com:8080/a?b=1");
        assert_eq!(request.headers()["host"], "example.com:8080");
        assert_eq!(request.headers()["x-token"], "t");
        assert_eq!(request.headers()["content-length"], "5");
        assert!(request.headers().get("connection").is_none());
    }

    #[test]
    fn chunked_bodies_are_read_and_malformed_requests_refused() {
        let chunked = b"5\r\nhello\r\n3;x=1\r\n!!!\r\n0\r\n\r\n";
        assert_eq!(
            dechunk(chunked).unwrap(),
            (b"hello!!!".to_vec(), chunked.len())
        );
        assert_eq!(dechunk(b"0\r\nX-T: 1\r\n\r\n").unwrap().1, 13);
        assert_eq!(dechunk(b"5\r\nhel"), None);
        assert_eq!(dechunk(b"zz\r\n"), None);
        assert_eq!(dechunk(b"+5\r\nhello\r\n0\r\n\r\n"), None);
        assert_eq!(dechunk(b"ffffffffffffffff\r\nx\r\n0\r\n\r\n"), None);
        assert_eq!(dechunk(b"fffffffffffffffff\r\nx\r\n"), None);
        for raw in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n"[..],
            b"GET http://10.0.0.1/ HTTP/1.1\r\n\r\n",
            b"CONNECT 10.0.0.1:22 HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nshort",
            b"POST / HTTP/1.1\r\nContent-Length: lots\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\nhi",
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi!",
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET / HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            b"CONNECT / HTTP/1.1\r\n\r\n",
            b"\x00\x01 garbage",
        ] {
            assert!(
                matches!(parse(&asked(raw)), Err(RelayError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn a_host_that_a_uri_would_read_as_more_than_a_host_is_refused() {
        for host in [
            "admin.internal@granted.example",
            "granted.example:80",
            "granted.example/x",
            "granted example",
            "",
        ] {
            let raw = b"GET / HTTP/1.1\r\n\r\n";
            let forged = RelayedRequest { host, ..asked(raw) };
            assert!(
                matches!(parse(&forged), Err(RelayError::Invalid(_))),
                "{host}"
            );
        }
        let raw = b"GET / HTTP/1.1\r\n\r\n";
        let v6 = RelayedRequest {
            host: "::1",
            ..asked(raw)
        };
        assert_eq!(parse(&v6).unwrap().uri(), "http://[::1]:8080/");
    }

    #[test]
    fn a_response_ends_the_connection_and_says_its_length() {
        let response = http::Response::builder()
            .status(200)
            .header("transfer-encoding", "chunked")
            .header("content-type", "text/plain")
            .body(())
            .unwrap();
        let (parts, ()) = response.into_parts();
        let text = String::from_utf8(serialize(&parts, b"hi", false)).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\
             connection: close\r\n\r\nhi"
        );
    }
}
