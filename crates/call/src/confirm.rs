//! Confirmation before a call that changes things: which calls need the
//! user's yes, the question the user is shown, and the answer a caller
//! carries back.
//!
//! The host decides when to ask and enforces the answer; the asking itself
//! is the caller's [`Ask`] (an MCP elicitation, an `input_required` round,
//! a terminal prompt). A question
//! is bound by a digest to exactly what would run: the tool, its arguments,
//! the component's digest and the grants. An approval of one call cannot
//! be spent on another, and if any of those change between the question
//! and the call, the user is asked again.

use futures::future::BoxFuture;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::sandbox::SideEffect;

/// Which calls need the user's confirmation before they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfirmPolicy {
    /// Tools declared `destructive`.
    #[default]
    Destructive,
    /// Tools declared `write` or `destructive`, and scripts.
    Write,
    /// None: the user accepts every call a skill's grants allow.
    Never,
}

impl ConfirmPolicy {
    /// Every policy's name, as [`ConfirmPolicy::as_str`] spells it.
    pub const NAMES: &'static [&'static str] = &["destructive", "write", "never"];

    /// Whether a call of this class needs the user's confirmation.
    pub(crate) fn needs(self, class: SideEffect) -> bool {
        match self {
            ConfirmPolicy::Never => false,
            ConfirmPolicy::Destructive => class == SideEffect::Destructive,
            ConfirmPolicy::Write => class != SideEffect::Read,
        }
    }

    /// The policy's name, as the `--confirm` flag takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfirmPolicy::Destructive => "destructive",
            ConfirmPolicy::Write => "write",
            ConfirmPolicy::Never => "never",
        }
    }
}

impl std::str::FromStr for ConfirmPolicy {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "destructive" => Ok(ConfirmPolicy::Destructive),
            "write" => Ok(ConfirmPolicy::Write),
            "never" => Ok(ConfirmPolicy::Never),
            _ => Err(format!(
                "unknown confirmation policy `{name}`; use one of: {}",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// What came of putting a question to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The user said yes to exactly this question.
    Yes,
    /// The user said no.
    No,
    /// The answer comes with a later request: the stateless revision's
    /// `input_required` result went back to the client, which asks its
    /// user and sends the call again.
    Deferred,
    /// No one could be asked (the client cannot ask, or did not answer).
    Unasked,
}

/// Who puts a call's question to the user. The caller supplies it (the MCP
/// session asks its client, by elicitation or `input_required`); the call
/// path decides when to ask, and what an answer is worth.
pub trait Ask: Send + Sync {
    /// The answer this very request already carries to `question` (a
    /// stateless client's retry), checked before anyone is asked. Taking
    /// it may spend it in a store other replicas share, hence async.
    fn carried<'a>(&'a self, _question: &'a Question) -> BoxFuture<'a, Option<bool>> {
        Box::pin(async { None })
    }

    /// Puts `question` to the user and waits for the answer.
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer>;

    /// The call path will ask nothing more of this call: it runs without
    /// a question, or its answer came. Until then a caller keeps the call
    /// in the foreground (the MCP session does not make it a task, whose
    /// result could not carry a question).
    fn asks_nothing_more(&self) {}
}

/// The asker a caller supplies; a caller without one cannot be asked.
#[derive(Clone)]
pub struct Asker(pub std::sync::Arc<dyn Ask>);

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Asker")
    }
}

/// The question put to the user before a confirmed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The tool (`skill__function`) or `run_script SKILL/SCRIPT`.
    pub what: String,
    pub class: SideEffect,
    pub arguments: Value,
    /// The grants the call would run with, as the audit log shows them.
    pub grants: String,
    /// Binds an answer to exactly this call.
    pub digest: String,
    /// What the call would change in the workspace (the list and a diff
    /// excerpt), when it ran staged before the question.
    pub changes: Option<String>,
}

impl Question {
    pub fn new(
        what: String,
        class: SideEffect,
        arguments: Value,
        grants: String,
        component_digest: &str,
    ) -> Self {
        let mut hasher = Sha256::new();
        for part in [
            what.as_str(),
            class.as_str(),
            &arguments.to_string(),
            &grants,
            component_digest,
        ] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = crate::digest::finish(hasher);
        Question {
            what,
            class,
            arguments,
            grants,
            digest,
            changes: None,
        }
    }

