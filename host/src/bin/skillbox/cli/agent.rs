//! `skillbox agent TASK`: the agent loop for terminals and CI.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::flags::{AuditFlags, SandboxFlags, SourceFlags, one_of};
use super::{CliError, print_json, runtime};
use skillbox::ConfirmPolicy;
use skillbox::agent::memory::{MemoryStore, Scope};
use skillbox::agent::replay::{Recording, compare};
use skillbox::agent::{
    Agent, AgentError, Approver, DEFAULT_SUMMARY_TOKENS, McpConfig, Model, Provider, RetryPolicy,
    Run, Stop,
};

#[derive(Args, Debug)]
#[command(
    after_help = "Exit codes: 0 done, 2 usage, 3 step limit, 4 token budget, 5 model or provider error, 6 tool failures left it stuck, 7 a call needed the user's confirmation and no one could give it (no terminal; see --yes); with --replay, 8 a tool's result differs from the recording, 9 the recording cannot be followed."
)]
pub(super) struct AgentArgs {
    /// The task. Start it with `/skill:NAME args` to invoke a skill
    /// explicitly. With --replay, the recorded task is used.
    #[arg(required_unless_present_any = ["replay", "task_file"])]
    task: Option<String>,
    /// Read the task from this file (`-`: standard input) instead: a task
    /// too long for a command line, or one a CI job or a Kubernetes Job
    /// mounts from its work list.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["task", "replay"])]
    task_file: Option<PathBuf>,
    /// The model: openai:MODEL (OPENAI_BASE_URL, OPENAI_API_KEY) or anthropic:MODEL (ANTHROPIC_API_KEY).
    #[arg(
        long,
        value_name = "PROVIDER:MODEL",
        default_value = "openai:gpt-4o-mini"
    )]
    model: String,
    /// The provider's base URL, instead of OPENAI_BASE_URL / ANTHROPIC_BASE_URL.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    sandbox: SandboxFlags,
    /// Which tool calls need the user's confirmation: destructive tools,
    /// write and destructive tools and scripts, or none.
    #[arg(long, value_parser = one_of::<ConfirmPolicy>(ConfirmPolicy::NAMES), default_value = "destructive")]
    confirm: ConfirmPolicy,
    /// Approve every confirmation. Without it the agent asks on the
    /// terminal, and where there is none (CI) it refuses and stops (exit 7).
    #[arg(long)]
    yes: bool,
    /// Tokens the skill catalog in the system prompt may take; past it,
    /// the model searches with find_skills.
    #[arg(long, value_name = "TOKENS", default_value_t = skillbox::mcp::DEFAULT_CATALOG_BUDGET)]
    catalog_budget: usize,
    /// External MCP servers, in the common {"mcpServers": …} form.
    #[arg(long, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
    /// Model calls allowed before the loop stops (exit 3) [default: 20;
    /// with --replay, the recording's].
    #[arg(long, value_name = "N")]
    max_steps: Option<usize>,
    /// Provider-reported tokens (in + out) allowed; a warning at 80%, a stop at 100% (exit 4).
    #[arg(long, value_name = "N")]
    budget_tokens: Option<u64>,
    /// Context size in tokens. Past it, the turns before the recent ones
    /// are replaced by a summary the model writes (see --summary-tokens),
    /// and old tool results are trimmed if that is not enough [default:
    /// 32000; with --replay, the recording's].
    #[arg(long, value_name = "N")]
    context_tokens: Option<usize>,
    /// Tokens the summary of older turns may take; 0 trims old tool
    /// results instead of summarizing [default: 800; with --replay, the
    /// recording's].
    #[arg(long, value_name = "N")]
    summary_tokens: Option<u32>,
    /// Long-term memory: the model may save, search and forget facts in
    /// this scope (one per project), kept across runs. Off unless named
    /// here or in SKILLBOX_MEMORY. See `skillbox memory`.
    #[arg(long, value_name = "SCOPE")]
    memory: Option<String>,
    /// Run a recorded trace again with no model: its replies are fed
    /// back, the tools run for real under the grants given now, and each
    /// tool result that differs from the recording is reported (exit 8).
    #[arg(long, value_name = "TRACE.jsonl", conflicts_with_all = ["model", "base_url"])]
    replay: Option<PathBuf>,
    /// How long a read tool call may take, in ms.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    read_timeout_ms: u64,
    /// How long a write or destructive tool call may take, in ms.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    write_timeout_ms: u64,
    /// How long a script run may take, in ms.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    script_timeout_ms: u64,
    /// How long one model request may take, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    request_timeout_secs: u64,
    /// Write one JSON line per event (model calls, tool calls, trims, stop) to this file.
    #[arg(long, value_name = "FILE.jsonl")]
    trace: Option<PathBuf>,
    /// Print the final result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write every workspace change of the run to FILE as a git-format
    /// patch (`git apply FILE`). The run's calls are staged and see each
    /// other's changes; with --dry-run nothing reaches the workspace,
    /// without it they land together when the run ends.
    #[arg(long, value_name = "FILE", requires = "workspace")]
    patch: Option<PathBuf>,
    #[command(flatten)]
    audit: AuditFlags,
}

