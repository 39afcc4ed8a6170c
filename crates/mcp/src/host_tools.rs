//! The tools skillbox itself serves: `load_skill`, `find_skills`,
//! `read_skill_file`, `run_script` and `run_code`.

use std::collections::BTreeSet;
use std::sync::Arc;

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use super::results;
use super::server::Shared;
use crate::sandbox::CallOutcome;
use crate::skill::files::ReadError;
use crate::skill::resident::{self, FIND_SKILLS};
use crate::skill::{Catalog, Skill, invoke, policy, tools};
use skillbox_call::Target;

pub const LOAD_SKILL: &str = "load_skill";
pub(crate) const READ_SKILL_FILE: &str = "read_skill_file";
pub const RUN_SCRIPT: &str = "run_script";
pub const RUN_CODE: &str = "run_code";

/// Longest description shown per skill in the catalog, to keep it cheap.
/// Files larger than this are not read by `read_skill_file`.
const MAX_SKILL_FILE: u64 = 1024 * 1024;
const DEFAULT_LINES: usize = 200;
const MAX_LINES: usize = 1000;

/// The guest-visible name of a skill's folder in rendered bodies.
pub fn skill_dir_uri(skill: &str) -> String {
    format!("skill://{skill}")
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are objects"),
    }
}

fn read_only() -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

/// The host tools, with `load_skill`'s description as the resident
/// catalog within `budget` tokens. A read-only server does not offer
/// `run_script`; it offers `run_code`, whose workspace it keeps read-only.
pub fn definitions(catalog: &Catalog, read_only: bool, budget: usize) -> Vec<Tool> {
    let mut tools = all_definitions(catalog, budget);
    if read_only {
        tools.retain(|t| t.name != RUN_SCRIPT);
    }
    tools
}

fn all_definitions(catalog: &Catalog, budget: usize) -> Vec<Tool> {
    let resident = catalog.resident(budget);
    let mut listing = String::from(
        "Load a skill's instructions before doing a task it covers, then follow them. \
         Returns the skill's steps and its tools, references and scripts. Skills:\n",
    );
    if resident.total == 0 {
        listing.push_str("(none loaded)");
    } else {
        listing.push_str(&resident.text());
    }
    // The enum names every skill only when all of them are listed; past the
    // budget any skill's name is accepted (find it with find_skills).
    let name_schema = if resident.total == 0 {
        json!({"type": "string", "description": "No skills are loaded."})
    } else if resident.complete() {
        json!({"type": "string", "enum": resident.listed, "description": "The skill to load."})
    } else {
        json!({"type": "string", "description": "The skill to load: any skill's name, listed above or found with find_skills."})
    };
    vec![
        Tool::new(
            LOAD_SKILL,
            listing,
            schema(json!({
                "type": "object",
                "properties": {
                    "name": name_schema,
                    "arguments": {"type": "string", "description": "Optional text substituted for $ARGUMENTS in the skill."}
                },
                "required": ["name"],
                "additionalProperties": false
            })),
        )
        .with_annotations(read_only()),
        Tool::new(
            FIND_SKILLS,
            "Search every skill by name, description and headings; returns the best matches \
             with their descriptions. Use when no listed skill fits the task, or the list says \
             more skills exist. Then call load_skill with the name.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the task needs, in a few words, e.g. \"fill pdf forms\"."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FIND_RESULTS, "description": "Matches to return (default 10)."}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        )
        .with_annotations(read_only()),
        Tool::new(
            READ_SKILL_FILE,
            "Read a file of a skill (its SKILL.md or references/…), by line range. Use when a \
             loaded skill points to a reference. Not for workspace files (use the skill's tools).",
            schema(json!({
                "type": "object",
                "properties": {
                    "skill": {"type": "string", "description": "The skill's name."},
                    "path": {"type": "string", "description": "Path inside the skill folder, e.g. references/patterns.md."},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line, 1-based (default 1)."},
                    "max_lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES, "description": "Lines to return (default 200)."}
                },
                "required": ["skill", "path"],
                "additionalProperties": false
            })),
        )
        .with_annotations(read_only()),
        Tool::new(
            RUN_SCRIPT,
            "Run a script of a loaded skill in the sandbox with arguments and optional stdin; \
             returns its exit code, stdout and stderr. Use when a skill's steps name a script: \
             give `script` (its name or path, e.g. scripts/x.py) and `args`, or the `command` \
             line as the skill writes it (python3 scripts/x.py --flag a). Not for arbitrary \
             commands: only scripts a skill ships can run, with no shell.",
            schema(json!({
                "type": "object",
                "properties": {
                    "skill": {"type": "string", "description": "The skill's name."},
                    "script": {"type": "string", "description": "The script's name or path, as load_skill lists it (e.g. scripts/x.py)."},
                    "args": {"type": "array", "items": {"type": "string"}, "description": "Arguments (default none)."},
                    "command": {"type": "string", "description": "Instead of script and args: the command line the skill's instructions give, e.g. python3 scripts/x.py --flag a. Split without a shell."},
                    "stdin": {"type": "string", "description": "Text given on standard input (default empty)."}
                },
                "required": ["skill"],
                "additionalProperties": false
            })),
        )
        .with_annotations(runs_code()),
        Tool::new(
            RUN_CODE,
            "Run Python code in the sandbox, as `python -c` would; returns its exit code, stdout \
             and stderr. Use when a loaded skill's steps show code to run: give `skill`, and the \
             code runs as that skill's (its folder at /skill and first on sys.path, so its \
             helper modules import; its packages and grants). Without `skill`, the code gets the \
             workspace only: no network, no packages beyond the standard library. The workspace \
             is the working folder (/workspace), /tmp is scratch; there is no shell and no \
             processes.",
            schema(json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Python source to run."},
                    "skill": {"type": "string", "description": "Run as this loaded skill's code (optional)."},
                    "language": {"type": "string", "description": "The code's language: python (the default and, for now, the only one)."},
                    "args": {"type": "array", "items": {"type": "string"}, "description": "sys.argv[1:] (default none)."},
                    "stdin": {"type": "string", "description": "Text given on standard input (default empty)."}
                },
                "required": ["code"],
                "additionalProperties": false
            })),
        )
        .with_annotations(runs_code()),
    ]
}