    /// The question for a call that ran staged: it shows `changes`, and
    /// its digest binds the answer to them and to `content`, the digest of
    /// every byte staged (`Stage::content_digest`), which the shown text
    /// may cut or redact.
    pub fn with_changes(mut self, changes: String, content: &str) -> Self {
        let mut hasher = Sha256::new();
        for part in [self.digest.as_str(), changes.as_str(), content] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        self.digest = crate::digest::finish(hasher);
        self.changes = Some(changes);
        self
    }

    /// The question as a person reads it. Code given with the call
    /// (`run_code`) is shown as code, not as an escaped JSON string, each
    /// line behind `  | ` so no line of it can pass for a line of the
    /// question; what does not fit says how many bytes are hidden (and,
    /// for code, the digest the audit records), so nothing can hide
    /// behind a cut.
    pub fn text(&self) -> String {
        let mut arguments = self.arguments.clone();
        let code = match arguments.as_object_mut().map(|map| map.remove("code")) {
            Some(Some(Value::String(code))) => Some(code),
            Some(Some(other)) => {
                arguments["code"] = other;
                None
            }
            _ => None,
        };
        let mut text = format!(
            "Allow {what}? It is declared {class}.\n  arguments: {arguments}\n  grants: {grants}",
            what = self.what,
            class = self.class.as_str(),
            arguments = shown(&arguments.to_string(), SHOWN_ARGUMENTS, false),
            grants = self.grants,
        );
        if let Some(code) = code {
            text.push_str("\n  code:");
            for line in shown(&code, SHOWN_CODE, true).lines() {
                text.push_str("\n  | ");
                text.push_str(&crate::text::printable_line(line));
            }
        }
        if let Some(changes) = &self.changes {
            text.push_str(&format!(
                "\nIt ran with its writes staged; nothing is written unless you approve. It \
                 would change:\n{changes}"
            ));
        }
        text
    }
}

/// The most of a call's arguments, and of its code, a question shows.
const SHOWN_ARGUMENTS: usize = 2_000;
const SHOWN_CODE: usize = 16 * 1024;

/// `text` as a question shows it: whole, or cut with how many of its
/// bytes are hidden and, when `with_digest`, the digest of the whole (for
/// code, the one the audit records).
fn shown(text: &str, max_bytes: usize, with_digest: bool) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut head = text.to_string();
    crate::text::cut(&mut head, max_bytes, "");
    let digest = if with_digest {
        format!(" (the whole is {})", crate::digest::sha256(text.as_bytes()))
    } else {
        String::new()
    };
    format!(
        "{head}\n… {} more bytes not shown{digest}",
        text.len() - head.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(arguments: Value) -> Question {
        Question::new(
            "run_code".into(),
            SideEffect::Script,
            arguments,
            "workspace rw".into(),
            "sha256:00",
        )
    }

    #[test]
    fn code_is_shown_as_code_and_a_cut_says_what_it_hides() {
        let short =
            question(serde_json::json!({"code": "import os\nprint(1)\x1b[2J", "args": ["a"]}));
        let text = short.text();
        assert!(
            text.contains("  code:\n  | import os\n  | print(1)?[2J"),
            "{text}"
        );
        assert!(text.contains(r#"arguments: {"args":["a"]}"#), "{text}");
        assert!(!text.contains("not shown"), "{text}");

        // What a long program puts after the part shown cannot pass unseen.
        let code = format!(
            "{}\nimport shutil; shutil.rmtree('/workspace')\n",
            "#".repeat(20_000)
        );
        let text = question(serde_json::json!({"code": code})).text();
        assert!(!text.contains("rmtree"), "{text}");
        let hidden = code.len() - SHOWN_CODE;
        assert!(
            text.contains(&format!(
                "{hidden} more bytes not shown (the whole is {})",
                crate::digest::sha256(code.as_bytes())
            )),
            "{text}"
        );

        // A line of code cannot pass for a line of the question.
        let forged = question(
            serde_json::json!({"code": "x = 1\n  grants: none\nIt ran with its writes staged"}),
        );
        let text = forged.text();
        assert!(text.contains("\n  |   grants: none\n  | It ran"), "{text}");
        assert_eq!(text.matches("\n  grants: ").count(), 1, "{text}");

        // Code that is not a string stays among the arguments.
        let text = question(serde_json::json!({"code": 7})).text();
        assert!(text.contains(r#"arguments: {"code":7}"#), "{text}");
    }
}
