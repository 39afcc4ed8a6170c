//! Asking an MCP client to confirm a call, in the way its revision allows:
//! an `elicitation/create` request on a 2025-11-25 session, or an
//! `input_required` result on the stateless 2026-07-28 revision, which the
//! client answers by sending the call again with `inputResponses` and the
//! `requestState` it was given.
//!
//! The `requestState` is sealed with an HMAC under a key only this process
//! holds (or only the replicas sharing a state store: shared_state.rs). It
//! names the question's digest (the tool, its arguments, the component's
//! digest and the grants), a fresh nonce and an expiry, and the seal also
//! covers the principal that was asked. So an answer counts only
//! for the call it was asked about, only from the client it was asked of,
//! only once, and only until the confirmation timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::BoxFuture;
use hmac::{Hmac, Mac};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequests, InputRequiredResult, InputResponses,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::sync::watch;

use super::peer;
use super::shared_state::{SpentNonces, StateStore, unix_now};
use skillbox_call::{Answer, Ask, Question};

/// The key of the confirmation in `inputRequests` / `inputResponses`.
pub(crate) const CONFIRM_KEY: &str = "confirm";

/// The field of the form the user fills in.
pub const APPROVE_FIELD: &str = "approve";

/// How long a person has to answer, on a session or by a stateless retry,
/// before the call is refused as unconfirmed.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(300);

/// What asking produced.
pub(crate) enum Asked {
    /// The user answered: yes or no.
    Answer(bool),
    /// Send this to the client; it asks the user and calls again.
    InputRequired(InputRequiredResult),
    /// The client cannot ask the user.
    CannotAsk,
}

/// Seals and opens `requestState` values under the key of the state
/// store, which also records which were spent (shared_state.rs).
pub(crate) struct StateSeal {
    timeout: Duration,
    store: Arc<StateStore>,
}

/// What a sealed state names.
struct Sealed<'a> {
    nonce: &'a str,
    expires: u64,
    digest: &'a str,
}

const STATE_VERSION: &str = "v2";

impl StateSeal {
    pub(crate) fn new(timeout: Duration, store: Arc<StateStore>) -> Self {
        StateSeal { timeout, store }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    fn tag(key: &[u8; 32], sealed: &Sealed<'_>, principal: &str) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
        for part in [
            "skillbox confirm v2",
            sealed.nonce,
            &sealed.expires.to_string(),
            principal,
            sealed.digest,
        ] {
            mac.update(part.as_bytes());
            mac.update(b"\0");
        }
        mac.finalize().into_bytes().to_vec()
    }

    fn seal(&self, digest: &str, principal: &str) -> std::io::Result<String> {
        let mut nonce = [0u8; 16];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut nonce)?;
        let nonce = URL_SAFE_NO_PAD.encode(nonce);
        let sealed = Sealed {
            nonce: &nonce,
            expires: unix_now() + self.timeout.as_secs(),
            digest,
        };
        let tag = URL_SAFE_NO_PAD.encode(Self::tag(&self.store.seal_key(), &sealed, principal));
        Ok(format!(
            "{STATE_VERSION}.{nonce}.{}.{digest}.{tag}",
            sealed.expires
        ))
    }

    /// What `state` names, if a replica sharing `key` sealed it for
    /// `principal` and it has not expired. Spent or not is the store's.
    fn verify<'s>(&self, key: &[u8; 32], state: &'s str, principal: &str) -> Option<Sealed<'s>> {
        let mut parts = state.splitn(5, '.');
        let (version, nonce, expires, digest, tag) = (
            parts.next()?,
            parts.next()?,
            parts.next()?.parse().ok()?,
            parts.next()?,
            parts.next()?,
        );
        let sealed = Sealed {
            nonce,
            expires,
            digest,
        };
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let genuine =
            version == STATE_VERSION && bool::from(Self::tag(key, &sealed, principal).ct_eq(&tag));
        (genuine && expires >= unix_now()).then_some(sealed)
    }

    /// Whether `state` answers the question with `expected`: a replica
    /// sharing this key sealed it for `principal` and that question, it
    /// has not expired, and it was not spent before. Opening it spends it,
    /// once across every replica of the store.
    async fn spend(&self, state: &str, principal: &str, expected: &str) -> bool {
        let key = self.store.seal_key();
        match self.verify(&key, state, principal) {
            Some(sealed) if sealed.digest == expected => {
                self.store.spend(sealed.nonce, sealed.expires, &key).await
            }
            _ => false,
        }
    }

    /// [`Self::spend`] for a state that must answer `expected`, against
    /// `spent` in this process: for the fuzz target and unit tests.
    fn open(&self, state: &str, principal: &str, expected: &str, spent: &SpentNonces) -> bool {
        self.verify(&self.store.seal_key(), state, principal)
            .is_some_and(|s| s.digest == expected && spent.spend(s.nonce, s.expires))
    }
}

