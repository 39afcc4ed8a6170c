//! A skill's tools and scripts as this host serves them: the manifest's
//! descriptions joined to the component's own types.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::diagnostic::Diagnostic;
use super::manifest::{Effect, MANIFEST_FILE, ToolComponent};
use super::model::Skill;
use crate::sandbox::{LoadedComponent, MAX_COMPONENT_BYTES, Sandbox};
use crate::schema::{ExportedFunction, output_schema};

/// MCP tool names must fit every major model API.
pub const MAX_TOOL_NAME: usize = 64;

/// One tool a skill serves, named `<skill>__<function>`.
#[derive(Debug, Clone)]
pub struct SkillTool {
    pub name: String,
    pub skill: String,
    /// Component path inside the skill folder.
    pub component_path: String,
    /// The exported function's tool-facing name.
    pub function: String,
    pub description: String,
    pub effect: Effect,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    /// The manifest's hint for asking for less (`paging:`).
    pub paging: Option<String>,
    pub component: Arc<LoadedComponent>,
}

pub fn tool_name(skill: &str, function: &str) -> String {
    format!("{skill}__{function}")
}

/// Splits `skill__function`.
pub fn split_tool_name(name: &str) -> Option<(&str, &str)> {
    name.split_once("__")
}

/// A skill's code, loaded: its tools, its scripts' components by script
/// name, and what in the manifest does not match the code.
#[derive(Debug, Default)]
pub struct Resolution {
    pub tools: Vec<SkillTool>,
    pub scripts: Vec<(String, Arc<LoadedComponent>)>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Compiles (or loads from cache) a skill's tool and script components and
/// derives its tools. Diagnostics name what in the manifest does not match
/// the code.
pub fn resolve(skill: &Skill, sandbox: &Sandbox) -> Resolution {
    let mut resolution = Resolution::default();
    let Resolution {
        tools,
        scripts,
        diagnostics: diags,
    } = &mut resolution;
    let manifest_path = skill.dir.join(MANIFEST_FILE);
    let Some(manifest) = &skill.manifest else {
        return resolution;
    };
    for entry in &manifest.tools {
        match load(skill, &entry.component, sandbox) {
            Ok(component) => tools_of(skill, entry, component, &manifest_path, tools, diags),
            Err(message) => {
                diags.push(Diagnostic::error(&manifest_path, "component-load", message))
            }
        }
    }
    for script in &manifest.scripts {
        match load(skill, &script.component, sandbox) {
            Ok(component) if !component.exports.is_command => diags.push(Diagnostic::error(
                &manifest_path,
                "script-not-command",
                format!(
                    "script `{}` ({}) does not export wasi:cli/run; list it under `tools` instead",
                    script.name(),
                    script.component
                ),
            )),
            Ok(component) => scripts.push((script.name(), component)),
            Err(message) => {
                diags.push(Diagnostic::error(&manifest_path, "component-load", message))
            }
        }
    }
    resolution
}

/// Loads a component from inside the skill folder, through the folder
/// handle pinned when the catalog was built, and only if its bytes are
/// still the ones the catalog recorded: code changed under a loaded skill
/// does not run with that skill's grants until a reload checks it again.
pub fn load(skill: &Skill, rel: &str, sandbox: &Sandbox) -> Result<Arc<LoadedComponent>, String> {
    let bytes = skill
        .files
        .read_bounded(rel, MAX_COMPONENT_BYTES)
        .map_err(|e| format!("component `{rel}`: {e}"))?;
    let hex = crate::sandbox::sha256_hex(&bytes);
    if skill
        .component_digest(rel)
        .and_then(|d| d.strip_prefix("sha256:"))
        != Some(hex.as_str())
    {
        return Err(format!(
            "component `{rel}` changed since skill `{}` was loaded; it does not run until the \
             skill is reloaded and checked again",
            skill.name()
        ));
    }
    sandbox
        .load_hashed(&bytes, &hex)
        .map_err(|e| format!("component `{rel}`: {e}"))
}

fn tools_of(
    skill: &Skill,
    entry: &ToolComponent,
    component: Arc<LoadedComponent>,
    manifest_path: &std::path::Path,
    tools: &mut Vec<SkillTool>,
    diags: &mut Vec<Diagnostic>,
) {
    let exports = &component.exports;
    let chosen: Vec<(&ExportedFunction, Option<&super::manifest::ToolSpec>)> = if entry
        .functions
        .is_empty()
    {
        exports.functions.iter().map(|f| (f, None)).collect()
    } else {
        let mut chosen = Vec::new();
        for (name, spec) in &entry.functions {
            match exports.function(name) {
                Some(f) => chosen.push((f, Some(spec))),
                None => {
                    let why = exports
                        .skipped
                        .iter()
                        .find(|s| &s.name == name)
                        .map(|s| format!("it is exported but cannot be a tool: {}", s.reason))
                        .unwrap_or_else(|| format!("it exports: {}", exports.names().join(", ")));
                    diags.push(Diagnostic::error(
                        manifest_path,
                        "tool-unknown-function",
                        format!(
                            "`{}` lists function `{name}`, which it does not serve; {why}",
                            entry.component
                        ),
                    ));
                }
            }
        }
        chosen
    };
    for (function, spec) in chosen {
        let name = tool_name(skill.name(), &function.name);
        if name.len() > MAX_TOOL_NAME {
            diags.push(Diagnostic::error(
                manifest_path,
                "tool-name-length",
                format!("tool name `{name}` is {} characters; the limit is {MAX_TOOL_NAME}. Shorten the skill or function name", name.len()),
            ));
            continue;
        }
        let mut input_schema = function.input_schema();
        if let Some(spec) = spec {
            let known: BTreeSet<&str> = function.params.iter().map(|(n, _)| n.as_str()).collect();
            for (param, text) in &spec.params {
                if !known.contains(param.as_str()) {
                    diags.push(Diagnostic::error(
                        manifest_path,
                        "tool-unknown-param",
                        format!(
                            "tool `{}` describes parameter `{param}`, which the function does not take; it takes: {}",
                            function.name,
                            known.iter().copied().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                } else if let Some(prop) = input_schema["properties"].get_mut(param.as_str()) {
                    prop["description"] = Value::from(text.as_str());
                }
            }
        } else {
            diags.push(Diagnostic::warning(
                manifest_path,
                "tool-description",
                format!(
                    "`{}` exports `{}` with no description; list it under `functions` with one that says when to use it and when not to",
                    entry.component, function.name
                ),
            ));
        }
        tools.push(SkillTool {
            name,
            skill: skill.name().to_string(),
            component_path: entry.component.clone(),
            function: function.name.clone(),
            description: spec
                .map(|s| s.description.trim().to_string())
                .unwrap_or_default(),
            // A function the manifest does not describe may do anything its
            // grants allow: treat it as writing, never as read-only.
            effect: spec.map_or(Effect::Write, |s| s.effect),
            input_schema,
            output_schema: function.result.as_ref().map(output_schema),
            paging: spec.and_then(|s| s.paging.clone()),
            component: component.clone(),
        });
    }
}
