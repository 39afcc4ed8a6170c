//! `call`, `inspect`, `run-script` and `run-code`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::flags::{SandboxFlags, SourceFlags, announce_recovery, print_workspace};
use super::{CliError, print_json, runtime};
use skillbox::{BuildError, CallError, CancellationToken, Skillbox};
use skillbox_sandbox::Sandbox;
use skillbox_skill::runtime::{ScriptKind, code_kind};
use skillbox_skill::skill::tools::split_tool_name;

#[derive(Args, Debug)]
pub(super) struct CallArgs {
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
pub(super) struct RunScriptArgs {
    /// The command component file (.wasm).
    #[arg(
        long,
        value_name = "PATH.wasm",
        required_unless_present = "script",
        conflicts_with = "script"
    )]
    component: Option<PathBuf>,
    /// A skill's script instead, as SKILL/SCRIPT (see load_skill or `skills list`).
    #[arg(long, value_name = "SKILL/SCRIPT")]
    script: Option<String>,
    #[command(flatten)]
    sources: SourceFlags,
    /// Read the script's stdin from this file, or `-` for this command's
    /// own stdin (default: this command's stdin when it is piped, else
    /// empty).
    #[arg(long, value_name = "FILE")]
    stdin: Option<PathBuf>,
    #[command(flatten)]
    sandbox: SandboxFlags,
    /// Arguments passed to the script, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
}

#[derive(Args, Debug)]
#[command(mut_arg("only", |arg| arg.help(
    "Run the code as this skill's: its folder at /skill (its modules import), its prepared \
     packages and limits; not its environment variables. Loads only this skill."
)))]
pub(super) struct RunCodeArgs {
    /// The Python code to run (or give it with --file).
    #[arg(
        value_name = "CODE",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    code: Option<String>,
    /// Read the code from this file, or `-` for this command's stdin.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// The code's language: python (the only one for now).
    #[arg(long, default_value = "python")]
    language: String,
    #[command(flatten)]
    sources: SourceFlags,
    /// Read the code's stdin from this file, or `-` for this command's own
    /// stdin (default: this command's stdin when it is piped and the code
    /// does not come from it, else empty).
    #[arg(long, value_name = "FILE")]
    stdin: Option<PathBuf>,
    #[command(flatten)]
    sandbox: SandboxFlags,
    /// Arguments the code sees as sys.argv[1:], after `--`.
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

pub(super) fn call(args: CallArgs) -> Result<ExitCode, CliError> {
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
    let skillbox = one_call_host(args.sandbox.bare_builder()?)?;
    let output = runtime()?.block_on(skillbox.call_component(
        path,
        &args.tool,
        json_args.clone(),
        &CancellationToken::new(),
    ));
    print_tool_output(finish(output)?);
    Ok(ExitCode::SUCCESS)
}

/// A tool's value on stdout; its notes and workspace changes on stderr.
fn print_tool_output(output: skillbox::ToolOutput) {
    print_notes(&output.notes);
    print_workspace(output.workspace.as_ref());
    print_json(&output.value);
}

fn call_skill_tool(args: &CallArgs, json_args: &Value) -> Result<ExitCode, CliError> {
    if split_tool_name(&args.tool).is_none() {
        return Err(CliError::Usage(format!(
            "`{}` is not a skill tool name; use SKILL__FUNCTION (see `skillbox skills list`), or pass --component PATH.wasm",
            args.tool
        )));
    }
    let skillbox = one_call_host(args.sandbox.builder(&args.sources)?)?;
    let output = runtime()?.block_on(skillbox.call_tool(&args.tool, json_args.clone()));
    print_tool_output(finish(output)?);
    Ok(ExitCode::SUCCESS)
}

/// A host for one call from the command line: the user's sources, grants
/// and limits, and the audit log in the user's state folder (left out,
/// with a warning, when it cannot be opened).
fn one_call_host(builder: skillbox::Builder) -> Result<Skillbox, CliError> {
    let builder = builder.max_concurrency(1, None);
    let skillbox = match builder.clone().default_audit_log().build() {
        Err(e @ BuildError::AuditLog { .. }) => {
            eprintln!("warning: {e}; this call is not audited");
            builder.build()?
        }
        built => built?,
    };
    announce_recovery(&skillbox);
    Ok(skillbox)
}

/// Prints the notes a call carries, and maps its error onto an exit code:
/// a name that does not exist is a usage error, a failed call is not.
/// When the skill is not found and a SKILL.md sits in (or below) the
/// current folder, the error says how to load it.
fn finish<T>(result: Result<T, CallError>) -> Result<T, CliError> {
    let notes = match &result {
        Ok(_) => &[][..],
        Err(e) => e.notes(),
    };
    for note in notes {
        eprintln!("note: {note}");
    }
    result.map_err(|e| match e {
        CallError::Sandbox { error, .. } => CliError::Sandbox(error),
        e @ (CallError::UnknownTool { .. } | CallError::NoSuchSkill { .. }) => {
            CliError::Usage(format!("{e}{}", skills_here_hint()))
        }
        e @ CallError::NoSuchScript { .. } => CliError::Usage(e.to_string()),
        e => CliError::Other(anyhow::anyhow!("{e}")),
    })
}

/// A hint to pass `--skills` when the current folder holds skills that
/// were not loaded: a skill folder itself, or a folder of skills.
fn skills_here_hint() -> String {
    let here = Path::new(".");
    if here.join("SKILL.md").is_file() {
        return "\nhint: this folder is a skill; load it with --skills . (or its parent folder)"
            .into();
    }
    let has_skills = std::fs::read_dir(here)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("SKILL.md").is_file());
    if has_skills {
        "\nhint: this folder holds skills; load them with --skills .".into()
    } else {
        String::new()
    }
}

