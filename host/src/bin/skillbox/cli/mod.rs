//! The `skillbox` command line.
//!
//! Exit codes: 0 success, 1 the tool, call or check failed, 2 usage error.
//! A script run exits with the script's own code.

mod agent;
mod author;
mod compile;
mod distribute;
mod flags;
mod grant;
mod memory;
mod prepare;
mod progress;
mod serve;
mod skills;
mod telemetry;
mod tool;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

use skillbox_sandbox::SandboxError;

#[derive(Parser, Debug)]
#[command(
    name = "skillbox",
    version,
    about = "Run Agent Skills and WebAssembly component tools in a capability-scoped sandbox",
    after_help = "Every call runs in a fresh sandbox: a private /tmp, and only what you grant: \
                  the workspace (--workspace, --allow-write), environment keys (--allow-env) \
                  and HTTP hosts (--allow-net), each per skill."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Call one tool: a skill's `SKILL__FUNCTION`, or a function of a bare
    /// component with --component.
    ///
    /// Prints the result as JSON on stdout and exits 0. A tool error is
    /// printed on stderr with exit code 1.
    Call(tool::CallArgs),
    /// Print the tools a component exports, with their JSON input schemas.
    Inspect {
        /// The component file (.wasm).
        component: std::path::PathBuf,
    },
    /// Run a command component (wasi:cli/run) with arguments and stdin.
    ///
    /// Its stdout and stderr are printed as captured; skillbox exits with
    /// the script's own exit code (WASI 0.2 reports failures as 1).
    RunScript(tool::RunScriptArgs),
    /// Run Python code in the sandbox, as `python -c` would: as a skill's
    /// code with --skill (its folder, packages and limits, not its
    /// secrets), else with the workspace alone.
    ///
    /// Writes to the workspace are staged and committed like a script's
    /// (--dry-run and --patch keep them); skillbox exits with the code's
    /// own exit code.
    RunCode(tool::RunCodeArgs),
    /// Serve the skills and their sandboxed tools over MCP (stdio, or
    /// Streamable HTTP with --http).
    Serve(Box<serve::ServeArgs>),
    /// Give a skill what its skillbox.yaml does not ask for (the
    /// workspace, hosts, environment keys, limits), kept in your
    /// configuration so an installed skill's lock keeps holding; --list
    /// shows every grant, --revoke takes one back.
    Grant(grant::GrantArgs),
    /// Run a task with a model, skills and sandboxed tools, in a bounded,
    /// traced loop.
    Agent(Box<agent::AgentArgs>),
    /// List, check and measure skills.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// See and prune the agent's long-term memory (`agent --memory SCOPE`).
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Start something new: `skillbox new skill NAME --tool rust`.
    #[command(subcommand)]
    New(author::NewCommand),
    /// Build a skill's Rust tool to wasm32-wasip2 and place the component
    /// where its skillbox.yaml says.
    Build(author::BuildArgs),
    /// Install a skill's pinned pure-Python requirements for its scripts,
    /// once, from wheels checked against their hashes; no run downloads.
    Prepare(prepare::PrepareArgs),
    /// Compile every skill's components into the compiled-code cache ahead
    /// of time (for images and CI), so no first call waits for a compile.
    Compile(compile::CompileArgs),
    /// Push a skill to an OCI registry as an artifact, signed with --key.
    ///
    /// Prints the manifest digest on stdout.
    Publish(distribute::PublishArgs),
    /// Make a minisign signing key pair for publish --key.
    #[command(subcommand)]
    Key(distribute::KeyCommand),
    /// Install a skill from an OCI registry or a git repository: verified,
    /// checked, shown, and pinned in skillbox.lock.
    Add(distribute::AddArgs),
    /// Check every installed skill against skillbox.lock, offline, and
    /// restore what drifted (--check only reports).
    Sync(distribute::SyncArgs),
    /// Move installed skills to what their tag or branch names now,
    /// showing what each would newly be allowed to do.
    Update(distribute::UpdateArgs),
    /// Uninstall a skill and drop its lock entry.
    Remove(distribute::RemoveArgs),
    /// Measure the fixed cost of a sandboxed call and of compiling.
    Bench(crate::bench::BenchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell), generated from these very flags.
    ///
    /// For bash: `skillbox completions bash > ~/.local/share/bash-completion/completions/skillbox`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), generated from these very flags:
    /// `skillbox man | man -l -`.
    Man,
}

/// An error at the command line's edge, mapped to an exit code.
#[derive(Debug)]
enum CliError {
    /// Exit 2: the command line itself is wrong.
    Usage(String),
    /// Exit 1: the call ran (or tried to) and failed.
    Sandbox(SandboxError),
    Other(anyhow::Error),
}

impl From<SandboxError> for CliError {
    fn from(e: SandboxError) -> Self {
        CliError::Sandbox(e)
    }
}

/// A host that cannot be built because of what the user passed is a usage
/// error; an engine that cannot start is not.
impl From<skillbox::BuildError> for CliError {
    fn from(e: skillbox::BuildError) -> Self {
        match e {
            skillbox::BuildError::Engine(e) => e.into(),
            e => CliError::Usage(e.to_string()),
        }
    }
}

impl From<skillbox::EngineError> for CliError {
    fn from(e: skillbox::EngineError) -> Self {
        CliError::Other(e.into())
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Other(e)
    }
}

pub(crate) fn main() -> ExitCode {
    telemetry::init();
    progress::init();
    let cli = Cli::parse();
    let serving = matches!(cli.command, Command::Serve(_));
    if !serving && !matches!(cli.command, Command::Agent(_)) {
        exit_quietly_on_a_closed_pipe();
    }
    let code = run_reporting(cli);
    // A server stops when asked; a command stays for the optimizing
    // compile its quick first run started, so the next run starts fast.
    if !serving {
        skillbox_sandbox::finish_optimizing(progress::finishing);
    }
    telemetry::shutdown();
    code
}

/// A command whose output goes into a pipe the reader closed (`skillbox
/// skills list --json | head`) ends as command-line tools do, quietly,
/// instead of failing on the next write. Servers and the agent keep
/// Rust's default (a closed pipe or socket is an error they handle).
fn exit_quietly_on_a_closed_pipe() {
    #[allow(unsafe_code)]
    // SAFETY: `signal` changes a process-wide disposition and touches no
    // memory of this program; SIG_DFL needs no handler to stay valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn run_reporting(cli: Cli) -> ExitCode {
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

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Call(args) => tool::call(args),
        Command::Inspect { component } => tool::inspect(&component),
        Command::RunScript(args) => tool::run_script(args),
        Command::RunCode(args) => tool::run_code(args),
        Command::Prepare(args) => prepare::run(args),
        Command::Grant(args) => grant::run(args),
        Command::Serve(args) => serve::serve(*args),
        Command::Agent(args) => agent::agent(*args),
        Command::Skills(command) => skills::run(command),
        Command::Memory(command) => memory::run(command),
        Command::Compile(args) => compile::run(args),
        Command::New(command) => author::new(command),
        Command::Build(args) => author::build_skill(args),
        Command::Publish(args) => distribute::publish(args),
        Command::Key(command) => distribute::key(command),
        Command::Add(args) => distribute::add(args),
        Command::Sync(args) => distribute::sync(args),
        Command::Update(args) => distribute::update(args),
        Command::Remove(args) => distribute::remove(args),
        Command::Bench(args) => crate::bench::run(args).map_err(CliError::Other),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "skillbox", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            let command = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(command)
                .render(&mut std::io::stdout())
                .map_err(|e| CliError::Other(e.into()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(e.into()))
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}
