//! `skillbox agent TASK`: the agent loop for terminals and CI.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::{Map, Value, json};

use super::flags::{SandboxFlags, SourceFlags, one_of};
use super::{CliError, print_json, runtime};
use skillbox::agent::approve::{AgentClient, Approver};
use skillbox::agent::control::AgentLoop;
use skillbox::agent::mcp_config::McpConfig;
use skillbox::agent::provider::{Provider, RetryPolicy};
use skillbox::agent::tools::ToolHub;
use skillbox::agent::trace::Trace;
use skillbox::agent::{LoopOptions, Stop, Timeouts};
use skillbox::call::ConfirmPolicy;
use skillbox::call::Host;
use skillbox::call::audit::AuditLog;
use skillbox::mcp::results::DEFAULT_OUTPUT_BUDGET;
use skillbox::mcp::{ServeOptions, Server, ToolsMode};
use skillbox::sandbox::Sandbox;
use skillbox::skill::{Catalog, invoke, meta};

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
    #[arg(long, value_name = "TOKENS", default_value_t = skillbox::skill::resident::DEFAULT_BUDGET_TOKENS)]
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
    /// Append one JSON line per tool call to this audit file (default: the user's state folder).
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
}

pub fn agent(args: AgentArgs) -> Result<ExitCode, CliError> {
    let mut host_options = args.sandbox.host_options(args.sources.options(), 4)?;
    host_options.confirm = args.confirm;
    let config = args
        .mcp_config
        .as_deref()
        .map(McpConfig::load)
        .transpose()
        .map_err(CliError::Usage)?;
    let retry = RetryPolicy::default();
    let provider = match Provider::from_spec(
        &args.model,
        args.base_url.as_deref(),
        Duration::from_secs(args.request_timeout_secs),
        retry,
    ) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(Stop::PROVIDER_EXIT_CODE));
        }
    };
    let audit_path = args.audit.clone().or_else(AuditLog::default_path);
    let audit = audit_path.as_deref().and_then(|p| AuditLog::open(p).ok());
    let serve = ServeOptions {
        tools_mode: ToolsMode::Lazy,
        output_budget: DEFAULT_OUTPUT_BUDGET,
        reload_interval: None,
        task_after: skillbox::mcp::tasks::DEFAULT_TASK_AFTER,
        task_ttl: skillbox::mcp::tasks::DEFAULT_TASK_TTL,
        max_tasks: skillbox::mcp::tasks::DEFAULT_MAX_TASKS,
        catalog_budget: args.catalog_budget,
    };
    // The sandbox's own limit answers first, with the clearer message; the
    // client-side deadline is the backstop.
    let grace = Duration::from_secs(2);
    let override_ms = args.sandbox.timeout_ms;
    let pick = |default_ms: u64| Duration::from_millis(override_ms.unwrap_or(default_ms)) + grace;
    let loop_options = LoopOptions {
        max_steps: args.max_steps.max(1),
        budget_tokens: args.budget_tokens,
        context_tokens: args.context_tokens,
        timeouts: Timeouts {
            read: pick(args.read_timeout_ms),
            write: pick(args.write_timeout_ms),
            script: pick(args.script_timeout_ms),
        },
    };
    let trace = Trace::open(args.trace.as_deref(), true)
        .map_err(|e| CliError::Usage(format!("--trace: cannot create the file ({e})")))?;

    let runtime = runtime()?;
    let (outcome, trace) = runtime.block_on(async {
        let sandbox = Arc::new(Sandbox::new()?);
        let host = Arc::new(Host::new(host_options, sandbox, audit).map_err(CliError::Usage)?);
        let catalog = host.catalog();
        let (task, invoked) = explicit_invocation(&catalog, &args.task)?;
        let hub = ToolHub::connect(
            Arc::new(Server::new(host, serve).map_err(|e| CliError::Other(e.into()))?),
            config.as_ref(),
            AgentClient::new(Approver::for_run(args.yes)),
        )
        .await
        .map_err(hub_error)?;
        // The user invoked this skill: say so to the session (as a client
        // does by fetching the skill's prompt), so that a skill the model
        // may not pick on its own can still run its tools in this run.
        if let Some(name) = &invoked {
            hub.invoke_skill(name).await.map_err(hub_error)?;
        }
        // Listing once up front refuses name clashes before any model call.
        let tools = hub.list().await.map_err(hub_error)?;
        if let (Some(name), Some(load)) =
            (&invoked, tools.get(skillbox::mcp::host_tools::LOAD_SKILL))
        {
            let mut args = Map::new();
            args.insert("name".into(), Value::from(name.as_str()));
            hub.call(load, args, Duration::from_secs(30), None).await;
        }
        eprintln!(
            "agent: {} · {} skills · max {} steps",
            provider.describe(),
            catalog.len(),
            loop_options.max_steps
        );
        let agent = AgentLoop::new(
            &provider,
            &hub,
            loop_options,
            trace,
            &catalog.resident(args.catalog_budget).text(),
            task,
        );
        let result = agent.run().await;
        hub.close().await;
        Ok::<_, CliError>(result)
    })?;

    eprint!("\n{}", trace.table());
    eprintln!(
        "stop: {} · {} steps · {} tool calls · tokens in {} out {}",
        serde_json::to_value(&outcome.stop)
            .ok()
            .and_then(|v| v["reason"].as_str().map(String::from))
            .unwrap_or_default(),
        outcome.steps,
        outcome.tool_calls,
        outcome.usage.input,
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

/// `/skill:NAME args` (or `/NAME args` naming a skill) at the start of the
/// task loads that skill up front; returns the first user message and the
/// skill invoked.
fn explicit_invocation(
    catalog: &Catalog,
    task: &str,
) -> Result<(String, Option<String>), CliError> {
    let Some(request) = invoke::parse(task) else {
        return Ok((task.to_string(), None));
    };
    let explicit = task.trim_start().starts_with("/skill:");
    let looks_like_skill = meta::name_format_problem(request.name).is_none();
    if !explicit && (!looks_like_skill || catalog.get(request.name).is_none()) {
        return Ok((task.to_string(), None));
    }
    let skill = invoke::resolve(catalog, &request).map_err(|e| CliError::Usage(e.to_string()))?;
    let prompt = invoke::render(
        skill,
        request.arguments,
        &skillbox::mcp::host_tools::skill_dir_uri(skill.name()),
    )
    .map_err(|e| CliError::Usage(e.to_string()))?;
    Ok((prompt, Some(skill.name().to_string())))
}

/// A configuration fault is a usage error (exit 2); a server failing while
/// it runs is not (exit 1).
fn hub_error(e: skillbox::agent::tools::HubError) -> CliError {
    match e {
        skillbox::agent::tools::HubError::Config(why) => CliError::Usage(why),
        server => CliError::Other(server.into()),
    }
}
