//! Interpreters for the scripts skills ship as source: a `scripts/x.py`
//! runs in the Python runtime, a WebAssembly command component built
//! from CPython (`runtimes/python/`), in the same sandbox, grants and
//! limits as any command component. The interpreter is host code the
//! user installed and trusts; the script is not. A `scripts/x.sh` runs
//! with a shell the user granted the skill (`shell.rs`).

// `run_script`'s command line is an MCP argument.
pub mod bytecode;
pub mod command;
pub mod packages;
pub mod python;
pub mod python_full;
pub mod shell;

/// How a skill's script file runs, judged by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptKind {
    /// A `.py` file: the Python runtime runs it.
    Python,
    /// A `.sh` file: a shell the user granted runs it (`shell.rs`).
    Shell,
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
                "`{script}` is a shell script of a kind skillbox does not run: it runs `.sh`, \
                 `.bash` and `.zsh` scripts with a shell the user granted the skill."
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
                "`{language}` code needs a shell, and run_code runs Python only (a shell \
                 runs a skill's own scripts/*.sh, when the user granted it one). Write the \
                 steps in Python (run_code's language `python`, the default), and start the \
                 programs they need with subprocess; or use the skill's tools and scripts."
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
    if crate::skill::programs::is_shell_script(path) {
        return ScriptKind::Shell;
    }
    let extension = path
        .rsplit('/')
        .next()
        .and_then(|file| file.rsplit_once('.'))
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match extension.as_deref() {
        Some("py") => ScriptKind::Python,
        Some("js" | "mjs" | "cjs" | "ts") => ScriptKind::Unsupported(Unsupported::JavaScript),
        _ => ScriptKind::Unsupported(Unsupported::Other),
    }
}
