//! Splitting SKILL.md into YAML frontmatter and Markdown body.
//!
//! The input is already bounded by the reader; this module decodes it
//! strictly, accepts a BOM and CRLF line endings, and parses the
//! frontmatter with a real YAML parser that refuses duplicate keys and
//! alias bombs.

use std::collections::BTreeMap;

use serde_norway::{Mapping, Value};

/// A diagnostic without a path: the caller knows which file it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub rule: &'static str,
    pub message: String,
}

impl Problem {
    fn new(line: Option<usize>, rule: &'static str, message: impl Into<String>) -> Self {
        Problem {
            line,
            rule,
            message: message.into(),
        }
    }
}

/// SKILL.md, split.
#[derive(Debug, Clone)]
pub struct Frontmatter {
    pub mapping: Mapping,
    /// The Markdown after the closing `---`, with LF line endings.
    pub body: String,
    /// The 1-based line of the file where the body starts.
    pub body_line: usize,
    /// The line of each top-level key, for diagnostics.
    pub key_lines: BTreeMap<String, usize>,
}

impl Frontmatter {
    pub fn line_of(&self, key: &str) -> Option<usize> {
        self.key_lines.get(key).copied()
    }
}

/// How strictly SKILL.md is read: `skills check` holds authors to the
/// specification; serving follows the Agent Skills client guide's lenient
/// rules, so a skill other hosts load is not silently missing here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    Strict,
    Lenient,
}

/// Decodes and splits SKILL.md, strictly (for the tests).
#[cfg(test)]
pub fn split(bytes: &[u8]) -> Result<Frontmatter, Problem> {
    split_with(bytes, Strictness::Strict).map(|(fm, _)| fm)
}

/// Decodes and splits SKILL.md. Leniently, YAML that does not parse is
/// tried once more with every top-level value that contains `: ` quoted
/// (the most common mistake), and a warning says so.
pub fn split_with(
    bytes: &[u8],
    strictness: Strictness,
) -> Result<(Frontmatter, Option<Problem>), Problem> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        Problem::new(
            Some(line),
            "encoding",
            "SKILL.md is not valid UTF-8; save it as UTF-8",
        )
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");

    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(Problem::new(
            Some(1),
            "frontmatter-missing",
            "SKILL.md must start with a `---` line, then YAML frontmatter (name, description), then `---`",
        ));
    }
    let mut offset = first.len();
    let mut close = None;
    for (i, line) in lines.enumerate() {
        if line.trim_end() == "---" {
            close = Some((offset, offset + line.len(), i + 2));
            break;
        }
        offset += line.len();
    }
    let Some((yaml_end, body_start, close_line)) = close else {
        return Err(Problem::new(
            Some(1),
            "frontmatter-unterminated",
            "the frontmatter opened on line 1 is never closed; add a `---` line after it",
        ));
    };
    let yaml = &text[first.len()..yaml_end];
    let (mapping, relaxed) = match parse_yaml(yaml) {
        Ok(mapping) => (mapping, None),
        Err(problem) if strictness == Strictness::Lenient && problem.rule == "yaml-syntax" => {
            let (quoted, lines) = quote_colon_values(yaml);
            match (lines.is_empty(), parse_yaml(&quoted)) {
                (false, Ok(mapping)) => {
                    let lines: Vec<String> = lines.iter().map(ToString::to_string).collect();
                    let warning = Problem::new(
                        problem.line,
                        "yaml-syntax",
                        format!(
                            "{}; read after quoting the values that contain `: ` (line {}); quote them in SKILL.md",
                            problem.message,
                            lines.join(", ")
                        ),
                    );
                    (mapping, Some(warning))
                }
                _ => return Err(problem),
            }
        }
        Err(problem) => return Err(problem),
    };
    Ok((
        Frontmatter {
            mapping,
            body: text[body_start..].to_string(),
            body_line: close_line + 1,
            key_lines: top_level_key_lines(yaml),
        },
        relaxed,
    ))
}

/// The YAML with each plain top-level value that contains `: ` written as
/// a quoted string, and the file lines changed.
fn quote_colon_values(yaml: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(yaml.len() + 64);
    let mut changed = Vec::new();
    for (i, line) in yaml.split_inclusive('\n').enumerate() {
        let content = line.trim_end_matches('\n');
        let quotable = !content.starts_with([' ', '\t', '#', '-'])
            && content.split_once(": ").is_some_and(|(key, value)| {
                let value = value.trim();
                !key.contains(['"', '\'', '#'])
                    && value.contains(": ")
                    && !value.starts_with(['"', '\'', '|', '>', '[', '{', '&', '*', '!'])
            });
        if quotable {
            let (key, value) = content.split_once(": ").expect("checked above");
            let escaped = value.trim().replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!("{key}: \"{escaped}\"\n"));
            changed.push(i + YAML_FIRST_LINE);
        } else {
            out.push_str(line);
        }
    }
    (out, changed)
}

