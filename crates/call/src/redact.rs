//! Secrets never leave a call. A value the user gave a skill through
//! `--allow-env` is replaced by `[redacted:KEY]` in everything that comes
//! back from the sandbox (results, script output, error messages, notes)
//! before any caller sees it, so it cannot reach a model, a trace, a log or
//! the terminal by way of a tool echoing it.
//!
//! The value is caught as given, in any ASCII case, and in the encodings
//! the host itself applies to what a guest sends (a host name is
//! lowercased, a URL percent-encoded, an international name written in
//! IDNA form): a guest cannot have the host transform the secret into a
//! form that passes. Everything the host writes from guest-chosen data
//! goes through here: results, notes, errors, the audit log's network
//! entries and the embedding API's. A guest that transforms the value
//! itself first (encodes, splits, reverses) can still leak it: a granted
//! secret is trusted to the skill it was given to, and only to that one.

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use crate::sandbox::{NetRequest, SandboxError};

/// Values shorter than this are not treated as secrets: redacting `1` or
/// `on` everywhere would destroy output and protect nothing.
pub(crate) const MIN_SECRET_CHARS: usize = 4;

/// The secrets of one call, each in every form the host may write it in,
/// longest first so that a secret containing another is replaced whole.
/// Forms are matched ignoring ASCII case.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// `(key, form lowercased in ASCII)`.
    forms: Vec<(String, String)>,
}

impl Redactor {
    /// From `(key, value)` pairs; short or empty values are skipped.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut forms: Vec<(String, String)> = Vec::new();
        for (key, value) in pairs {
            if value.chars().count() < MIN_SECRET_CHARS {
                continue;
            }
            for form in forms_of(value) {
                let form = form.to_ascii_lowercase();
                if !forms.iter().any(|(k, f)| k == key && *f == form) {
                    forms.push((key.to_string(), form));
                }
            }
        }
        forms.sort_by_key(|(_, f)| std::cmp::Reverse(f.len()));
        Redactor { forms }
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (key, form) in &self.forms {
            out = replace_ignoring_ascii_case(&out, form, &format!("[redacted:{key}]"));
        }
        out
    }

    fn in_place(&self, text: &mut String) {
        let lower = text.to_ascii_lowercase();
        if self.forms.iter().any(|(_, f)| lower.contains(f.as_str())) {
            *text = self.text(text);
        }
    }

    /// A network request as the host records it, its host name redacted.
    pub fn request(&self, request: &NetRequest) -> NetRequest {
        let mut out = request.clone();
        self.in_place(&mut out.host);
        out
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
            SandboxError::Stopped { cause, mut printed } => {
                self.in_place(&mut printed.stdout);
                self.in_place(&mut printed.stderr);
                SandboxError::Stopped {
                    cause: Box::new(self.error(*cause)),
                    printed,
                }
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

/// A secret and the forms the host's own encoding may give it: lower and
/// upper case (host names are lowercased), percent-encoded (URLs), and the
/// IDNA form of an international name.
fn forms_of(value: &str) -> Vec<String> {
    let mut forms = vec![
        value.to_string(),
        value.to_lowercase(),
        value.to_uppercase(),
        utf8_percent_encode(value, NON_ALPHANUMERIC).to_string(),
    ];
    if !value.is_ascii()
        && let Ok(ascii) = idna::domain_to_ascii(value)
    {
        forms.push(ascii);
    }
    forms.retain(|f| f.chars().count() >= MIN_SECRET_CHARS);
    forms
}

/// `text` with every occurrence of `form` (lowercase ASCII) replaced,
/// matched ignoring ASCII case; byte offsets are the same in both cases.
fn replace_ignoring_ascii_case(text: &str, form: &str, with: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if form.is_empty() || !lower.contains(form) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (at, _) in lower.match_indices(form) {
        if at < rest {
            continue;
        }
        out.push_str(&text[rest..at]);
        out.push_str(with);
        rest = at + form.len();
    }
    out.push_str(&text[rest..]);
    out
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

    #[test]
    fn the_forms_the_host_gives_a_secret_are_caught_too() {
        let r = Redactor::new([("TOKEN", "S3cretToken"), ("NAME", "bücher-x")]);
        for leaked in [
            "denied: network access to s3crettoken.example:80",
            "S3CRETTOKEN",
            "sEcReT? no: s3CrEtToKeN",
        ] {
            let out = r.text(leaked);
            assert!(!out.to_ascii_lowercase().contains("s3crettoken"), "{out}");
            assert!(out.contains("[redacted:TOKEN]"), "{out}");
        }
        assert_eq!(
            r.text("x xn--bcher-x-n2a.example"),
            "x [redacted:NAME].example"
        );
        assert_eq!(r.text("b%C3%BCcher%2Dx"), "[redacted:NAME]");
        let mut request = NetRequest::pending("s3crettoken.evil.example".into(), 80, "GET".into());
        request.outcome = "denied".into();
        assert_eq!(r.request(&request).host, "[redacted:TOKEN].evil.example");
    }
}
