//! Asking an MCP client to confirm a call, in the way its revision allows:
//! an `elicitation/create` request on a 2025-11-25 session, or an
//! `input_required` result on the stateless 2026-07-28 revision, which the
//! client answers by sending the call again with `inputResponses` and the
//! `requestState` it was given.
//!
//! The `requestState` names the question's digest and is sealed with an
//! HMAC under a key only this process holds, so a client cannot answer a
//! question it was never asked, nor carry one call's approval to another.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequests, InputRequiredResult, InputResponses,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::call::{Approval, Question};

/// The key of the confirmation in `inputRequests` / `inputResponses`.
pub const CONFIRM_KEY: &str = "confirm";

/// The field of the form the user fills in.
pub const APPROVE_FIELD: &str = "approve";

/// How long a person has to answer on a session before the call is
/// refused as unconfirmed.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// What asking produced.
pub enum Asked {
    /// The user answered.
    Answer(Approval),
    /// Send this to the client; it asks the user and calls again.
    InputRequired(InputRequiredResult),
    /// The client cannot ask the user.
    CannotAsk,
}

/// Seals and opens `requestState` values.
pub struct StateSeal {
    key: [u8; 32],
}

impl StateSeal {
    pub fn new() -> std::io::Result<Self> {
        let mut key = [0u8; 32];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
        Ok(StateSeal { key })
    }

    fn tag(&self, digest: &str) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(b"skillbox confirm v1\0");
        mac.update(digest.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    fn seal(&self, digest: &str) -> String {
        format!("{digest}.{}", URL_SAFE_NO_PAD.encode(self.tag(digest)))
    }

    /// The digest a state names, if this process sealed it.
    fn open<'a>(&self, state: &'a str) -> Option<&'a str> {
        let (digest, tag) = state.rsplit_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        bool::from(self.tag(digest).ct_eq(&tag)).then_some(digest)
    }
}

/// The answer a retried stateless request carries, if it answers a question
/// this server asked about this very call.
pub fn answer_in(
    seal: &StateSeal,
    question: &Question,
    responses: Option<&InputResponses>,
    state: Option<&str>,
) -> Option<Approval> {
    let digest = seal.open(state?)?;
    if digest != question.digest {
        return None;
    }
    let response: ElicitResult =
        serde_json::from_value(responses?.get(CONFIRM_KEY)?.clone()).ok()?;
    Some(approval_of(&response, &question.digest))
}

/// Asks the client behind `context` to confirm `question`.
pub async fn ask(
    seal: &StateSeal,
    question: &Question,
    stateless: bool,
    context: &RequestContext<RoleServer>,
) -> Asked {
    let can_elicit = context
        .client_capabilities()
        .is_some_and(|caps| caps.elicitation.is_some());
    if !can_elicit {
        return Asked::CannotAsk;
    }
    let params = form(question);
    if stateless {
        let mut requests = InputRequests::new();
        requests.insert(
            CONFIRM_KEY.to_string(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        return Asked::InputRequired(InputRequiredResult::new(
            Some(requests),
            Some(seal.seal(&question.digest)),
        ));
    }
    match context
        .peer
        .create_elicitation_with_timeout(params, Some(ANSWER_TIMEOUT))
        .await
    {
        Ok(response) => Asked::Answer(approval_of(&response, &question.digest)),
        Err(error) => {
            tracing::warn!("the client did not answer a confirmation: {error}");
            Asked::CannotAsk
        }
    }
}

/// Yes only for an accepted form whose `approve` is true.
fn approval_of(response: &ElicitResult, digest: &str) -> Approval {
    let approved = response.action == ElicitationAction::Accept
        && response
            .content
            .as_ref()
            .and_then(|c| c.get(APPROVE_FIELD))
            .and_then(Value::as_bool)
            == Some(true);
    if approved {
        Approval::Approved(digest.to_string())
    } else {
        Approval::Declined(digest.to_string())
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
    use crate::sandbox::SideEffect;

    fn question(arguments: Value) -> Question {
        Question::new(
            "files__delete".into(),
            SideEffect::Destructive,
            arguments,
            "/tmp (scratch)".into(),
            "sha256:00",
        )
    }

    fn accept(approve: bool) -> InputResponses {
        let mut responses = InputResponses::new();
        responses.insert(
            CONFIRM_KEY.into(),
            json!({"action": "accept", "content": {APPROVE_FIELD: approve}}),
        );
        responses
    }

    #[test]
    fn an_answer_counts_only_for_the_question_it_was_sealed_for() {
        let seal = StateSeal::new().unwrap();
        let asked = question(json!({"path": "a"}));
        let state = seal.seal(&asked.digest);
        assert_eq!(
            answer_in(&seal, &asked, Some(&accept(true)), Some(&state)),
            Some(Approval::Approved(asked.digest.clone()))
        );
        assert_eq!(
            answer_in(&seal, &asked, Some(&accept(false)), Some(&state)),
            Some(Approval::Declined(asked.digest.clone()))
        );
        let other = question(json!({"path": "b"}));
        assert_eq!(
            answer_in(&seal, &other, Some(&accept(true)), Some(&state)),
            None
        );
        let forged = format!("{}.AAAA", asked.digest);
        assert_eq!(
            answer_in(&seal, &asked, Some(&accept(true)), Some(&forged)),
            None
        );
        let elsewhere = StateSeal::new().unwrap().seal(&asked.digest);
        assert_eq!(
            answer_in(&seal, &asked, Some(&accept(true)), Some(&elsewhere)),
            None
        );
    }
}