/// Scripts and code may write the workspace they are granted.
fn runs_code() -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(false)
        .destructive(false)
        .idempotent(false)
        .open_world(false)
}

/// A skill tool as an MCP tool.
pub fn skill_tool_definition(tool: &tools::SkillTool) -> Tool {
    use crate::skill::Effect;
    let annotations = match tool.effect {
        Effect::Read => read_only(),
        Effect::Write => ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false),
        Effect::Destructive => ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(false),
    };
    let description = if tool.description.is_empty() {
        format!("{} (no description given by the skill)", tool.function)
    } else {
        tool.description.clone()
    };
    Tool::new(
        tool.name.clone(),
        description,
        schema(tool.input_schema.clone()),
    )
    .with_annotations(annotations)
}

/// Most matches `find_skills` returns.
const MAX_FIND_RESULTS: usize = 50;

/// `find_skills`: the best matches for a query among every skill the model
/// may use.
pub(crate) fn find_skills(catalog: &Catalog, args: &Map<String, Value>) -> CallToolResult {
    let query = match string_arg(args, "query") {
        Ok(q) => q,
        Err(e) => return e,
    };
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(10, |l| (l as usize).clamp(1, MAX_FIND_RESULTS));
    let hits = catalog.search_index().search(query, limit);
    if hits.is_empty() {
        let text = format!(
            "no skill matches {query:?}. Try other words (what the task is about, not how), or do the task without a skill."
        );
        return results::text_and_structure(text.clone(), json!({"skills": [], "note": text}));
    }
    let heading = format!("Skills matching {query:?}, best first (load one with load_skill):");
    let mut text = format!("{heading}\n");
    let mut found = Vec::new();
    for hit in &hits {
        if let Some(skill) = catalog.get(&hit.name) {
            text.push_str(&resident::line(skill, false));
            text.push('\n');
            found.push(json!({"name": skill.name(), "description": skill.meta.description, "score": hit.score}));
        }
    }
    results::text_and_structure(
        text.trim_end().to_string(),
        json!({"note": heading, "skills": found}),
    )
}

