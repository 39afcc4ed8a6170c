//! `call`, `inspect` and `run-script`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::flags::{SandboxFlags, SourceFlags};
use super::{CliError, print_json, runtime};
use crate::sandbox::{Sandbox, SideEffect};
use crate::skill::tools::{self, split_tool_name};
use crate::skill::{Catalog, policy};

#[derive(Args, Debug)]
pub struct CallArgs {
    /// Call a function of this bare component file (.wasm) instead of a
    /// skill's tool.
    #[arg(long, value_name = "PATH.wasm")]
    component: Option<PathBuf>,
    /// The tool: `SKILL__FUNCTION` (see `skillbox skills list`), or with
    /// --component the function name (see `skillbox inspect`).
    tool: String,
    /// The arguments as a JSON object, one key per parameter.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    #[command(flatten)]
    sandbox: SandboxFlags,
    #[command(flatten)]
    sources: SourceFlags,
}

#[derive(Args, Debug)]
pub struct RunScriptArgs {
    /// The command component file (.wasm).
    #[arg(long, value_name = "PATH.wasm")]
    component: PathBuf,
    /// Read the script's stdin from this file (default: empty stdin).
    #[arg(long, value_name = "FILE")]
    stdin: Option<PathBuf>,
    #[command(flatten)]
    sandbox: SandboxFlags,
    /// Arguments passed to the script, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
}

fn require_file(path: &Path) -> Result<(), CliError> {
    if path.is_file() {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "{}: no such component file; build it with `cargo build --target wasm32-wasip2`",
            path.display()
        )))
    }
}

pub fn call(args: CallArgs) -> Result<ExitCode, CliError> {
    let json_args: Value = serde_json::from_str(&args.args).map_err(|e| {
        CliError::Usage(format!(
            "--args is not valid JSON ({e}); pass an object such as '{{\"path\": \"app.log\"}}'"
        ))
    })?;
    match &args.component {
        Some(path) => call_component(path, &args, &json_args),
        None => call_skill_tool(&args, &json_args),
    }
}

fn call_component(path: &Path, args: &CallArgs, json_args: &Value) -> Result<ExitCode, CliError> {
    require_file(path)?;
    let grants = args.sandbox.bare_grants()?;
    let class = if args.sandbox.allow_write {
        SideEffect::Write
    } else {
        SideEffect::Read
    };
    let limits = args.sandbox.limits(class);
    let sandbox = Sandbox::new()?;
    let component = sandbox.load_file(path)?;
    let outcome =
        runtime()?.block_on(sandbox.call(&component, &args.tool, json_args, &grants, &limits))?;
    print_json(&outcome.value);
    Ok(ExitCode::SUCCESS)
}

fn call_skill_tool(args: &CallArgs, json_args: &Value) -> Result<ExitCode, CliError> {
    let Some((skill_name, _)) = split_tool_name(&args.tool) else {
        return Err(CliError::Usage(format!(
            "`{}` is not a skill tool name; use SKILL__FUNCTION (see `skillbox skills list`), or pass --component PATH.wasm",
            args.tool
        )));
    };
    let policy = args.sandbox.policy()?;
    let catalog = Catalog::build(&args.sources.options());
    let Some(skill) = catalog.get(skill_name) else {
        let names: Vec<&str> = catalog.skills().map(|s| s.name()).collect();
        return Err(CliError::Usage(format!(
            "no skill named `{skill_name}`; loaded skills: {}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let sandbox = Sandbox::new()?;
    let (skill_tools, diags) = tools::resolve(skill, &sandbox);
    for d in diags.iter().filter(|d| d.is_error()) {
        eprintln!("{d}");
    }
    let Some(tool) = skill_tools.iter().find(|t| t.name == args.tool) else {
        let names: Vec<&str> = skill_tools.iter().map(|t| t.name.as_str()).collect();
        return Err(CliError::Usage(format!(
            "skill `{skill_name}` has no tool `{}`; its tools: {}",
            args.tool,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let resolved = policy::grants(skill, &policy);
    for note in &resolved.notes {
        eprintln!("note: {note}");
    }
    let limits = policy::limits(skill, tool.effect.into(), &args.sandbox.overrides());
    let outcome = runtime()?.block_on(sandbox.call(
        &tool.component,
        &tool.function,
        json_args,
        &resolved.grants,
        &limits,
    ))?;
    print_json(&outcome.value);
    Ok(ExitCode::SUCCESS)
}

pub fn inspect(path: &Path) -> Result<ExitCode, CliError> {
    require_file(path)?;
    let sandbox = Sandbox::new()?;
    let component = sandbox.load_file(path)?;
    let tools: Vec<Value> = component
        .exports
        .functions
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "interface": f.interface,
                "function": f.function,
                "inputSchema": f.input_schema(),
                "outputSchema": f.result.as_ref().map(crate::schema::output_schema),
            })
        })
        .collect();
    let skipped: Vec<Value> = component
        .exports
        .skipped
        .iter()
        .map(|s| json!({ "name": s.name, "reason": s.reason }))
        .collect();
    for s in &component.exports.skipped {
        eprintln!(
            "warning: `{}` is not served as a tool: {}",
            s.name, s.reason
        );
    }
    print_json(&json!({
        "digest": component.digest,
        "command": component.exports.is_command,
        "tools": tools,
        "skipped": skipped,
    }));
    Ok(ExitCode::SUCCESS)
}

pub fn run_script(args: RunScriptArgs) -> Result<ExitCode, CliError> {
    require_file(&args.component)?;
    let stdin = match &args.stdin {
        None => Vec::new(),
        Some(path) => std::fs::read(path).map_err(|e| {
            CliError::Usage(format!("--stdin {}: cannot read it ({e})", path.display()))
        })?,
    };
    let grants = args.sandbox.bare_grants()?;
    let limits = args.sandbox.limits(SideEffect::Script);
    let program = args
        .component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "script".into());
    let mut argv = vec![program];
    argv.extend(args.args);
    let sandbox = Sandbox::new()?;
    let component = sandbox.load_file(&args.component)?;
    let outcome =
        runtime()?.block_on(sandbox.run_script(&component, argv, stdin, &grants, &limits))?;
    print!("{}", outcome.stdout);
    eprint!("{}", outcome.stderr);
    Ok(ExitCode::from(exit_byte(outcome.exit_code)))
}

/// Maps a guest exit code onto a process exit status (0–255), keeping
/// failure visible: a code that does not fit becomes 1, never 0.
fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}
