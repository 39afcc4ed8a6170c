//! `skillbox new skill NAME`: a skill with one tool in Rust, Python or
//! JavaScript.
//!
//! The result builds with `skillbox build` and its tool answers over MCP,
//! so an author starts from something that works and changes it step by
//! step. Its SKILL.md holds placeholder text that `skills check` reports
//! until the author replaces it (`skill::check::TEMPLATE_TEXT`), so a
//! template never passes as a finished skill.

use std::path::{Path, PathBuf};

use super::build::ToolLanguage;
use crate::skill::meta::{MAX_NAME_CHARS, name_format_problem};

/// What to create.
#[derive(Debug, Clone)]
pub struct NewSkill {
    /// The skill's name: lowercase letters, digits and single hyphens.
    pub name: String,
    /// The folder the skill folder is created in.
    pub parent: PathBuf,
    /// Add a tool in this language (`tool/`) and list its function in
    /// the manifest.
    pub tool: Option<ToolLanguage>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "`{name}` is not a valid skill name: it {problem}. Use lowercase letters, digits and \
         single hyphens, at most 64 characters, starting with a letter (for example `csv-report`)"
    )]
    BadName { name: String, problem: &'static str },
    #[error("`{0}` already exists; pick another name or remove it first")]
    Exists(String),
    #[error("cannot write `{path}`: {reason}")]
    Write { path: String, reason: String },
}

/// Creates the skill folder and returns its path.
pub fn new_skill(spec: &NewSkill) -> Result<PathBuf, ScaffoldError> {
    if let Some(problem) = name_problem(&spec.name) {
        return Err(ScaffoldError::BadName {
            name: spec.name.clone(),
            problem,
        });
    }
    let dir = spec.parent.join(&spec.name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(spec.name.clone()));
    }
    let name = spec.name.as_str();
    let mut files = vec![("SKILL.md", skill_md(name, spec.tool.is_some()))];
    if let Some(language) = spec.tool {
        files.extend([
            ("skillbox.yaml", manifest(name)),
            ("tool/wit/world.wit", world_wit()),
            (".gitignore", "target/\n__pycache__/\n".to_string()),
        ]);
        match language {
            ToolLanguage::Rust => files.extend([
                ("tool/Cargo.toml", cargo_toml(name)),
                ("tool/src/lib.rs", lib_rs()),
            ]),
            ToolLanguage::Python => files.push(("tool/app.py", app_py())),
            ToolLanguage::JavaScript => files.push(("tool/app.js", app_js())),
        }
    }
    for (rel, text) in files {
        write(&dir, rel, &text)?;
    }
    super::trust::remember_created(&dir);
    Ok(dir)
}

/// Why `name` cannot name a new skill. Stricter than `skills check`: the
/// name also becomes a Rust library name, which must start with a letter.
fn name_problem(name: &str) -> Option<&'static str> {
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some("must start with a lowercase letter")
    } else if name.chars().count() > MAX_NAME_CHARS {
        Some("is longer than 64 characters")
    } else {
        name_format_problem(name)
    }
}

