//! The frontmatter fields of the Agent Skills specification, plus the
//! host fields other hosts use, checked rule by rule.

use std::collections::BTreeMap;

use serde_norway::Value;

use super::frontmatter::{Frontmatter, Problem, Strictness, kind_of};

pub const MAX_NAME_CHARS: usize = 64;
/// The longest name served under lenient reading: what a folder name can
/// hold. (A tool whose `<skill>__<function>` passes MCP's 128 characters is
/// refused on its own, with `tool-name-length`.)
pub const MAX_SERVED_NAME_CHARS: usize = 255;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const MAX_COMPATIBILITY_CHARS: usize = 500;

/// The fields the specification defines, and the host fields this host
/// understands. Anything else is kept and warned about.
const KNOWN_FIELDS: [&str; 9] = [
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "disable-model-invocation",
    "user-invocable",
    "argument-hint",
];

/// A skill's frontmatter, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillMeta {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub allowed_tools: Vec<String>,
    /// When true the model is not offered the skill; only a user can invoke it.
    pub disable_model_invocation: bool,
    /// When false a user cannot invoke it by name (`/skill:NAME`).
    pub user_invocable: bool,
    pub argument_hint: Option<String>,
    /// Unknown keys, kept as their YAML text.
    pub extra: BTreeMap<String, String>,
    /// The frontmatter's `name` when the skill is served under its folder's
    /// name instead (lenient reading): a display title.
    pub title: Option<String>,
}

