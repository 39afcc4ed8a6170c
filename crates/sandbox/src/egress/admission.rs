//! Admission: which requests of a call may go out at all, decided before
//! any name is resolved or connection made; and the call's network log.

use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use super::rule::NetRule;

/// Per-call caps on outgoing HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct NetLimits {
    pub requests: u32,
    pub response_bytes: u64,
}

/// One outgoing request, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct NetRequest {
    pub host: String,
    pub port: u16,
    pub method: String,
    pub status: Option<u16>,
    pub bytes: u64,
    /// `ok`, `denied`, `internal-address`, `request-cap`, `response-cap`,
    /// `timeout`, `error`, or `invalid` (a script's request that was not HTTP).
    pub outcome: String,
    /// Attempts after this one that were not recorded: past the request
    /// cap, one entry stands for all the rest, so a guest that keeps
    /// trying cannot grow the record.
    #[serde(skip_serializing_if = "is_zero")]
    pub unrecorded_after: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl NetRequest {
    /// A request as it is first seen, before the policy admits it.
    pub fn pending(host: String, port: u16, method: String) -> Self {
        NetRequest {
            host,
            port,
            method,
            status: None,
            bytes: 0,
            outcome: "pending".into(),
            unrecorded_after: 0,
        }
    }
}

impl NetLog {
    /// Counts an attempt past the request cap `cap` on the one entry that
    /// already stands for them, and says whether there was one (if not,
    /// the caller records this attempt as that entry).
    pub(crate) fn fold_past_cap(&mut self, cap: u32) -> bool {
        if self.requests.len() as u64 <= u64::from(cap) {
            return false;
        }
        if let Some(last) = self.requests.last_mut() {
            last.unrecorded_after += 1;
        }
        true
    }
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

/// The rules and caps one call's requests are admitted under.
pub(super) struct Admission {
    pub rules: Vec<NetRule>,
    pub limits: NetLimits,
    /// Names the skill in refusals, so they can say which flag grants it.
    pub grant_prefix: String,
}

/// A request the policy let through.
pub(super) struct Admitted {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// The address the matching rule names, if it names one.
    pub named: Option<IpAddr>,
    /// Its entry in the call's [`NetLog`].
    pub index: usize,
}

impl Admission {
    /// Logs the request and decides whether it may go out.
    pub(super) fn admit(
        &self,
        request: &http::Request<WasiBody>,
        log: &mut NetLog,
    ) -> Result<Admitted, HttpError> {
        let uri = request.uri();
        let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        if log.fold_past_cap(self.limits.requests) {
            return Err(HttpError::ConnectionLimitReached);
        }
        let index = log.requests.len();
        log.requests.push(NetRequest::pending(
            host.clone(),
            port,
            request.method().to_string(),
        ));
        let refuse = |log: &mut NetLog, outcome: &str, why: String, error: HttpError| {
            log.requests[index].outcome = outcome.into();
            log.refusals.push(why);
            Err(error)
        };
        if index as u32 >= self.limits.requests {
            return refuse(
                log,
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
                log,
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
                log,
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

/// The call's log, even if a guest's request panicked while holding it.
pub(super) fn lock(log: &Mutex<NetLog>) -> MutexGuard<'_, NetLog> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}