fn print_notes(notes: &[String]) {
    for note in notes {
        eprintln!("note: {note}");
    }
}

pub(super) fn inspect(path: &Path) -> Result<ExitCode, CliError> {
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
                "outputSchema": f.result.as_ref().map(skillbox_sandbox::schema::output_schema),
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

/// This command's own stdin, whole (for a script's stdin).
fn read_own_stdin() -> Result<Vec<u8>, CliError> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
        .map_err(|e| CliError::Usage(format!("--stdin -: cannot read stdin ({e})")))?;
    Ok(bytes)
}

/// A run's stdin: `--stdin FILE`, `--stdin -`, or this command's stdin
/// when it is piped and nothing else reads it.
fn run_stdin(flag: Option<&Path>, own_stdin_taken: bool) -> Result<Vec<u8>, CliError> {
    Ok(match flag {
        Some(path) if path.as_os_str() != "-" => std::fs::read(path).map_err(|e| {
            CliError::Usage(format!("--stdin {}: cannot read it ({e})", path.display()))
        })?,
        Some(_) if own_stdin_taken => {
            return Err(CliError::Usage(
                "--stdin - and --file - both read this command's stdin; give one of them a file"
                    .into(),
            ));
        }
        // `-`, or input piped in without the flag: what this command reads.
        Some(_) => read_own_stdin()?,
        None if !own_stdin_taken && !std::io::stdin().is_terminal() => read_own_stdin()?,
        None => Vec::new(),
    })
}

pub(super) fn run_code(args: RunCodeArgs) -> Result<ExitCode, CliError> {
    if let ScriptKind::Unsupported(kind) = code_kind(&args.language) {
        return Err(CliError::Usage(kind.code_reason(&args.language)));
    }
    let code_from_stdin = args.file.as_deref().is_some_and(|f| f.as_os_str() == "-");
    let code = match (&args.code, &args.file) {
        (Some(code), _) => code.clone(),
        (None, Some(_)) if code_from_stdin => String::from_utf8(read_own_stdin()?)
            .map_err(|_| CliError::Usage("--file -: the code on stdin is not UTF-8 text".into()))?,
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
            CliError::Usage(format!(
                "--file {}: cannot read it as text ({e})",
                path.display()
            ))
        })?,
        (None, None) => return Err(CliError::Usage("give the code, or --file FILE".into())),
    };
    let skill = match args.sources.only.as_slice() {
        [] => None,
        [skill] => Some(skill.clone()),
        _ => {
            return Err(CliError::Usage(
                "run-code runs as one skill's code: give --skill once".into(),
            ));
        }
    };
    let stdin = run_stdin(args.stdin.as_deref(), code_from_stdin)?;
    let cancel = CancellationToken::new();
    let skillbox = one_call_host(args.sandbox.builder(&args.sources)?)?;
    let output = runtime()?.block_on(skillbox.run_code(
        skill.as_deref(),
        &code,
        args.args.clone(),
        stdin,
        &cancel,
    ));
    print_script_output(finish(output)?)
}

pub(super) fn run_script(args: RunScriptArgs) -> Result<ExitCode, CliError> {
    let stdin = run_stdin(args.stdin.as_deref(), false)?;
    let cancel = CancellationToken::new();
    let output = match (&args.component, &args.script) {
        (_, Some(spec)) => {
            let (skill, script) = spec.split_once('/').ok_or_else(|| {
                CliError::Usage(format!(
                    "--script {spec}: use SKILL/SCRIPT, e.g. release-check/release-check"
                ))
            })?;
            let skillbox = one_call_host(args.sandbox.builder(&args.sources)?)?;
            runtime()?.block_on(skillbox.run_script(
                skill,
                script,
                args.args.clone(),
                stdin,
                &cancel,
            ))
        }
        (Some(component), None) => {
            require_file(component)?;
            let skillbox = one_call_host(args.sandbox.bare_builder()?)?;
            runtime()?.block_on(skillbox.run_component(
                component,
                args.args.clone(),
                stdin,
                &cancel,
            ))
        }
        (None, None) => {
            return Err(CliError::Usage(
                "pass --component PATH.wasm or --script SKILL/SCRIPT".into(),
            ));
        }
    };
    print_script_output(finish(output)?)
}

/// A finished run as the command prints it: notes and workspace changes,
/// then its stdout and stderr as captured; its exit code is the command's.
fn print_script_output(output: skillbox::ScriptOutput) -> Result<ExitCode, CliError> {
    print_notes(&output.notes);
    print_workspace(output.workspace.as_ref());
    let (stdout, stderr, exit_code) = (output.stdout, output.stderr, output.exit_code);
    print!("{stdout}");
    eprint!("{stderr}");
    Ok(ExitCode::from(exit_byte(exit_code)))
}

/// Maps a guest exit code onto a process exit status (0–255), keeping
/// failure visible: a code that does not fit becomes 1, never 0.
fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}