/// What validation found: the metadata when nothing was fatal, and the
/// problems (errors and warnings) either way.
pub struct Checked {
    pub meta: Option<SkillMeta>,
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

/// Validates the frontmatter of the skill in folder `folder_name`.
///
/// Strictly, any error leaves the skill without metadata. Leniently (the
/// Agent Skills client guide's rules for hosts), a skill is skipped only
/// when it has no usable description or no valid name can be derived: a
/// name that is invalid or differs from the folder gives way to the
/// folder's name, an over-long description is cut at a word boundary,
/// badly typed optional fields are ignored, and every such error becomes a
/// warning with the same rule id.
pub fn check(fm: &Frontmatter, folder_name: &str, strictness: Strictness) -> Checked {
    let mut v = Validator {
        fm,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let mut fields: BTreeMap<String, &Value> = BTreeMap::new();
    for (key, value) in &fm.mapping {
        match key {
            Value::String(k) => {
                fields.insert(k.clone(), value);
            }
            other => v.error(
                None,
                "field-type",
                format!(
                    "frontmatter keys must be text; found a {} key",
                    kind_of(other)
                ),
            ),
        }
    }

    let name = v
        .required_string(&fields, "name")
        .map(|n| n.trim().to_string());
    if let Some(name) = &name {
        v.check_name(name, folder_name);
    }
    let description = v
        .required_string(&fields, "description")
        .map(|d| d.trim().to_string());
    if let Some(d) = &description {
        v.check_length("description", d, MAX_DESCRIPTION_CHARS);
    }
    let license = v.optional_string(&fields, "license");
    let compatibility = v.optional_string(&fields, "compatibility");
    if let Some(c) = &compatibility {
        v.check_length("compatibility", c, MAX_COMPATIBILITY_CHARS);
    }
    let metadata = v.metadata(&fields);
    let allowed_tools = v.allowed_tools(&fields);
    let disable_model_invocation = v.optional_bool(&fields, "disable-model-invocation", false);
    let user_invocable = v.optional_bool(&fields, "user-invocable", true);
    let argument_hint = v.optional_string(&fields, "argument-hint");

    let mut extra = BTreeMap::new();
    for (key, value) in &fields {
        if !KNOWN_FIELDS.contains(&key.as_str()) {
            v.warnings.push(Problem {
                line: fm.line_of(key),
                rule: "unknown-field",
                message: format!(
                    "`{key}` is not a field of the Agent Skills specification; it is kept but ignored (known: {})",
                    KNOWN_FIELDS.join(", ")
                ),
            });
            let text = serde_norway::to_string(value).unwrap_or_default();
            extra.insert(key.clone(), text.trim_end().to_string());
        }
    }

    let build = |name, description, title| SkillMeta {
        name,
        description,
        license,
        compatibility,
        metadata,
        allowed_tools,
        disable_model_invocation,
        user_invocable,
        argument_hint,
        extra,
        title,
    };
    if strictness == Strictness::Lenient {
        return lenient(v, fm, folder_name, name, description, build);
    }
    let meta = match (name, description) {
        (Some(name), Some(description)) if v.errors.is_empty() => {
            Some(build(name, description, None))
        }
        _ => None,
    };
    Checked {
        meta,
        errors: v.errors,
        warnings: v.warnings,
    }
}

/// The lenient outcome: metadata under a derivable name whenever there is a
/// description, with the relaxed errors as warnings.
fn lenient(
    mut v: Validator<'_>,
    fm: &Frontmatter,
    folder: &str,
    name: Option<String>,
    description: Option<String>,
    build: impl FnOnce(String, String, Option<String>) -> SkillMeta,
) -> Checked {
    // Over-long names still load, with a warning (the client guide's rule).
    let valid =
        |n: &str| name_format_problem(n).is_none() && n.chars().count() <= MAX_SERVED_NAME_CHARS;
    let served = match &name {
        Some(n) if valid(n) && n == folder => Some(n.clone()),
        _ if valid(folder) => Some(folder.to_string()),
        _ => None,
    };
    let (Some(served), Some(description)) = (served.clone(), description) else {
        if served.is_none() {
            v.error(
                fm.line_of("name"),
                "name-format",
                format!(
                    "no valid name can be derived: neither `name` nor the folder {folder:?} is a \
                     valid skill name (a-z, 0-9 and single hyphens, at most \
                     {MAX_SERVED_NAME_CHARS} characters); the skill is skipped"
                ),
            );
        }
        return Checked {
            meta: None,
            errors: v.errors,
            warnings: v.warnings,
        };
    };
    for mut problem in std::mem::take(&mut v.errors) {
        problem.message.push_str(&match problem.rule {
            "name-format" | "name-length" | "name-folder-mismatch" | "name-missing" => {
                format!("; served as `{served}` (the folder's name)")
            }
            "description-length" => {
                format!(
                    "; cut at a word boundary to {MAX_DESCRIPTION_CHARS} characters for the catalog"
                )
            }
            _ => "; the field is ignored".to_string(),
        });
        v.warnings.push(problem);
    }
    let description = cut_at_word(&description, MAX_DESCRIPTION_CHARS);
    let title = name.filter(|n| *n != served);
    Checked {
        meta: Some(build(served, description, title)),
        errors: Vec::new(),
        warnings: v.warnings,
    }
}

/// `text` cut to at most `max` characters at a word boundary, with `…`;
/// unchanged when it fits.
pub fn cut_at_word(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let limit = text
        .char_indices()
        .nth(max.saturating_sub(1))
        .map_or(text.len(), |(i, _)| i);
    let head = &text[..limit];
    let cut = head
        .rfind(char::is_whitespace)
        .filter(|&i| i > limit / 2)
        .unwrap_or(limit);
    format!("{}…", head[..cut].trim_end())
}

struct Validator<'a> {
    fm: &'a Frontmatter,
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl Validator<'_> {
    fn error(&mut self, line: Option<usize>, rule: &'static str, message: String) {
        self.errors.push(Problem {
            line,
            rule,
            message,
        });
    }

    fn required_string(&mut self, fields: &BTreeMap<String, &Value>, key: &str) -> Option<String> {
        match fields.get(key) {
            None => {
                let rule = if key == "name" {
                    "name-missing"
                } else {
                    "description-missing"
                };
                self.error(
                    Some(2),
                    rule,
                    format!("the frontmatter has no `{key}`; add `{key}: …`"),
                );
                None
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.error(
                    self.fm.line_of(key),
                    if key == "name" {
                        "name-format"
                    } else {
                        "description-empty"
                    },
                    format!("`{key}` is empty"),
                );
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.type_error(key, "text", other);
                None
            }
        }
    }

    fn optional_string(&mut self, fields: &BTreeMap<String, &Value>, key: &str) -> Option<String> {
        match fields.get(key) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.type_error(key, "text", other);
                None
            }
        }
    }

    fn optional_bool(
        &mut self,
        fields: &BTreeMap<String, &Value>,
        key: &str,
        default: bool,
    ) -> bool {
        match fields.get(key) {
            None => default,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.type_error(key, "true or false", other);
                default
            }
        }
    }

    fn type_error(&mut self, key: &str, want: &str, got: &Value) {
        self.error(
            self.fm.line_of(key),
            "field-type",
            format!("`{key}` must be {want}; found a {}", kind_of(got)),
        );
    }

    fn check_length(&mut self, key: &str, value: &str, max: usize) {
        let chars = value.chars().count();
        if chars > max {
            let rule = if key == "description" {
                "description-length"
            } else {
                "compatibility-length"
            };
            self.error(
                self.fm.line_of(key),
                rule,
                format!("`{key}` is {chars} characters; the limit is {max}. Shorten it"),
            );
        }
    }

    fn check_name(&mut self, name: &str, folder: &str) {
        let line = self.fm.line_of("name");
        let chars = name.chars().count();
        if chars > MAX_NAME_CHARS {
            self.error(
                line,
                "name-length",
                format!("`name` is {chars} characters; the limit is {MAX_NAME_CHARS}"),
            );
        }
        if let Some(problem) = name_format_problem(name) {
            self.error(
                line,
                "name-format",
                format!(
                    "`name` {name:?} {problem} (use a-z, 0-9 and single hyphens, like `log-inspect`)"
                ),
            );
        }
        if name != folder {
            self.error(
                line,
                "name-folder-mismatch",
                format!(
                    "`name` is {name:?} but the folder is {folder:?}; they must be equal (rename one)"
                ),
            );
        }
    }

    fn metadata(&mut self, fields: &BTreeMap<String, &Value>) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(value) = fields.get("metadata") else {
            return out;
        };
        let Value::Mapping(map) = value else {
            self.type_error("metadata", "a mapping of text to text", value);
            return out;
        };
        for (k, v) in map {
            match (scalar_text(k), scalar_text(v)) {
                (Some(k), Some(v)) => {
                    out.insert(k, v);
                }
                _ => self.error(
                    self.fm.line_of("metadata"),
                    "metadata-type",
                    "`metadata` must map text keys to text values; nested lists and mappings are not allowed".into(),
                ),
            }
        }
        out
    }

    fn allowed_tools(&mut self, fields: &BTreeMap<String, &Value>) -> Vec<String> {
        match fields.get("allowed-tools") {
            None => Vec::new(),
            Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
            Some(Value::Sequence(items)) => {
                let tools: Option<Vec<String>> = items.iter().map(scalar_text).collect();
                tools.unwrap_or_else(|| {
                    self.type_error(
                        "allowed-tools",
                        "text or a list of text",
                        &Value::Sequence(items.clone()),
                    );
                    Vec::new()
                })
            }
            Some(other) => {
                self.type_error("allowed-tools", "text or a list of text", other);
                Vec::new()
            }
        }
    }
}