fn write(dir: &Path, rel: &str, text: &str) -> Result<(), ScaffoldError> {
    let path = dir.join(rel);
    let failed = |e: std::io::Error| ScaffoldError::Write {
        path: rel.to_string(),
        reason: crate::sandbox::io_reason(&e),
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    std::fs::write(&path, text).map_err(failed)
}

/// The crate's library name: what cargo calls the built `.wasm` file.
fn lib_name(skill: &str) -> String {
    skill.replace('-', "_")
}

fn skill_md(name: &str, with_tool: bool) -> String {
    let tool_step = if with_tool {
        format!(
            "2. **Call the tool.** Call `{name}__greet` with the name to greet.\n   \
             *Done when:* you have its reply.\n"
        )
    } else {
        "2. **Do the work.** Describe the one thing to do here.\n   \
         *Done when:* say how the model knows this step is finished.\n"
            .to_string()
    };
    format!(
        "---\n\
         name: {name}\n\
         description: Greets someone by name. Use when a user asks to greet someone; replace this with what your skill does, when to use it and when not to.\n\
         license: Apache-2.0\n\
         metadata:\n  version: \"0.1.0\"\n\
         ---\n\
         \n\
         # {name}\n\
         \n\
         One paragraph on what this skill is for and what it returns.\n\
         \n\
         ## Steps\n\
         \n\
         1. **Understand the request.** Find the name to greet.\n   \
         *Done when:* you have one name.\n\
         {tool_step}\
         3. **Report.** Give the greeting as the tool returned it.\n\
         \n\
         ## Self-check\n\
         \n\
         - The answer quotes the tool's result, not a guess.\n"
    )
}

fn manifest(name: &str) -> String {
    format!(
        "# `skillbox build` builds tool/ into this component (docs/authoring.md).\n\
         tools:\n  \
         - component: tools/{name}.wasm\n    \
         functions:\n      \
         greet:\n        \
         description: Return a greeting for a name. Use to greet someone. Not for anything else.\n        \
         effect: read\n        \
         params:\n          \
         name: Who to greet.\n"
    )
}

fn cargo_toml(name: &str) -> String {
    let lib = lib_name(name);
    format!(
        "# The tool of skill `{name}`: `skillbox build` compiles it to\n\
         # wasm32-wasip2 and places it at tools/{name}.wasm.\n\
         [package]\n\
         name = \"{name}-tool\"\n\
         version = \"0.1.0\"\n\
         edition = \"2024\"\n\
         publish = false\n\
         \n\
         [lib]\n\
         name = \"{lib}\"\n\
         crate-type = [\"cdylib\"]\n\
         \n\
         [dependencies]\n\
         wit-bindgen = {{ version = \"0.61\", default-features = false, features = [\"macros\", \"realloc\"] }}\n\
         \n\
         [profile.release]\n\
         opt-level = \"s\"\n\
         lto = true\n\
         codegen-units = 1\n\
         strip = true\n\
         \n\
         # Its own workspace, so it builds wherever the skill folder sits.\n\
         [workspace]\n"
    )
}

fn world_wit() -> String {
    "package local:tool@0.1.0;\n\
     \n\
     /// The functions this skill's tool exports; each becomes an MCP tool.\n\
     world tool {\n  \
     /// Returns a greeting for `name`; fails on an empty name.\n  \
     export greet: func(name: string) -> result<string, string>;\n\
     }\n"
    .to_string()
}

fn lib_rs() -> String {
    "//! The skill's tool. Each function exported by the WIT world in\n\
     //! `wit/world.wit` is an MCP tool; a `result<_, string>` error is the\n\
     //! tool's own failure, shown to the model.\n\
     \n\
     wit_bindgen::generate!({ path: \"wit\", world: \"tool\" });\n\
     \n\
     struct Tool;\n\
     \n\
     impl Guest for Tool {\n    \
     fn greet(name: String) -> Result<String, String> {\n        \
     let name = name.trim();\n        \
     if name.is_empty() {\n            \
     return Err(\"give a name to greet\".into());\n        \
     }\n        \
     Ok(format!(\"Hello, {name}!\"))\n    \
     }\n\
     }\n\
     \n\
     export!(Tool);\n"
        .to_string()
}

fn app_py() -> String {
    "\"\"\"The skill's tool. Each function exported by the WIT world in\n\
     wit/world.wit is an MCP tool; raising componentize_py_types.Err is the\n\
     tool's own failure, shown to the model. The sandbox gives the tool no\n\
     network and only the files the user granted (at /workspace).\n\
     \"\"\"\n\
     \n\
     import componentize_py_types\n\
     import wit_world\n\
     \n\
     \n\
     class WitWorld(wit_world.WitWorld):\n    \
     def greet(self, name: str) -> str:\n        \
     name = name.strip()\n        \
     if not name:\n            \
     raise componentize_py_types.Err(\"give a name to greet\")\n        \
     return f\"Hello, {name}!\"\n"
        .to_string()
}

fn app_js() -> String {
    "// The skill's tool. Each function exported by the WIT world in\n\
     // wit/world.wit is an MCP tool; a thrown error is the tool's own\n\
     // failure, shown to the model. The tool runs in a WebAssembly sandbox:\n\
     // there is no node:fs or node:net, only what WASI gives (files at\n\
     // /workspace when the user grants them).\n\
     \n\
     export function greet(name) {\n  \
     const trimmed = name.trim();\n  \
     if (trimmed.length === 0) {\n    \
     throw \"give a name to greet\";\n  \
     }\n  \
     return `Hello, ${trimmed}!`;\n\
     }\n"
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_holds_the_text_skills_check_reports() {
        let md = skill_md("hello-kit", true);
        for text in crate::skill::check::TEMPLATE_TEXT {
            assert!(
                md.contains(text),
                "`skills check` looks for {text:?}, which the template no longer writes"
            );
        }
    }
}
