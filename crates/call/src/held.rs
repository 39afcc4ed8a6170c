//! Calls that ran staged and wait for the user's yes before their
//! workspace changes are written: the diff before the yes.
//!
//! A call whose only effects are in the workspace, and that the policy
//! confirms, runs first with its writes staged. Its question then shows
//! what would change, and the call is held here under the question's
//! digest until the answer comes back (on a session, at once; on the
//! stateless revision, with the client's retry). An approval commits the
//! held changes without running the tool again, so a retried answer never
//! writes twice; a decline, or no answer within [`HELD_FOR`], discards
//! them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::confirm::Question;
use super::request::CallReply;
use crate::sandbox::stage::Stage;

/// How long a held call waits for its answer.
pub(super) const HELD_FOR: Duration = Duration::from_secs(300);

/// Held calls cap: an unanswered question costs a staging folder.
const MAX_HELD: usize = 64;

pub(super) struct Held {
    /// The digest of the call itself (tool, arguments, component,
    /// grants), without its changes.
    pub identity: String,
    pub question: Question,
    pub stage: Stage,
    pub reply: CallReply,
    expires: Instant,
}

impl Held {
    pub(super) fn new(
        identity: String,
        question: Question,
        stage: Stage,
        reply: CallReply,
    ) -> Self {
        Held {
            identity,
            question,
            stage,
            reply,
            expires: Instant::now() + HELD_FOR,
        }
    }
}

#[derive(Default)]
pub(super) struct HeldCalls(Mutex<HashMap<String, Held>>);

impl HeldCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        held.retain(|_, h| h.expires > now);
        held
    }

    /// Holds a call under its question's digest; the oldest goes when too
    /// many wait.
    pub(super) fn hold(&self, held: Held) {
        let mut calls = self.lock();
        if calls.len() >= MAX_HELD
            && let Some(oldest) = calls
                .iter()
                .min_by_key(|(_, h)| h.expires)
                .map(|(k, _)| k.clone())
        {
            calls.remove(&oldest);
        }
        calls.insert(held.question.digest.clone(), held);
    }

    /// The held call this answer is for, if it is this very call.
    pub(super) fn take(&self, digest: &str, identity: &str) -> Option<Held> {
        let mut calls = self.lock();
        if calls.get(digest)?.identity != identity {
            return None;
        }
        calls.remove(digest)
    }

    /// The question of the call held for `identity`, for a client that
    /// answers by sending the call again.
    pub(super) fn question_for(&self, identity: &str) -> Option<Question> {
        self.lock()
            .values()
            .find(|h| h.identity == identity)
            .map(|h| h.question.clone())
    }
}