/// Scalars (text, numbers, booleans) as text, as YAML authors expect of a
/// `version: 1.0` in metadata.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Why `name` fails `^[a-z0-9]+(-[a-z0-9]+)*$`, if it does.
pub fn name_format_problem(name: &str) -> Option<&'static str> {
    if name.chars().any(|c| c.is_uppercase()) {
        Some("must be lowercase")
    } else if name.starts_with('-') || name.ends_with('-') {
        Some("cannot start or end with a hyphen")
    } else if name.contains("--") {
        Some("cannot contain consecutive hyphens")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        Some("may contain only a-z, 0-9 and hyphens")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::frontmatter::{Strictness, split, split_with};
    use super::{check, cut_at_word};

    #[test]
    fn descriptions_are_cut_at_a_word() {
        let long = "word ".repeat(300);
        let cut = cut_at_word(&long, 1024);
        assert!(cut.chars().count() <= 1024, "{}", cut.chars().count());
        assert!(cut.ends_with("word…"));
        assert_eq!(cut_at_word("short", 1024), "short");
    }

    #[test]
    fn lenient_reading_serves_a_display_name_under_the_folder() {
        let fm =
            split(b"---\nname: Build SQL Context\ndescription: Builds context.\n---\n").unwrap();
        let strict = check(&fm, "build-sql", Strictness::Strict);
        assert!(strict.meta.is_none());
        let lenient = check(&fm, "build-sql", Strictness::Lenient);
        let meta = lenient.meta.expect("served");
        assert_eq!(meta.name, "build-sql");
        assert_eq!(meta.title.as_deref(), Some("Build SQL Context"));
        let rules: Vec<&str> = lenient.warnings.iter().map(|w| w.rule).collect();
        assert!(
            rules.contains(&"name-format") && rules.contains(&"name-folder-mismatch"),
            "{rules:?}"
        );
        let bad_folder = check(&fm, "Bad Folder", Strictness::Lenient);
        assert!(bad_folder.meta.is_none());
        let no_description = split(b"---\nname: x\n---\n").unwrap();
        let skipped = check(&no_description, "x", Strictness::Lenient);
        assert!(skipped.meta.is_none());
        assert_eq!(skipped.errors[0].rule, "description-missing");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(fm) = split(&bytes) {
                let _ = check(&fm, "x", Strictness::Strict);
                let _ = check(&fm, "x", Strictness::Lenient);
            }
        }

        #[test]
        fn arbitrary_frontmatter_text_never_panics(yaml in "[a-z:\\-\\[\\]{}&*!|>'\" \\n#0-9]{0,200}") {
            let text = format!("---\n{yaml}\n---\nbody\n");
            if let Ok(fm) = split(text.as_bytes()) {
                let _ = check(&fm, "x", Strictness::Strict);
                let _ = check(&fm, "x", Strictness::Lenient);
            }
            // The colon fallback rewrites the text; it must not panic either.
            if let Ok((fm, _)) = split_with(text.as_bytes(), Strictness::Lenient) {
                let _ = check(&fm, "x", Strictness::Lenient);
            }
        }
    }
}
