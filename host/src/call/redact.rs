//! Secrets never leave a call. A value the user gave a skill through
//! `--allow-env` is replaced by `[redacted:KEY]` in everything that comes
//! back from the sandbox (results, script output, error messages, notes)
//! before any caller sees it, so it cannot reach a model, a trace, a log or
//! the terminal by way of a tool echoing it.
//!
//! This catches the value as given. A guest that transforms it first
//! (encodes, splits, reverses) can still leak it: a granted secret is
//! trusted to the skill it was given to, and only to that one.

use serde_json::Value;

use crate::sandbox::SandboxError;

/// Values shorter than this are not treated as secrets: redacting `1` or
/// `on` everywhere would destroy output and protect nothing.
pub const MIN_SECRET_CHARS: usize = 4;

/// The secrets of one call, longest first so that a secret containing
/// another is replaced whole.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// From `(key, value)` pairs; short or empty values are skipped.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut secrets: Vec<(String, String)> = pairs
            .into_iter()
            .filter(|(_, v)| v.chars().count() >= MIN_SECRET_CHARS)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        secrets.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        Redactor { secrets }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (key, value) in &self.secrets {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[redacted:{key}]"));
            }
        }
        out
    }

    fn in_place(&self, text: &mut String) {
        if self.secrets.iter().any(|(_, v)| text.contains(v.as_str())) {
            *text = self.text(text);
        }
    }

    /// Every string in a JSON value, object keys included.
    pub fn json(&self, value: &mut Value) {
        match value {
            Value::String(s) => self.in_place(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (mut key, mut v) in entries {
                    self.in_place(&mut key);
                    self.json(&mut v);
                    map.insert(key, v);
                }
            }
            _ => {}
        }
    }

    /// Every message an error can carry that came from the guest.
    pub fn error(&self, error: SandboxError) -> SandboxError {
        if self.is_empty() {
            return error;
        }
        match error {
            SandboxError::ToolError {
                mut message,
                mut value,
            } => {
                self.in_place(&mut message);
                self.json(&mut value);
                SandboxError::ToolError { message, value }
            }
            SandboxError::Trap {
                mut message,
                mut stderr,
            } => {
                self.in_place(&mut message);
                self.in_place(&mut stderr);
                SandboxError::Trap { message, stderr }
            }
            SandboxError::Denied { mut what } => {
                self.in_place(&mut what);
                SandboxError::Denied { what }
            }
            SandboxError::Load(mut why) => {
                self.in_place(&mut why);
                SandboxError::Load(why)
            }
            SandboxError::Host(mut why) => {
                self.in_place(&mut why);
                SandboxError::Host(why)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_replaced_everywhere_longest_first() {
        let r = Redactor::new([("TOKEN", "s3cret-abc"), ("SHORT", "on"), ("INNER", "cret")]);
        assert_eq!(r.text("x s3cret-abc y"), "x [redacted:TOKEN] y");
        assert_eq!(r.text("turn it on"), "turn it on");
        let mut v = json!({"s3cret-abc": ["a s3cret-abc", 1], "k": "cret"});
        r.json(&mut v);
        assert_eq!(
            v,
            json!({"[redacted:TOKEN]": ["a [redacted:TOKEN]", 1], "k": "[redacted:INNER]"})
        );
        let e = r.error(SandboxError::Trap {
            message: "s3cret-abc".into(),
            stderr: "said s3cret-abc".into(),
        });
        assert!(!e.to_string().contains("s3cret-abc"), "{e}");
    }
}