/// Reads a string argument, or says which is missing.
fn string_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, CallToolResult> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| {
        results::error(format!(
            "invalid arguments: `{key}` is required and must be a string. Nothing was run."
        ))
    })
}

fn find_skill(catalog: &Catalog, name: &str) -> Result<Arc<Skill>, CallToolResult> {
    catalog.get(name).cloned().ok_or_else(|| {
        let names: Vec<String> = if catalog.len() <= 30 {
            catalog
                .model_visible()
                .map(|s| s.name().to_string())
                .collect()
        } else {
            let words = name.replace('-', " ");
            catalog
                .search_index()
                .search(&words, 5)
                .into_iter()
                .map(|h| h.name)
                .collect()
        };
        results::error(format!(
            "no skill named `{name}`. {}: {}. Check the name, or search with find_skills.",
            if catalog.len() <= 30 {
                "Loaded skills"
            } else {
                "Similar skills"
            },
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ))
    })
}

/// `load_skill`: the body, and the skill's tools, references and scripts.
/// A `disable-model-invocation` skill loads only once the user invoked it
/// in this session (`user_invoked`).
pub(crate) async fn load_skill(
    server: &Arc<Shared>,
    args: &Map<String, Value>,
    user_invoked: &BTreeSet<String>,
) -> Result<(Arc<Skill>, CallToolResult), CallToolResult> {
    let host = &server.host;
    let catalog = host.catalog();
    let name = string_arg(args, "name")?;
    let skill = find_skill(&catalog, name)?;
    if !skill.model_invocable() && !user_invoked.contains(name) {
        return Err(results::error(format!(
            "skill `{name}` can only be invoked by the user (disable-model-invocation); ask the user to run it"
        )));
    }
    let arguments = args.get("arguments").and_then(Value::as_str).unwrap_or("");
    let body = invoke::substitute(&skill.body, arguments, &skill_dir_uri(name))
        .map_err(|e| results::error(format!("cannot load skill `{name}`: {e}")))?;
    let skill_tools = host.tools_of_blocking(&skill).await;
    let source_scripts = skill.source_scripts();
    let scripts: Vec<Value> = skill
        .manifest
        .iter()
        .flat_map(|m| &m.scripts)
        .map(|s| json!({"name": s.name(), "usage": s.usage}))
        .chain(
            source_scripts
                .iter()
                .map(|path| json!({"name": path, "usage": script_usage(path)})),
        )
        .collect();
    let tool_list: Vec<Value> = skill_tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description}))
        .collect();

    let instructions = body.trim();
    let mut text = format!("# Skill: {name}\n\n{instructions}\n");
    if !tool_list.is_empty() {
        text.push_str("\n## Tools of this skill\n");
        for t in skill_tools.iter() {
            text.push_str(&format!("- `{}`: {}\n", t.name, t.description));
        }
    }
    if !scripts.is_empty() {
        text.push_str("\n## Scripts (call run_script with skill and script)\n");
        for s in skill.manifest.iter().flat_map(|m| &m.scripts) {
            text.push_str(&format!("- `{}`: {}\n", s.name(), s.usage));
        }
        for path in &source_scripts {
            text.push_str(&format!("- `{path}`: {}\n", script_usage(path)));
        }
    }
    if !skill.references.is_empty() {
        text.push_str(&format!("\n## References (read_skill_file with skill \"{name}\", or resources skill://{name}/…)\n"));
        for r in &skill.references {
            text.push_str(&format!("- {r}\n"));
        }
    }
    let mut notes = grant_and_limit_notes(&skill, &host.options.policy);
    let reading = skill.clone();
    let named = read_off_runtime(move || reading.programs_named())
        .await
        .unwrap_or_default();
    notes.extend(program_notes(&skill, &host.options.policy, &named));
    if has_python_blocks(instructions) {
        notes.push(format!(
            "The Python code in these steps runs with run_code {{\"skill\": \"{name}\", \"code\": \
             …}}: in the sandbox, as this skill's code, so its own modules import as the steps \
             show."
        ));
    }
    if !notes.is_empty() {
        text.push_str("\n## Host notes\n");
        for note in &notes {
            text.push_str(&format!("- {note}\n"));
        }
    }
    // Clients that prefer structured content hand the model only this, so
    // it carries everything the text does, the instructions first.
    let result = results::text_and_structure(
        text,
        json!({
            "skill": name,
            "instructions": instructions,
            "tools": tool_list,
            "scripts": scripts,
            "references": skill.references,
            "notes": notes,
            "provenance": skill.provenance,
        }),
    );
    Ok((skill, result))
}

