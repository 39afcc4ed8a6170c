//! Findings about a skill, in the `path:line: severity: rule: message`
//! form authors, editors and CI read.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding. `rule` is a stable identifier (`name-format`,
/// `yaml-duplicate-key`, …) tests and tools can match on; `message` says
/// what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Diagnostic {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub severity: Severity,
    pub rule: &'static str,
    pub message: String,
}

impl Diagnostic {
    pub fn error(path: impl Into<PathBuf>, rule: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            path: path.into(),
            line: None,
            severity: Severity::Error,
            rule,
            message: message.into(),
        }
    }

    pub fn warning(
        path: impl Into<PathBuf>,
        rule: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(path, rule, message)
        }
    }

    pub fn at_line(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}: {}: {}", self.severity, self.rule, self.message)
    }
}

/// Whether any diagnostic in `list` is an error.
pub fn has_errors(list: &[Diagnostic]) -> bool {
    list.iter().any(Diagnostic::is_error)
}