pub(super) fn agent(args: AgentArgs) -> Result<ExitCode, CliError> {
    let recording = args
        .replay
        .as_deref()
        .map(Recording::load)
        .transpose()
        .map_err(|e| CliError::Usage(format!("--replay: {e}")))?;
    if let Some(recording) = recording {
        return replay(&args, &recording);
    }
    let task = match &args.task_file {
        Some(path) => read_task_file(path)?,
        None => args.task.clone().unwrap_or_default(),
    };
    let provider = match Provider::from_spec(
        &args.model,
        args.base_url.as_deref(),
        Duration::from_secs(args.request_timeout_secs),
        RetryPolicy::default(),
    ) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(Stop::PROVIDER_EXIT_CODE));
        }
    };
    let run = run_agent(&args, provider, &task, Limits::of(&args, None), None)?;
    Ok(report(&args, run))
}

/// The loop's limits: the flags'; in a replay, the recording's where the
/// user gives none. A limit the user gives always wins, so an edited
/// trace cannot run longer than the user allows.
struct Limits {
    max_steps: usize,
    context_tokens: usize,
    summary_tokens: u32,
}

impl Limits {
    fn of(args: &AgentArgs, recording: Option<&Recording>) -> Self {
        Limits {
            max_steps: args
                .max_steps
                .or(recording.map(|r| r.max_steps.max(1)))
                .unwrap_or(DEFAULT_MAX_STEPS),
            context_tokens: args
                .context_tokens
                .or(recording.map(|r| r.context_tokens))
                .unwrap_or(DEFAULT_CONTEXT_TOKENS),
            summary_tokens: args
                .summary_tokens
                .or(recording.map(|r| r.summary_tokens))
                .unwrap_or(DEFAULT_SUMMARY_TOKENS),
        }
    }
}

const DEFAULT_MAX_STEPS: usize = 20;
const DEFAULT_CONTEXT_TOKENS: usize = 32_000;

/// The scope --memory or SKILLBOX_MEMORY names, with the user's store. A
/// replay never writes to memory: its saves and forgets are compared, not
/// run, and its searches read only the scope the user names (an empty
/// one when the user names none), never the one the trace names.
fn memory(args: &AgentArgs, replaying: Option<&Recording>) -> Result<Option<Memory>, CliError> {
    let configured = || {
        std::env::var("SKILLBOX_MEMORY")
            .ok()
            .filter(|s| !s.is_empty())
    };
    let scope =
        |name: &str| Scope::new(name).map_err(|e| CliError::Usage(format!("--memory: {e}")));
    let open = || {
        MemoryStore::open_default().map_err(|e| CliError::Other(anyhow::anyhow!("--memory: {e}")))
    };
    match (replaying, &args.memory) {
        (None, _) => match args.memory.clone().or_else(configured) {
            Some(name) => Ok(Some(Memory::Live(Arc::new(open()?), scope(&name)?))),
            None => Ok(None),
        },
        (Some(_), Some(name)) => Ok(Some(Memory::Replay(Arc::new(open()?), scope(name)?, None))),
        (Some(recording), None) => {
            let Some(recorded) = recording.memory_scope.as_deref() else {
                return Ok(None);
            };
            eprintln!(
                "replay: the recorded run used memory scope `{recorded}`; its searches find \
                 nothing without --memory SCOPE (SKILLBOX_MEMORY is not used), and its saves \
                 and forgets are compared, never run"
            );
            let empty = tempfile::tempdir().map_err(|e| CliError::Other(e.into()))?;
            let store = MemoryStore::open(&empty.path().join("memory.sqlite"))
                .map_err(|e| CliError::Other(anyhow::anyhow!("replay memory: {e}")))?;
            Ok(Some(Memory::Replay(
                Arc::new(store),
                scope(recorded)?,
                Some(empty),
            )))
        }
    }
}

/// The run's long-term memory.
enum Memory {
    Live(Arc<MemoryStore>, Scope),
    /// Read-only, for a replay; an empty store lives in the folder.
    Replay(Arc<MemoryStore>, Scope, Option<tempfile::TempDir>),
}

