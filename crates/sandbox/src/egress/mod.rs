//! Outgoing HTTP for guests (`wasi:http`), deny by default.
//!
//! wasmtime-wasi-http hands every outgoing request to [`Egress`], which
//! decides before any connection is made:
//! - the request's `host:port` must match a rule the call was granted (the
//!   skill requested it *and* the user gave it; see `skill::policy`);
//! - the addresses it resolves to must not be in a block the IANA
//!   special-purpose registries mark not globally reachable (loopback,
//!   private, link-local, …, and IPv6 forms carrying such an IPv4 address:
//!   `address.rs`), unless the rule names that address itself, so DNS
//!   rebinding cannot turn a public name into the host's own network;
//! - a call has a cap on requests and on response bytes, and every wait is
//!   bounded by the call's own deadline.
//!
//! Redirects are not followed here: a guest that follows one sends a new
//! request, which is checked again. Every request is logged for the audit
//! record; a refusal is remembered so the host can report it as `Denied`.
//! `wasi:sockets` stays disabled: this is the only way out.

mod address;
mod admission;
mod connect;
mod relay;
mod rule;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

pub use admission::NetRequest;
pub(crate) use admission::{NetLimits, NetLog};
pub(crate) use relay::{Relay, RelayError, RelayedRequest};
pub use rule::NetRule;

use admission::{Admission, lock};
use connect::SendResult;

/// What one call does on the network, kept by whoever started the call:
/// it outlives the call's store, so a call that fails, traps, times out or
/// is cancelled still reports every request it sent.
#[derive(Debug, Clone, Default)]
pub struct NetTrace(Arc<Mutex<NetLog>>);

impl NetTrace {
    /// The requests so far, and why any were refused.
    pub fn log(&self) -> NetLog {
        lock(&self.0).clone()
    }
}

/// The `wasi:http` hooks of one call.
pub(crate) struct Egress {
    admission: Arc<Admission>,
    deadline: Instant,
    log: Arc<Mutex<NetLog>>,
}

impl Egress {
    pub(crate) fn new(
        rules: Vec<NetRule>,
        limits: NetLimits,
        deadline: Instant,
        skill: Option<&str>,
        trace: &NetTrace,
    ) -> Self {
        Egress {
            admission: Arc::new(Admission {
                rules,
                limits,
                grant_prefix: skill.map_or_else(String::new, |s| format!("{s}:")),
            }),
            deadline,
            log: trace.0.clone(),
        }
    }

    pub(crate) fn log(&self) -> NetLog {
        lock(&self.log).clone()
    }

    /// The same way out for HTTP a script's libraries send through the
    /// door: one admission, deadline and log for both.
    pub(crate) fn relay(&self) -> Relay {
        Relay {
            admission: self.admission.clone(),
            deadline: self.deadline,
            log: self.log.clone(),
        }
    }
}

/// Marks request `index` as failed on the way, unless something more
/// precise (a cap) was noted first.
fn note_failure(log: &Mutex<NetLog>, index: usize, error: &HttpError) {
    let mut log = lock(log);
    if log.requests[index].outcome == "pending" || log.requests[index].outcome == "ok" {
        log.requests[index].outcome = match error {
            HttpError::ConnectionTimeout | HttpError::ConnectionReadTimeout => "timeout",
            _ => "error",
        }
        .into();
    }
}

impl WasiHttpHooks for Egress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let admitted = self.admission.admit(&request, &mut lock(&self.log));
        let log = self.log.clone();
        let deadline = self.deadline;
        let cap = self.admission.limits.response_bytes;
        Box::new(async move {
            let target = admitted?;
            let index = target.index;
            let result = connect::fetch(request, target, options, deadline, cap, log.clone()).await;
            if let Err(e) = &result {
                note_failure(&log, index, e);
            }
            result
        })
    }
}