/// Whether a skill's steps show Python code blocks for the model to run.
fn has_python_blocks(body: &str) -> bool {
    body.lines().any(|line| {
        let fence = line.trim_start();
        fence
            .strip_prefix("```")
            .or_else(|| fence.strip_prefix("~~~"))
            .is_some_and(|info| {
                let language = info.split_whitespace().next().unwrap_or_default();
                matches!(language, "python" | "python3" | "py")
            })
    })
}

/// How the model runs a script the skill ships.
fn script_usage(path: &str) -> String {
    if crate::skill::programs::is_shell_script(path) {
        return format!(
            "a shell script: run_script with script \"{path}\" and args. It runs with the \
             host's shell only when the user granted the skill one (see the notes), in the OS \
             sandbox: the workspace at /workspace when granted, a private /tmp, no network"
        );
    }
    format!(
        "Python, run in the sandbox: run_script with script \"{path}\" and args, or command \
         \"python3 {path} ARGS\" (no shell; subprocess runs Python and the programs the user \
         granted the skill; HTTP with urllib, requests or httpx to the hosts the user granted it, no \
         other network; the workspace at /workspace when granted)"
    )
}

/// The programs the skill's scripts start that are granted, and those
/// they start that neither the manifest asks for (its notes come with the
/// grants') nor the user granted.
fn program_notes(
    skill: &Skill,
    user: &policy::UserPolicy,
    named: &BTreeSet<String>,
) -> Vec<String> {
    let name = skill.name();
    let granted = policy::grants(skill, user, None)
        .grants
        .programs
        .unwrap_or_default();
    let mut notes = Vec::new();
    if !granted.is_empty() {
        let list: Vec<String> = granted.iter().map(|p| format!("`{}`", p.name)).collect();
        notes.push(format!(
            "its scripts may start {} (granted by the user): subprocess runs each in an OS \
             sandbox with the call's workspace and limits",
            list.join(", ")
        ));
    }
    let asked = policy::requested(skill).programs;
    for program in named {
        if asked.contains(program) || granted.iter().any(|p| &p.name == program) {
            continue;
        }
        let shell = if crate::skill::programs::SHELLS.contains(&program.as_str()) {
            "; its shell scripts need it, and a granted shell runs in the OS sandbox with every \
             program of the system's folders (grep, sed, jq) at its reach there"
        } else {
            ""
        };
        notes.push(format!(
            "its scripts start `{program}`, a program of the host's, which runs only when the \
             user grants it: `skillbox grant {name} --program {program}` (or --allow-program \
             {name}:{program}){shell}"
        ));
    }
    notes
}

/// What the user did not grant of the skill's requests, and which of its
/// limit requests were clamped to the user's ceilings.
fn grant_and_limit_notes(skill: &Skill, user: &policy::UserPolicy) -> Vec<String> {
    let mut notes = policy::grants(skill, user, None).notes;
    let given = user.grant_for(skill);
    if let Some(given) = &given {
        notes.push(format!(
            "the user gives this skill, beyond what it asks: {}",
            given.phrases().join("; ")
        ));
    }
    if let Some(p) = &skill.provenance {
        notes.push(format!(
            "installed from {} ({}), {}",
            p.reference,
            p.resolved,
            match &p.signer {
                Some(signer) => format!("signed by {signer}"),
                None => "unsigned".into(),
            }
        ));
    }
    if let Some(m) = &skill.manifest {
        let mut limits = crate::sandbox::Limits::default();
        let asked = given
            .as_ref()
            .map_or_else(|| m.limits.clone(), |g| m.limits.without(&g.limits));
        notes.extend(
            policy::apply_requests(&mut limits, &asked, &user.ceilings)
                .into_iter()
                .map(|c| format!("this skill {c}")),
        );
    }
    notes
}

