//! `skillbox agent TASK`: the agent loop for terminals and CI.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::flags::{AuditFlags, SandboxFlags, SourceFlags, one_of};
use super::{CliError, print_json, runtime};
use skillbox::ConfirmPolicy;
use skillbox::agent::{Agent, AgentError, Approver, McpConfig, Provider, RetryPolicy, Stop};

#[derive(Args, Debug)]
#[command(
    after_help = "Exit codes: 0 done, 2 usage, 3 step limit, 4 token budget, 5 model or provider error, 6 tool failures left it stuck, 7 a call needed the user's confirmation and no one could give it (no terminal; see --yes)."
)]
pub struct AgentArgs {
    /// The task. Start it with `/skill:NAME args` to invoke a skill explicitly.
    task: String,
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
    /// Model calls allowed before the loop stops (exit 3).
    #[arg(long, value_name = "N", default_value_t = 20)]
    max_steps: usize,
    /// Provider-reported tokens (in + out) allowed; a warning at 80%, a stop at 100% (exit 4).
    #[arg(long, value_name = "N")]
    budget_tokens: Option<u64>,
    /// Context size in tokens above which old tool results are trimmed.
    #[arg(long, value_name = "N", default_value_t = 32_000)]
    context_tokens: usize,
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

pub fn agent(args: AgentArgs) -> Result<ExitCode, CliError> {
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
    // The sandbox's own limit answers first, with the clearer message; the
    // client-side deadline is the backstop.
    let grace = Duration::from_secs(2);
    let override_ms = args.sandbox.timeout_ms;
    let pick = |default_ms: u64| Duration::from_millis(override_ms.unwrap_or(default_ms)) + grace;

    let runtime = runtime()?;
    let run = runtime.block_on(async {
        let skillbox = builder.build()?;
        super::flags::announce_recovery(&skillbox);
        let mut agent = Agent::builder(&skillbox, provider)
            .max_steps(args.max_steps)
            .budget_tokens(args.budget_tokens)
            .context_tokens(args.context_tokens)
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
        let agent = agent.build();
        eprintln!(
            "agent: {} · {} skills · max {} steps",
            agent.model().describe(),
            skillbox.skills().len(),
            args.max_steps.max(1)
        );
        let run = agent.run(&args.task).await.map_err(agent_error)?;
        if let Some(file) = &args.patch {
            write_patch(&run.dry_run, file, args.sandbox.dry_run).await?;
        }
        Ok::<_, CliError>(run)
    })?;
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
    if let Stop::Provider(error) = &outcome.stop {
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
        }));
    } else {
        println!("{}", outcome.answer);
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
    run: &skillbox::unstable::call::DryRun,
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