fn run_agent<M: Model>(
    args: &AgentArgs,
    model: M,
    task: &str,
    limits: Limits,
    replaying: Option<&Recording>,
) -> Result<Run, CliError> {
    let mut builder = args.audit.apply(
        args.sandbox
            .builder(&args.sources)?
            .confirm(args.confirm)
            .max_concurrency(4, None),
    );
    if args.patch.is_some() {
        builder = builder.dry_run();
    }
    let servers = args
        .mcp_config
        .as_deref()
        .map(McpConfig::load)
        .transpose()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let memory = memory(args, replaying)?;
    // The sandbox's own limit answers first, with the clearer message; the
    // client-side deadline is the backstop.
    let grace = Duration::from_secs(2);
    let override_ms = args.sandbox.timeout_ms;
    // A skill the user gave a longer limit (skillbox grant --timeout-ms)
    // is waited for that long.
    let granted_ms = args
        .sandbox
        .policy()?
        .all_grants()
        .filter_map(|g| g.limits.timeout_ms)
        .max()
        .unwrap_or(0);
    let pick = |default_ms: u64| {
        Duration::from_millis(override_ms.unwrap_or(default_ms.max(granted_ms))) + grace
    };

    let runtime = runtime()?;
    runtime.block_on(async {
        let skillbox = builder.build()?;
        super::flags::announce_recovery(&skillbox);
        let mut agent = Agent::builder(&skillbox, model)
            .max_steps(limits.max_steps)
            .budget_tokens(args.budget_tokens)
            .context_tokens(limits.context_tokens)
            .summary_tokens(limits.summary_tokens)
            .tool_timeouts(
                pick(args.read_timeout_ms),
                pick(args.write_timeout_ms),
                pick(args.script_timeout_ms),
            )
            .catalog_budget(args.catalog_budget)
            .approver(if args.yes {
                Approver::Yes
            } else {
                Approver::for_terminal()
            })
            .show_progress();
        if let Some(config) = servers {
            agent = agent.mcp_servers(config);
        }
        if let Some(file) = &args.trace {
            agent = agent.trace_file(file);
        }
        let (memory_scope, _empty_store) = match memory {
            Some(Memory::Live(store, scope)) => {
                let shown = scope.to_string();
                agent = agent.memory(store, scope);
                (Some(shown), None)
            }
            Some(Memory::Replay(store, scope, empty)) => {
                let shown = format!("{scope} (read-only in a replay)");
                agent = agent.memory_for_replay(store, scope);
                (Some(shown), empty)
            }
            None => (None, None),
        };
        let agent = agent.build();
        eprintln!(
            "agent: {} · {} skills · max {} steps{}",
            agent.model().describe(),
            skillbox.skills().len(),
            limits.max_steps.max(1),
            memory_scope.map_or(String::new(), |s| format!(" · memory scope `{s}`"))
        );
        let run = agent.run(task).await.map_err(agent_error)?;
        if let Some(file) = &args.patch {
            write_patch(&run.dry_run, file, args.sandbox.dry_run).await?;
        }
        Ok::<_, CliError>(run)
    })
}

/// Prints the table, the summary line and the answer; the exit code.
fn report(args: &AgentArgs, run: Run) -> ExitCode {
    let (outcome, trace) = (run.outcome, run.trace);
    eprint!("\n{}", trace.table());
    eprintln!(
        "stop: {} · {} steps · {} tool calls · tokens in {} (cached {}) out {}",
        serde_json::to_value(&outcome.stop)
            .ok()
            .and_then(|v| v["reason"].as_str().map(String::from))
            .unwrap_or_default(),
        outcome.steps,
        outcome.tool_calls,
        outcome.usage.input,
        outcome.usage.cache_read,
        outcome.usage.output
    );
    if let Stop::Provider(error) | Stop::Replay(error) = &outcome.stop {
        eprintln!("error: {error}");
    }
    let code = outcome.stop.exit_code();
    if args.json {
        print_json(&json!({
            "exit_code": code,
            "stop": outcome.stop,
            "answer": outcome.answer,
            "steps": outcome.steps,
            "tool_calls": outcome.tool_calls,
            "usage": outcome.usage,
            "trace": args.trace,
            "run_id": run.run_id,
        }));
    } else {
        println!("{}", outcome.answer);
    }
    ExitCode::from(code)
}

/// The most a task file may hold. A task is a prompt: past this it is
/// almost certainly the wrong file, and it would not fit a context anyway.
const MAX_TASK_FILE_BYTES: u64 = 256 * 1024;

