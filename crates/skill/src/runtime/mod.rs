//! Interpreters for the scripts skills ship as source: a `scripts/x.py`
//! runs in the Python runtime, a WebAssembly command component built
//! from CPython (`runtimes/python/`), in the same sandbox, grants and
//! limits as any command component. The interpreter is host code the
//! user installed and trusts; the script is not.

// `run_script`'s command line is an MCP argument.
pub mod command;
pub mod packages;
pub mod python;
pub mod python_full;

/// How a skill's script file runs, judged by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptKind {
    /// A `.py` file: the Python runtime runs it.
    Python,
    /// A language the sandbox has no interpreter for.
    Unsupported(Unsupported),
}

/// Script languages that cannot run here, each with the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    Shell,
    JavaScript,
    Other,
}

impl Unsupported {
    /// Why it cannot run, and what to do instead, for a model and a person.
    pub fn reason(self, script: &str) -> String {
        match self {
            Unsupported::Shell => format!(
                "`{script}` is a shell script, and the sandbox has no shell and runs no \
                 processes. Do its steps with the skill's tools or Python scripts, or run it \
                 outside skillbox if you trust it."
            ),
            Unsupported::JavaScript => format!(
                "`{script}` is JavaScript, and skillbox runs only Python scripts and \
                 WebAssembly command components. A JavaScript tool can be built into a \
                 component (docs/authoring.md)."
            ),
            Unsupported::Other => format!(
                "`{script}` is not a script skillbox can run: it runs Python (.py) scripts and \
                 the WebAssembly command components a skillbox.yaml lists."
            ),
        }
    }
}

impl Unsupported {
    /// Why `run_code` cannot run code in `language`, and what to do
    /// instead.
    pub fn code_reason(self, language: &str) -> String {
        match self {
            Unsupported::Shell => format!(
                "`{language}` code needs a shell, and the sandbox has no shell and runs no \
                 processes yet. Write the steps in Python (run_code's language `python`, the \
                 default), or use the skill's tools and scripts."
            ),
            Unsupported::JavaScript | Unsupported::Other => format!(
                "run_code runs Python, not `{language}`. Write the steps in Python (language \
                 `python`, the default)."
            ),
        }
    }
}

/// The kind of code `run_code` is given in `language` (`python` when the
/// caller names none).
pub fn code_kind(language: &str) -> ScriptKind {
    match language.to_ascii_lowercase().as_str() {
        "python" | "python3" | "py" => ScriptKind::Python,
        "sh" | "bash" | "shell" | "zsh" => ScriptKind::Unsupported(Unsupported::Shell),
        "javascript" | "js" | "node" | "typescript" | "ts" => {
            ScriptKind::Unsupported(Unsupported::JavaScript)
        }
        _ => ScriptKind::Unsupported(Unsupported::Other),
    }
}

/// The kind of a script path that is not a manifest-listed component.
pub fn kind_of(path: &str) -> ScriptKind {
    let extension = path
        .rsplit('/')
        .next()
        .and_then(|file| file.rsplit_once('.'))
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match extension.as_deref() {
        Some("py") => ScriptKind::Python,
        Some("sh" | "bash" | "zsh") => ScriptKind::Unsupported(Unsupported::Shell),
        Some("js" | "mjs" | "cjs" | "ts") => ScriptKind::Unsupported(Unsupported::JavaScript),
        _ => ScriptKind::Unsupported(Unsupported::Other),
    }
}