/// How long a host-side read of a skill file may take before the request
/// is answered with an error (the read itself runs on a blocking thread).
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs a host-side file read on a blocking thread, under a deadline: a
/// slow file system never stalls other sessions.
pub(crate) async fn read_off_runtime<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    match tokio::time::timeout(READ_DEADLINE, tokio::task::spawn_blocking(read)).await {
        Ok(Ok(value)) => Some(value),
        _ => None,
    }
}

/// `read_skill_file`: a bounded line range of a file inside a skill.
pub(crate) async fn read_skill_file(
    catalog: Arc<Catalog>,
    args: Map<String, Value>,
    budget: usize,
) -> CallToolResult {
    let read = move || -> Result<CallToolResult, CallToolResult> {
        let skill = find_skill(&catalog, string_arg(&args, "skill")?)?;
        let path = string_arg(&args, "path")?;
        let start = args
            .get("start_line")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let max = (args
            .get("max_lines")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_LINES as u64) as usize)
            .clamp(1, MAX_LINES);
        let bytes = skill.read_served(path, MAX_SKILL_FILE).map_err(|e| {
            let hint = match e {
                ReadError::NotFound => format!(
                    " Files of this skill: {}",
                    std::iter::once("SKILL.md".to_string())
                        .chain(skill.references.iter().cloned())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => String::new(),
            };
            results::error(format!(
                "cannot read `{path}` in skill `{}`: {e}.{hint}",
                skill.name()
            ))
        })?;
        let text = String::from_utf8(bytes).map_err(|_| {
            results::error(format!(
                "`{path}` is not a text file; only text files can be read this way"
            ))
        })?;
        Ok(line_window(&text, path, start, max, budget))
    };
    match read_off_runtime(read).await {
        Some(result) => result.unwrap_or_else(|e| e),
        None => results::error(format!(
            "reading the file took longer than {} s and was abandoned; the file system may be slow. Try again later.",
            READ_DEADLINE.as_secs()
        )),
    }
}

/// Lines `start..start+max` of `text`, numbered, with a note on the rest.
fn line_window(text: &str, path: &str, start: usize, max: usize, budget: usize) -> CallToolResult {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if start > total.max(1) {
        return results::error(format!(
            "`{path}` has {total} lines; start_line must be 1 to {total}"
        ));
    }
    let mut out = String::new();
    let mut lines_shown = String::new();
    let mut last = start.saturating_sub(1);
    for (i, line) in lines.iter().enumerate().skip(start - 1).take(max) {
        let numbered = format!("{:>5}  {line}\n", i + 1);
        if out.len() + numbered.len() > budget && !out.is_empty() {
            break;
        }
        out.push_str(&numbered);
        lines_shown.push_str(line);
        lines_shown.push('\n');
        last = i + 1;
    }
    let more = (last < total).then(|| {
        format!(
            "lines {start}-{last} of {total}; call read_skill_file again with start_line={} for more",
            last + 1
        )
    });
    if let Some(more) = &more {
        out.push_str(&format!("\n[{more}]\n"));
    }
    results::text_and_structure(
        out,
        json!({
            "path": path,
            "start_line": start,
            "end_line": last,
            "total_lines": total,
            "text": lines_shown,
            "more": more,
        }),
    )
}

