//! `fetch`: one GET over wasi:http, read up to a limit, turned into a
//! readable extract (HTML without markup; JSON and text as they are) and
//! paged by characters.
//!
//! The host decides which hosts are reachable; this tool only says what it
//! was told when a request is refused.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, IncomingResponse, Method, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

wit_bindgen::generate!({ path: "../../wit/web", world: "web" });

/// Body bytes read at most; the rest is not downloaded.
const MAX_BODY_BYTES: u64 = 2 * 1024 * 1024;
const DEFAULT_CHARS: u32 = 8_000;
const MAX_CHARS: u32 = 64_000;

struct Web;

impl Guest for Web {
    fn fetch(url: String, start: Option<u32>, max_chars: Option<u32>) -> Result<Page, String> {
        let target = Target::parse(&url)?;
        let response = send(&target)?;
        let status = response.status();
        let content_type = header(&response, "content-type").unwrap_or_default();
        let (body, body_truncated) = read_body(response)?;
        let body_bytes = body.len() as u64;
        let text = String::from_utf8_lossy(&body);
        let extract = if content_type.contains("html") {
            readable(&text)
        } else {
            text.into_owned()
        };
        let chars: Vec<char> = extract.chars().collect();
        let total = chars.len() as u32;
        let start = start.unwrap_or(0).min(total);
        let take = max_chars.unwrap_or(DEFAULT_CHARS).clamp(1, MAX_CHARS);
        let end = start.saturating_add(take).min(total);
        Ok(Page {
            url,
            status,
            content_type,
            body_bytes,
            text: chars[start as usize..end as usize].iter().collect(),
            start,
            total_chars: total,
            next_start: (end < total).then_some(end),
            body_truncated,
        })
    }
}

struct Target {
    https: bool,
    authority: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!("`{url}` is not an http:// or https:// URL"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "`{url}` has no host, or carries credentials; pass a plain URL"
            ));
        }
        Ok(Target {
            https,
            authority: authority.to_string(),
            path,
        })
    }
}

fn send(target: &Target) -> Result<IncomingResponse, String> {
    let headers =
        Fields::from_list(&[("user-agent".to_string(), b"skillbox-web-peek/0.1".to_vec())])
            .map_err(|e| format!("cannot build the request headers: {e:?}"))?;
    let request = OutgoingRequest::new(headers);
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let set = request.set_method(&Method::Get).is_ok()
        && request.set_scheme(Some(&scheme)).is_ok()
        && request.set_authority(Some(&target.authority)).is_ok()
        && request.set_path_with_query(Some(&target.path)).is_ok();
    if !set {
        return Err(format!(
            "`{}` is not a valid host or path",
            target.authority
        ));
    }
    let pending = outgoing_handler::handle(request, None).map_err(describe)?;
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(response))) => Ok(response),
        Some(Ok(Err(code))) => Err(describe(code)),
        _ => Err("the request ended without a response".into()),
    }
}

fn describe(code: ErrorCode) -> String {
    match code {
        ErrorCode::HttpRequestDenied => {
            "the host refused this request: the URL's host is not one this skill was granted".into()
        }
        ErrorCode::DestinationIpProhibited => {
            "the host refused this request: the name resolves to an internal address".into()
        }
        ErrorCode::ConnectionLimitReached => "too many requests in one call".into(),
        ErrorCode::ConnectionTimeout | ErrorCode::ConnectionReadTimeout => {
            "the server did not answer in time".into()
        }
        other => format!("the request failed: {other:?}"),
    }
}

fn header(response: &IncomingResponse, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .first()
        .map(|v| String::from_utf8_lossy(v).to_ascii_lowercase())
}

/// The body, up to [`MAX_BODY_BYTES`], and whether there was more.
fn read_body(response: IncomingResponse) -> Result<(Vec<u8>, bool), String> {
    let body = response
        .consume()
        .map_err(|()| "the response has no body".to_string())?;
    let stream = body
        .stream()
        .map_err(|()| "the response body cannot be read".to_string())?;
    let mut out = Vec::new();
    loop {
        if out.len() as u64 >= MAX_BODY_BYTES {
            return Ok((out, true));
        }
        let want = (MAX_BODY_BYTES - out.len() as u64).min(64 * 1024);
        match stream.blocking_read(want) {
            Ok(chunk) => out.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok((out, false)),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!(
                    "reading the response failed: {}",
                    e.to_debug_string()
                ));
            }
        }
    }
}

/// HTML as readable text: scripts, styles and tags dropped, entities for
/// the common characters decoded, blank runs collapsed.
fn readable(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        let lower: String = after
            .chars()
            .take(8)
            .collect::<String>()
            .to_ascii_lowercase();
        let skip_to = if lower.starts_with("<script") {
            after.to_ascii_lowercase().find("</script>").map(|i| i + 9)
        } else if lower.starts_with("<style") {
            after.to_ascii_lowercase().find("</style>").map(|i| i + 8)
        } else {
            after.find('>').map(|i| i + 1)
        };
        let Some(skip) = skip_to else { break };
        let tag = &after[..skip];
        if ["<p", "<br", "<div", "<li", "<h", "<tr"]
            .iter()
            .any(|t| tag.to_ascii_lowercase().starts_with(t))
        {
            out.push('\n');
        }
        rest = &after[skip..];
    }
    if !rest.contains('<') {
        out.push_str(rest);
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    let mut lines: Vec<String> = Vec::new();
    for line in decoded.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if !line.is_empty() {
            lines.push(line);
        }
    }
    lines.join("\n")
}

export!(Web);
