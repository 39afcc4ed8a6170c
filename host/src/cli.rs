//! The `skillbox` command line.
//!
//! Exit codes: 0 success, 1 the tool or call failed, 2 usage error. A
//! script run exits with the script's own code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};

use crate::sandbox::{
    Grants, Limits, MAX_MEMORY_BYTES, MIB, Sandbox, SandboxError, SideEffect, WorkspaceGrant,
};

#[derive(Parser, Debug)]
#[command(
    name = "skillbox",
    version,
    about = "Run Agent Skills and WebAssembly component tools in a capability-scoped sandbox",
    after_help = "Every call runs in a fresh sandbox: no network, no environment, a private /tmp, \
                  and the workspace only when you grant it with --workspace."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Call one exported function of a component with JSON arguments.
    ///
    /// Prints the result as JSON on stdout and exits 0. A tool error is
    /// printed on stderr with exit code 1.
    Call(CallArgs),
    /// Print the tools a component exports, with their JSON input schemas.
    Inspect {
        /// The component file (.wasm).
        component: PathBuf,
    },
    /// Run a command component (wasi:cli/run) with arguments and stdin.
    ///
    /// Its stdout and stderr are printed as captured; skillbox exits with
    /// the script's own exit code.
    RunScript(RunScriptArgs),
    /// Measure the fixed cost of a sandboxed call and of compiling.
    Bench(crate::bench::BenchArgs),
}

#[derive(Args, Debug)]
struct CallArgs {
    /// The component file (.wasm) that exports FUNCTION.
    #[arg(long, value_name = "PATH.wasm")]
    component: PathBuf,
    /// The function to call, as listed by `skillbox inspect`.
    function: String,
    /// The arguments as a JSON object, one key per parameter.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    #[command(flatten)]
    sandbox: SandboxFlags,
}

#[derive(Args, Debug)]
struct RunScriptArgs {
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

/// Grants and limits shared by every command that runs guest code.
#[derive(Args, Debug)]
struct SandboxFlags {
    /// Mount this folder at /workspace (read-only unless --allow-write).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Let the guest write to the workspace.
    #[arg(long, requires = "workspace")]
    allow_write: bool,
    /// Wall-clock limit in milliseconds (default: 10000 read, 30000 write, 60000 script).
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// CPU budget in fuel units, about one per instruction (default: 10^10).
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Memory cap in MiB (default: 64, at most 4096).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(MAX_MEMORY_BYTES / MIB) as u64))]
    memory_mib: Option<u64>,
    /// Cap on captured stdout, stderr and the result, each, in bytes (default: 1 MiB).
    #[arg(long, value_name = "N")]
    max_output_bytes: Option<usize>,
}

impl SandboxFlags {
    fn grants(&self) -> Result<Grants, CliError> {
        let workspace = match &self.workspace {
            None => None,
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(CliError::Usage(format!(
                        "--workspace {}: not a folder; pass an existing directory",
                        dir.display()
                    )));
                }
                Some(WorkspaceGrant {
                    host_dir: dir.clone(),
                    writable: self.allow_write,
                })
            }
        };
        Ok(Grants {
            workspace,
            ..Grants::default()
        })
    }

    fn limits(&self, class: SideEffect) -> Limits {
        let mut limits = Limits::for_class(class);
        if let Some(ms) = self.timeout_ms {
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(fuel) = self.fuel {
            limits.fuel = fuel;
        }
        if let Some(mib) = self.memory_mib {
            limits.memory_bytes = mib as usize * MIB;
        }
        if let Some(bytes) = self.max_output_bytes {
            limits.output_bytes = bytes;
            limits.result_bytes = bytes;
        }
        limits
    }
}

/// An error at the command line's edge, mapped to an exit code.
#[derive(Debug)]
enum CliError {
    Usage(String),
    Sandbox(SandboxError),
    Other(anyhow::Error),
}

impl From<SandboxError> for CliError {
    fn from(e: SandboxError) -> Self {
        CliError::Sandbox(e)
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Other(e)
    }
}

pub fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(CliError::Usage(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(CliError::Sandbox(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
        Err(CliError::Other(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKILLBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Call(args) => call(args),
        Command::Inspect { component } => inspect(&component),
        Command::RunScript(args) => run_script(args),
        Command::Bench(args) => crate::bench::run(args).map_err(CliError::Other),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(e.into()))
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

fn call(args: CallArgs) -> Result<ExitCode, CliError> {
    require_file(&args.component)?;
    let json_args: Value = serde_json::from_str(&args.args).map_err(|e| {
        CliError::Usage(format!(
            "--args is not valid JSON ({e}); pass an object such as '{{\"path\": \"app.log\"}}'"
        ))
    })?;
    let grants = args.sandbox.grants()?;
    let class = if args.sandbox.allow_write {
        SideEffect::Write
    } else {
        SideEffect::Read
    };
    let limits = args.sandbox.limits(class);
    let sandbox = Sandbox::new()?;
    let component = sandbox.load_file(&args.component)?;
    let outcome = runtime()?.block_on(sandbox.call(
        &component,
        &args.function,
        &json_args,
        &grants,
        &limits,
    ))?;
    print_json(&outcome.value);
    Ok(ExitCode::SUCCESS)
}

fn inspect(path: &Path) -> Result<ExitCode, CliError> {
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
                "outputSchema": f.result.as_ref().map(output_schema),
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

/// The schema of what a successful call returns: a top-level result's ok
/// type, or the type itself.
fn output_schema(ty: &crate::schema::WitType) -> Value {
    match ty {
        crate::schema::WitType::Result { ok, .. } => ok
            .as_deref()
            .map_or(json!({ "type": "null" }), crate::schema::schema_for),
        other => crate::schema::schema_for(other),
    }
}

fn run_script(args: RunScriptArgs) -> Result<ExitCode, CliError> {
    require_file(&args.component)?;
    let stdin = match &args.stdin {
        None => Vec::new(),
        Some(path) => std::fs::read(path).map_err(|e| {
            CliError::Usage(format!("--stdin {}: cannot read it ({e})", path.display()))
        })?,
    };
    let grants = args.sandbox.grants()?;
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

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}