/// The script run `run_script`'s arguments ask for, or the error result
/// that says what is wrong with them.
pub(crate) fn script_target(args: &Map<String, Value>) -> Result<Target, CallToolResult> {
    let skill = string_arg(args, "skill")?.to_string();
    let argv_tail = argv_tail(args)?;
    let (script, argv_tail) = match (args.get("script"), args.get("command")) {
        (Some(_), Some(_)) => {
            return Err(results::error(
                "invalid arguments: give `script` (with `args`) or `command`, not both. Nothing \
                 was run.",
            ));
        }
        (None, Some(Value::String(line))) => {
            if !argv_tail.is_empty() {
                return Err(results::error(
                    "invalid arguments: `command` carries its own arguments; leave `args` out. \
                     Nothing was run.",
                ));
            }
            let parsed = crate::runtime::command::parse(line)
                .map_err(|e| results::error(format!("invalid arguments: {e} Nothing was run.")))?;
            (parsed.script, parsed.args)
        }
        (None, Some(_)) => {
            return Err(results::error(
                "invalid arguments: `command` must be a string. Nothing was run.",
            ));
        }
        _ => (string_arg(args, "script")?.to_string(), argv_tail),
    };
    Ok(Target::Script {
        skill,
        script,
        args: argv_tail,
        stdin: stdin_of(args),
    })
}

/// `run_code`'s arguments as a call target. A language other than Python
/// is refused here, with what to do instead.
pub(crate) fn code_target(args: &Map<String, Value>) -> Result<Target, CallToolResult> {
    let code = string_arg(args, "code")?.to_string();
    let skill = match args.get("skill") {
        None | Some(Value::Null) => None,
        Some(_) => Some(string_arg(args, "skill")?.to_string()),
    };
    if let Some(language) = args.get("language").filter(|v| !v.is_null()) {
        let language = language.as_str().ok_or_else(|| {
            results::error("invalid arguments: `language` must be a string. Nothing was run.")
        })?;
        if let crate::runtime::ScriptKind::Unsupported(kind) = crate::runtime::code_kind(language) {
            return Err(results::error(format!(
                "{} Nothing was run.",
                kind.code_reason(language)
            )));
        }
    }
    Ok(Target::Code {
        skill,
        code,
        args: argv_tail(args)?,
        stdin: stdin_of(args),
    })
}

/// A run's `args`: an array of strings, or none.
fn argv_tail(args: &Map<String, Value>) -> Result<Vec<String>, CallToolResult> {
    let invalid_args = || {
        results::error("invalid arguments: `args` must be an array of strings. Nothing was run.")
    };
    match args.get("args") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(invalid_args),
        Some(_) => Err(invalid_args()),
    }
}

/// A run's `stdin` text as bytes (empty when absent).
fn stdin_of(args: &Map<String, Value>) -> Vec<u8> {
    args.get("stdin")
        .and_then(Value::as_str)
        .unwrap_or("")
        .as_bytes()
        .to_vec()
}

/// A finished script run as the model reads it: exit code, then stdout and
/// stderr cut to the output budget.
pub(crate) fn script_result(
    server: &Shared,
    outcome: &CallOutcome,
    notes: &[String],
) -> CallToolResult {
    let budget = server.options.output_budget;
    let (stdout, _) = results::cut_head_tail(
        &outcome.stdout,
        budget * 3 / 4,
        Some("narrower script arguments"),
    );
    let (stderr, _) = results::cut_head_tail(&outcome.stderr, budget / 4, None);
    let mut text = format!("exit code {}\n", outcome.exit_code);
    if !stdout.is_empty() {
        text.push_str(&format!("--- stdout ---\n{stdout}"));
    }
    if !stderr.is_empty() {
        text.push_str(&format!("\n--- stderr ---\n{stderr}"));
    }
    for note in notes {
        text.push_str(&format!("\nnote: {note}"));
    }
    results::text_and_structure(
        text,
        json!({
            "exit_code": outcome.exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "notes": notes,
        }),
    )
}

/// Appends grant notes to an error, so a model learns that a missing grant,
/// not its request, may be the cause.
pub(crate) fn with_notes(message: String, notes: &[String]) -> String {
    if notes.is_empty() {
        message
    } else {
        format!("{message}\nnote: {}", notes.join("\nnote: "))
    }
}