/// The frontmatter starts on line 2 of the file.
const YAML_FIRST_LINE: usize = 2;

fn parse_yaml(yaml: &str) -> Result<Mapping, Problem> {
    let value: Value = serde_norway::from_str(yaml).map_err(|e| {
        let text = e.to_string();
        let line = duplicate_key_line(yaml, &text)
            .or_else(|| e.location().map(|l| l.line() + YAML_FIRST_LINE - 1));
        let (rule, hint) = if text.contains("duplicate") {
            (
                "yaml-duplicate-key",
                "each key may appear once; remove or rename the repeated key",
            )
        } else if text.contains("repetition limit") || text.contains("recursion limit") {
            (
                "yaml-alias-bomb",
                "the frontmatter expands aliases or nests too deeply; write the values out plainly",
            )
        } else {
            (
                "yaml-syntax",
                "fix the YAML; quote values that contain `: ` or start with a special character",
            )
        };
        Problem::new(line, rule, format!("{}: {hint}", first_sentence(&text)))
    })?;
    match value {
        Value::Mapping(m) => Ok(m),
        Value::Null => Err(Problem::new(
            Some(YAML_FIRST_LINE),
            "frontmatter-not-mapping",
            "the frontmatter is empty; it needs at least `name:` and `description:`",
        )),
        other => Err(Problem::new(
            Some(YAML_FIRST_LINE),
            "frontmatter-not-mapping",
            format!(
                "the frontmatter is a {}, not a mapping of `key: value` lines",
                kind_of(&other)
            ),
        )),
    }
}

/// The line of the second occurrence of a duplicated top-level key, which
/// is where the author must look (the parser reports the mapping's start).
fn duplicate_key_line(yaml: &str, message: &str) -> Option<usize> {
    let key = message
        .split("duplicate entry with key \"")
        .nth(1)?
        .split('"')
        .next()?;
    top_level_keys(yaml)
        .filter(|(k, _)| k == key)
        .nth(1)
        .map(|(_, line)| line)
}

/// serde_norway's messages end with a location we report separately.
fn first_sentence(text: &str) -> &str {
    text.split(" at line ").next().unwrap_or(text)
}

pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Sequence(_) => "list",
        Value::Mapping(_) => "mapping",
        Value::Tagged(_) => "tagged value",
    }
}

fn top_level_key_lines(yaml: &str) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    for (key, line) in top_level_keys(yaml) {
        lines.entry(key).or_insert(line);
    }
    lines
}

/// `(key, file line)` of each `key:` line at the top level of the YAML.
fn top_level_keys(yaml: &str) -> impl Iterator<Item = (String, usize)> + '_ {
    yaml.lines().enumerate().filter_map(|(i, line)| {
        if line.starts_with([' ', '\t', '#', '-']) {
            return None;
        }
        let (key, _) = line.split_once(':')?;
        Some((
            key.trim().trim_matches(['"', '\'']).to_string(),
            i + YAML_FIRST_LINE,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_reports_the_body_line() {
        let fm = split(b"---\nname: a\ndescription: b\n---\n# Body\n").unwrap();
        assert_eq!(fm.body, "# Body\n");
        assert_eq!(fm.body_line, 5);
        assert_eq!(fm.line_of("description"), Some(3));
    }

    #[test]
    fn accepts_bom_and_crlf() {
        let fm = split(b"\xef\xbb\xbf---\r\nname: a\r\ndescription: b\r\n---\r\nx\r\n").unwrap();
        assert_eq!(fm.body, "x\n");
        assert_eq!(fm.mapping.len(), 2);
    }

    #[test]
    fn lenient_reading_quotes_values_with_colons() {
        let text = b"---\nname: a\ndescription: Use when: the logs say \"x\"\n---\nbody\n";
        assert_eq!(split(text).unwrap_err().rule, "yaml-syntax");
        let (fm, warning) = split_with(text, Strictness::Lenient).unwrap();
        assert_eq!(
            fm.mapping.get("description").and_then(Value::as_str),
            Some("Use when: the logs say \"x\"")
        );
        let warning = warning.expect("a warning");
        assert_eq!(warning.rule, "yaml-syntax");
        assert!(warning.message.contains("line 3"), "{}", warning.message);
        let broken = b"---\nname: [a\n---\n";
        assert!(split_with(broken, Strictness::Lenient).is_err());
    }

    #[test]
    fn refuses_alias_bombs_quickly() {
        let mut yaml = String::from(
            "---\nname: a\ndescription: b\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
        );
        for i in 1..12 {
            let prev = i - 1;
            yaml.push_str(&format!(
                "x{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        yaml.push_str("---\n");
        let started = std::time::Instant::now();
        let err = split(yaml.as_bytes()).unwrap_err();
        assert_eq!(err.rule, "yaml-alias-bomb", "{err:?}");
        // Generous for a loaded machine; expanded, the aliases never finish.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
}