/// For the fuzz target: an arbitrary `state` opens nothing, and a state
/// sealed for `digest` and `principal` opens once, for them only.
pub fn check_states(state: &str, digest: &str, principal: &str) {
    let store = Arc::new(StateStore::local().expect("a key"));
    let seal = StateSeal::new(Duration::from_secs(300), store);
    let spent = SpentNonces::default();
    assert!(
        !seal.open(state, principal, digest, &spent),
        "a forged state opened"
    );
    let Ok(sealed) = seal.seal(digest, principal) else {
        return;
    };
    let other = format!("{principal}x");
    assert!(
        !seal.open(&sealed, &other, digest, &spent),
        "opened for another principal"
    );
    assert!(
        seal.open(&sealed, principal, digest, &spent),
        "a genuine state did not open"
    );
    assert!(
        !seal.open(&sealed, principal, digest, &spent),
        "a state opened twice"
    );
}

/// Whom a confirmation was asked of: the OAuth subject or the client's
/// address over HTTP; over stdio, the one client there is.
fn asked_of(context: &RequestContext<RoleServer>) -> String {
    peer::principal(context).unwrap_or_else(|| "stdio".into())
}

/// The answer a retried stateless request carries, if it answers a question
/// a replica sharing this seal asked this client about this very call, and
/// the client declared it can ask its user at all. Taking it spends it,
/// once across the replicas sharing the store.
pub(crate) async fn answer_in(
    seal: &StateSeal,
    question: &Question,
    context: &RequestContext<RoleServer>,
    responses: Option<&InputResponses>,
    state: Option<&str>,
) -> Option<bool> {
    if !peer::stateless(context) || !peer::can_elicit(context) {
        return None;
    }
    let response: ElicitResult =
        serde_json::from_value(responses?.get(CONFIRM_KEY)?.clone()).ok()?;
    seal.spend(state?, &asked_of(context), &question.digest)
        .await
        .then(|| approved(&response))
}