/// `--task-file`: the task, as text, from a file or standard input.
fn read_task_file(path: &std::path::Path) -> Result<String, CliError> {
    use std::io::Read;
    let shown = path.display();
    let reader: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).map_err(|e| {
            CliError::Usage(format!(
                "--task-file: cannot open {shown}: {e}; name a file that holds the task"
            ))
        })?)
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_TASK_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Usage(format!("--task-file: cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_TASK_FILE_BYTES {
        return Err(CliError::Usage(format!(
            "--task-file: {shown} is larger than {} KiB, which no task needs; is it the right file?",
            MAX_TASK_FILE_BYTES / 1024
        )));
    }
    let task = String::from_utf8(bytes).map_err(|_| {
        CliError::Usage(format!(
            "--task-file: {shown} is not UTF-8 text; save the task as UTF-8"
        ))
    })?;
    let task = task.trim();
    if task.is_empty() {
        return Err(CliError::Usage(format!(
            "--task-file: {shown} is empty; write the task in it"
        )));
    }
    Ok(task.to_owned())
}

/// `--replay`: the recording's replies for a model, its task and limits,
/// the tools for real; then each differing result, with a diff.
fn replay(args: &AgentArgs, recording: &Recording) -> Result<ExitCode, CliError> {
    let limits = Limits::of(args, Some(recording));
    let run = run_agent(
        args,
        recording.model(),
        &recording.task,
        limits,
        Some(recording),
    )?;
    let divergences = compare(&recording.tool_results, run.trace.tool_results());
    let replayed = run.trace.tool_results().len();
    let stop = run.outcome.stop.clone();
    eprint!("\n{}", run.trace.table());
    for d in &divergences {
        eprintln!(
            "diverged: step {} · {} {}\n{}",
            d.step,
            d.tool,
            d.arguments.chars().take(80).collect::<String>(),
            d.diff
        );
    }
    let code = if let Stop::Replay(why) = &stop {
        eprintln!("replay stopped: {why}");
        Stop::REPLAY_STOPPED_EXIT_CODE
    } else if !divergences.is_empty() {
        Stop::REPLAY_DIVERGED_EXIT_CODE
    } else if replayed != recording.tool_results.len() {
        eprintln!(
            "replay: the recording made {} tool calls and the replay {replayed}",
            recording.tool_results.len()
        );
        // A limit the user gave (steps, tokens) stopped it first: that is
        // the stop to report, not a divergence.
        match stop.exit_code() {
            0 => Stop::REPLAY_DIVERGED_EXIT_CODE,
            limit => limit,
        }
    } else {
        stop.exit_code()
    };
    let verdict = match code {
        0 => format!("replay: all {replayed} tool results match the recording"),
        Stop::REPLAY_DIVERGED_EXIT_CODE => format!(
            "replay: {} of {replayed} tool results differ from the recording",
            divergences.len()
        ),
        _ => format!("replay: stopped after {replayed} tool calls"),
    };
    eprintln!("{verdict}");
    if args.json {
        print_json(&json!({
            "exit_code": code,
            "stop": stop,
            "tool_calls": replayed,
            "recorded_tool_calls": recording.tool_results.len(),
            "divergences": divergences,
        }));
    }
    Ok(ExitCode::from(code))
}

/// A configuration fault is a usage error (exit 2); a server failing while
/// it runs is not (exit 1).
fn agent_error(e: AgentError) -> CliError {
    match e {
        AgentError::Config(why) => CliError::Usage(why),
        e @ AgentError::Trace { .. } => CliError::Usage(format!("--trace: {e}")),
        other => CliError::Other(other.into()),
    }
}

/// Writes the run's changes as a patch; without --dry-run they are then
/// committed to the workspace, all together.
async fn write_patch(
    run: &skillbox_call::DryRun,
    file: &std::path::Path,
    dry_run: bool,
) -> Result<(), CliError> {
    let changes = run.changes().await;
    let patch = run.patch().await.map_err(|binary| {
        CliError::Other(anyhow::anyhow!(
            "--patch: {} cannot be written as a text patch (binary, or over 1 MiB); nothing \
             was written",
            binary.join(", ")
        ))
    })?;
    std::fs::write(file, patch).map_err(|e| {
        CliError::Usage(format!("--patch {}: cannot write it ({e})", file.display()))
    })?;
    eprintln!(
        "patch: {} ({}) written to {}",
        changes.summary(),
        if dry_run {
            "dry run: the workspace is untouched"
        } else {
            "now committed to the workspace"
        },
        file.display()
    );
    if !dry_run {
        run.commit()
            .await
            .map_err(|e| CliError::Other(anyhow::anyhow!("the run's changes: {e}")))?;
    }
    Ok(())
}