/// Asks the client behind `context` to confirm `question`.
pub(crate) async fn ask(
    seal: &StateSeal,
    question: &Question,
    context: &RequestContext<RoleServer>,
) -> Asked {
    if !peer::can_elicit(context) {
        return Asked::CannotAsk;
    }
    let params = form(question);
    if peer::stateless(context) {
        let state = match seal.seal(&question.digest, &asked_of(context)) {
            Ok(state) => state,
            Err(error) => {
                tracing::warn!("cannot seal a confirmation: {error}");
                return Asked::CannotAsk;
            }
        };
        let mut requests = InputRequests::new();
        requests.insert(
            CONFIRM_KEY.to_string(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        return Asked::InputRequired(InputRequiredResult::new(Some(requests), Some(state)));
    }
    match context
        .peer
        .create_elicitation_with_timeout(params, Some(seal.timeout()))
        .await
    {
        Ok(response) => Asked::Answer(approved(&response)),
        Err(error) => {
            tracing::warn!("the client did not answer a confirmation: {error}");
            Asked::CannotAsk
        }
    }
}

/// Yes only for an accepted form whose `approve` is true.
fn approved(response: &ElicitResult) -> bool {
    response.action == ElicitationAction::Accept
        && response
            .content
            .as_ref()
            .and_then(|c| c.get(APPROVE_FIELD))
            .and_then(Value::as_bool)
            == Some(true)
}

/// Puts a call's questions to the client of one request, in the way its
/// revision allows, for the call path ([`Ask`]).
pub(crate) struct ClientAsker {
    seal: Arc<StateSeal>,
    context: RequestContext<RoleServer>,
    responses: Option<InputResponses>,
    state: Option<String>,
    /// The `input_required` result to send instead of a reply, once a
    /// question was deferred to the client's retry.
    deferred: Mutex<Option<InputRequiredResult>>,
    /// True until the call path asks nothing more of the call (it runs
    /// without a question, or its answer came): a call is not made a task
    /// before then, since a task's result could not carry a question.
    asking: watch::Sender<bool>,
}

impl ClientAsker {
    /// An asker for the request behind `context`, which may carry answers
    /// (`inputResponses`, `requestState`) to questions asked before.
    pub(crate) fn new(
        seal: Arc<StateSeal>,
        context: RequestContext<RoleServer>,
        responses: Option<InputResponses>,
        state: Option<String>,
    ) -> Self {
        ClientAsker {
            seal,
            context,
            responses,
            state,
            deferred: Mutex::new(None),
            asking: watch::channel(true).0,
        }
    }

    /// Follows whether the call may still ask its user something.
    pub(crate) fn asking(&self) -> watch::Receiver<bool> {
        self.asking.subscribe()
    }

    /// The `input_required` result of a deferred question, once.
    pub(crate) fn take_deferred(&self) -> Option<InputRequiredResult> {
        self.deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl Ask for ClientAsker {
    fn carried<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Option<bool>> {
        Box::pin(answer_in(
            &self.seal,
            question,
            &self.context,
            self.responses.as_ref(),
            self.state.as_deref(),
        ))
    }

    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            match ask(&self.seal, question, &self.context).await {
                Asked::Answer(true) => Answer::Yes,
                Asked::Answer(false) => Answer::No,
                Asked::InputRequired(result) => {
                    *self.deferred.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                    Answer::Deferred
                }
                Asked::CannotAsk => Answer::Unasked,
            }
        })
    }

    fn asks_nothing_more(&self) {
        // Said once: saying it again would restart the task clock.
        self.asking
            .send_if_modified(|asking| std::mem::replace(asking, false));
    }
}

/// The form the user is shown: the question, and one yes/no field.
fn form(question: &Question) -> ElicitRequestParams {
    let schema = json!({
        "type": "object",
        "properties": {
            APPROVE_FIELD: {
                "type": "boolean",
                "title": "Approve",
                "description": "Run this call now with the grants shown.",
                "default": false
            }
        },
        "required": [APPROVE_FIELD]
    });
    let Value::Object(schema) = schema else {
        unreachable!("the schema is an object")
    };
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.text(),
        requested_schema: ElicitationSchema::from_json_schema(schema)
            .expect("the confirmation schema is valid"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:00ab";

    fn local_seal(timeout: Duration) -> StateSeal {
        StateSeal::new(timeout, Arc::new(StateStore::local().unwrap()))
    }

    #[test]
    fn a_state_opens_once_for_the_principal_it_was_sealed_for() {
        let seal = local_seal(Duration::from_secs(60));
        let spent = SpentNonces::default();
        let state = seal.seal(DIGEST, "ip:127.0.0.1").unwrap();
        assert!(
            !seal.open(&state, "ip:127.0.0.2", DIGEST, &spent),
            "another principal"
        );
        assert!(
            !seal.open(&state, "ip:127.0.0.1", "sha256:00ac", &spent),
            "another call"
        );
        assert!(seal.open(&state, "ip:127.0.0.1", DIGEST, &spent));
        assert!(
            !seal.open(&state, "ip:127.0.0.1", DIGEST, &spent),
            "a replay"
        );

        let other = seal.seal(DIGEST, "sub:alice").unwrap();
        let forged = other.replace("sha256:00ab", "sha256:00ac");
        assert!(
            !seal.open(&forged, "sub:alice", "sha256:00ac", &spent),
            "a digest edited"
        );
        let elsewhere = local_seal(Duration::from_secs(60))
            .seal(DIGEST, "sub:alice")
            .unwrap();
        assert!(
            !seal.open(&elsewhere, "sub:alice", DIGEST, &spent),
            "another process"
        );
        assert!(seal.open(&other, "sub:alice", DIGEST, &spent));
    }

    #[test]
    fn a_state_expires() {
        let seal = local_seal(Duration::ZERO);
        let spent = SpentNonces::default();
        let state = seal.seal(DIGEST, "stdio").unwrap();
        let (head, tag) = state.rsplit_once('.').unwrap();
        let mut parts: Vec<&str> = head.split('.').collect();
        let past = (unix_now() - 10).to_string();
        parts[2] = &past;
        let moved = format!("{}.{tag}", parts.join("."));
        assert!(
            !seal.open(&moved, "stdio", DIGEST, &spent),
            "an expiry moved by hand"
        );
        let old = Sealed {
            nonce: "n",
            expires: unix_now() - 1,
            digest: DIGEST,
        };
        let tag = URL_SAFE_NO_PAD.encode(StateSeal::tag(&seal.store.seal_key(), &old, "stdio"));
        let expired = format!("v2.n.{}.{DIGEST}.{tag}", old.expires);
        assert!(!seal.open(&expired, "stdio", DIGEST, &spent), "expired");
    }
}
