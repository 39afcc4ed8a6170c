//! `skillbox serve`: the MCP server.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::flags::{AuditFlags, SandboxFlags, SourceFlags, one_of};
use super::{CliError, runtime};
use skillbox::ConfirmPolicy;
use skillbox::mcp::{
    BearerToken, DEFAULT_MAX_BODY_BYTES, DEFAULT_OUTPUT_BUDGET, HttpOptions, OAuthOptions,
    OAuthVerifier, Server, StateError, StateStore, ToolsMode, parse_addr,
};

#[derive(Args, Debug)]
pub(super) struct ServeArgs {
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    sandbox: SandboxFlags,
    /// Which of the model's calls the user confirms first: destructive
    /// tools, write and destructive tools and scripts, or none. The client
    /// is asked (elicitation, or an input_required result on 2026-07-28);
    /// a client that cannot ask gets an error and nothing runs.
    #[arg(long, value_parser = one_of::<ConfirmPolicy>(ConfirmPolicy::NAMES), default_value = "destructive")]
    confirm: ConfirmPolicy,
    /// How long a person has to answer a confirmation, in seconds; a
    /// stateless client's answer is good once, and only this long.
    #[arg(long, value_name = "SECS", default_value_t = skillbox::mcp::DEFAULT_CONFIRM_TIMEOUT.as_secs())]
    confirm_timeout_secs: u64,
    /// A call still running after this many milliseconds becomes a task
    /// (for clients that declare the tasks extension); 0 makes every
    /// skill tool call and script run a task.
    #[arg(long, value_name = "MS", default_value_t = skillbox::mcp::DEFAULT_TASK_AFTER.as_millis() as u64)]
    task_after_ms: u64,
    /// Tasks running at once; past it, long calls finish in their request.
    #[arg(long, value_name = "N", default_value_t = skillbox::mcp::DEFAULT_MAX_TASKS)]
    max_tasks: usize,
    /// How long a task and its result are kept, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = skillbox::mcp::DEFAULT_TASK_TTL.as_secs())]
    task_ttl_secs: u64,
    /// Tokens the resident skill catalog (load_skill's description) may
    /// take; past it, descriptions shorten, then skills are left to
    /// find_skills.
    #[arg(long, value_name = "TOKENS", default_value_t = skillbox::mcp::DEFAULT_CATALOG_BUDGET)]
    catalog_budget: usize,
    /// List skill tools after load_skill (lazy) or all up front (all).
    #[arg(long, value_parser = one_of::<ToolsMode>(ToolsMode::NAMES), default_value = "lazy")]
    tools: ToolsMode,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (PORT binds 127.0.0.1).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Share what replicas must agree on through Redis or Valkey at
    /// redis://HOST[:PORT][/DB]: the key sealing confirmation state and
    /// the approvals spent, so an approval answered through any replica
    /// counts, and counts once. Without it each replica keeps its own.
    #[arg(long, value_name = "URL", requires = "http")]
    state: Option<String>,
    /// A file holding the state store's password (else the environment's
    /// SKILLBOX_STATE_PASSWORD; never in the URL, which `ps` shows).
    #[arg(long, value_name = "FILE", requires = "state")]
    state_password_file: Option<PathBuf>,
    /// The workspace is on a volume that replicas on other machines write
    /// too (NFS, a ReadWriteMany claim), and NAME is what every one of them
    /// calls it: commits take turns through the --state store, which keeps
    /// each commit's journal until it is done.
    #[arg(long, value_name = "NAME", requires_all = ["state", "workspace"])]
    shared_workspace: Option<String>,
    /// Accept this Host header too (besides loopback names); for --http.
    #[arg(long, value_name = "HOST")]
    allow_host: Vec<String>,
    /// Accept this browser Origin too (besides loopback ones); for --http.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Require `Authorization: Bearer <token>` on every HTTP request, with
    /// the token in this file; needed to bind a non-loopback address.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// Accept OAuth 2.1 bearer JWTs from this authorization server (its
    /// `iss`); keys come from its published JWKS. Needs --oauth-resource.
    #[arg(
        long,
        value_name = "URL",
        requires = "oauth_resource",
        conflicts_with = "auth_token_file"
    )]
    oauth_issuer: Option<String>,
    /// This server's canonical URL (e.g. https://mcp.example.com/mcp): the
    /// audience tokens must name, and the resource in the metadata at
    /// /.well-known/oauth-protected-resource.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    oauth_resource: Option<String>,
    /// The issuer's JWKS, when its metadata should not be used to find it.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    oauth_jwks_url: Option<String>,
    /// A scope every token must carry (repeatable); others get 403.
    #[arg(long, value_name = "SCOPE", requires = "oauth_issuer")]
    oauth_scope: Vec<String>,
    /// Serve a non-loopback address without authentication (dangerous:
    /// anyone who reaches it runs the skills with your grants).
    #[arg(long)]
    insecure_no_auth: bool,
    /// HTTP connections served at once. Past it (or past a client's
    /// share), a connection is answered only on /healthz and /readyz.
    #[arg(long, value_name = "N", default_value_t = skillbox::mcp::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// HTTP connections one address may hold (default: half of
    /// --max-connections). Behind a proxy every client has the proxy's
    /// address: set it to --max-connections there.
    #[arg(long, value_name = "N")]
    max_connections_per_client: Option<usize>,
    /// Event streams (GET /mcp) one client (an OAuth subject, else an
    /// address) may hold open; a session holds at most one.
    #[arg(long, value_name = "N", default_value_t = skillbox::mcp::DEFAULT_MAX_STREAMS_PER_CLIENT)]
    max_streams_per_client: usize,
    /// An event stream that sent only keep-alives for this many seconds
    /// is ended (clients reconnect when they want events again).
    #[arg(long, value_name = "SECS", default_value_t = skillbox::mcp::STREAM_IDLE_TIMEOUT.as_secs())]
    stream_idle_secs: u64,
    /// HTTP sessions (2025-11-25 clients) open at once; idle ones end after five minutes.
    #[arg(long, value_name = "N", default_value_t = skillbox::mcp::DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,
    /// On SIGTERM or Ctrl-C, how long HTTP requests in flight get to
    /// finish, in seconds; /readyz turns 503 and no connection is accepted
    /// meanwhile. Requests still running then are cut off.
    #[arg(long, value_name = "SECS", default_value_t = skillbox::mcp::DEFAULT_SHUTDOWN_GRACE.as_secs())]
    shutdown_grace: u64,
    /// Largest HTTP request body, in bytes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// Tool calls that may run at once; more wait their turn.
    #[arg(long, value_name = "N", default_value_t = 8)]
    max_concurrency: usize,
    /// Tool calls one HTTP client (an OAuth subject, else an address) may
    /// run at once, so no client takes every slot (default: half of
    /// --max-concurrency).
    #[arg(long, value_name = "N")]
    max_calls_per_client: Option<usize>,
    /// Bytes of a tool result put into the model's context; the rest is cut head and tail.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_OUTPUT_BUDGET)]
    output_budget: usize,
    #[command(flatten)]
    audit: AuditFlags,
    /// How often to check skill folders for changes, in milliseconds (0 disables reload).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    reload_ms: u64,
    /// Print the banner on stderr even when it is not a terminal.
    #[arg(long)]
    banner: bool,
}

pub(super) fn serve(args: ServeArgs) -> Result<ExitCode, CliError> {
    let builder = args.audit.apply(
        args.sandbox
            .builder(&args.sources)?
            .confirm(args.confirm)
            .max_concurrency(args.max_concurrency, args.max_calls_per_client),
    );
    let http_addr = args
        .http
        .as_deref()
        .map(parse_addr)
        .transpose()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let runtime = runtime()?;
    runtime.block_on(async move {
        let skillbox = builder.build()?;
        super::flags::announce_recovery(&skillbox);
        let server = Server::builder(&skillbox)
            .tools(args.tools)
            .output_budget(args.output_budget)
            .reload_every((args.reload_ms > 0).then(|| Duration::from_millis(args.reload_ms)))
            .tasks(
                Duration::from_millis(args.task_after_ms),
                Duration::from_secs(args.task_ttl_secs),
                args.max_tasks,
            )
            .catalog_budget(args.catalog_budget)
            .confirm_timeout(Duration::from_secs(args.confirm_timeout_secs));
        let server = match &args.state {
            Some(address) => {
                let password = state_password(args.state_password_file.as_deref())?;
                let store = StateStore::redis(address, password.as_deref())
                    .await
                    .map_err(|e| match e {
                        StateError::Unreachable { .. } | StateError::Evicts { .. } => {
                            CliError::Other(e.into())
                        }
                        _ => CliError::Usage(e.to_string()),
                    })?;
                let server = server.state(store);
                match (&args.shared_workspace, &args.sandbox.workspace) {
                    (Some(name), Some(workspace)) => server.shared_workspace(workspace, name),
                    _ => server,
                }
            }
            None => server,
        };
        let server = server.build().map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => CliError::Usage(e.to_string()),
            _ => CliError::Other(e.into()),
        })?;
        let show_banner = args.banner || std::io::stderr().is_terminal();
        let Some(addr) = http_addr else {
            if show_banner {
                eprint!("{}", server.banner("stdio"));
            }
            return server
                .serve_stdio()
                .await
                .map_err(|e| CliError::Other(e.into()));
        };
        let mut options = HttpOptions::new(addr);
        options.allowed_hosts = args.allow_host;
        options.allowed_origins = args.allow_origin;
        options.max_body_bytes = args.max_body_bytes;
        options.insecure_no_auth = args.insecure_no_auth;
        options.max_connections = args.max_connections;
        options.max_connections_per_client = args
            .max_connections_per_client
            .unwrap_or(args.max_connections / 2)
            .max(1);
        options.max_streams_per_client = args.max_streams_per_client;
        options.stream_idle_timeout = Duration::from_secs(args.stream_idle_secs.max(1));
        options.max_sessions = args.max_sessions;
        options.shutdown_grace = Duration::from_secs(args.shutdown_grace);
        options.auth = args
            .auth_token_file
            .as_deref()
            .map(BearerToken::from_file)
            .transpose()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        if let Some(issuer) = args.oauth_issuer {
            let mut oauth = OAuthOptions::new(issuer, args.oauth_resource.unwrap_or_default());
            oauth.jwks_url = args.oauth_jwks_url;
            oauth.scopes = args.oauth_scope;
            let verifier = OAuthVerifier::start(oauth)
                .await
                .map_err(|e| CliError::Usage(e.to_string()))?;
            options.oauth = Some(Arc::new(verifier));
        }
        if args.insecure_no_auth && !addr.ip().is_loopback() {
            eprintln!(
                "WARNING: serving {addr} WITHOUT AUTHENTICATION (--insecure-no-auth): anyone \
                 who can reach this address can run the skills with your grants"
            );
        }
        let shutdown = CancellationToken::new();
        let (bound, task) = server
            .serve_http(options, shutdown.clone())
            .await
            .map_err(|e| CliError::Usage(e.to_string()))?;
        let endpoint = format!("http://{bound}/mcp");
        if show_banner {
            eprint!("{}", server.banner(&endpoint));
        } else {
            eprintln!("skillbox: serving MCP at {endpoint}");
        }
        let signal = stop_signal().await;
        eprintln!(
            "skillbox: {signal}: draining (up to {} s for requests in flight)",
            args.shutdown_grace
        );
        shutdown.cancel();
        let _ = task.await;
        eprintln!("skillbox: stopped");
        Ok::<_, CliError>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Waits for SIGTERM (what orchestrators and `kill` send) or Ctrl-C, and
/// names the one that came.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "interrupted";
    };
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "interrupted",
    }
}

/// The state store's password: from the file named, else the environment,
/// else none.
fn state_password(file: Option<&std::path::Path>) -> Result<Option<String>, CliError> {
    let Some(file) = file else {
        return Ok(std::env::var("SKILLBOX_STATE_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty()));
    };
    let text = std::fs::read_to_string(file).map_err(|e| {
        CliError::Usage(format!(
            "--state-password-file {}: cannot read it: {e}",
            file.display()
        ))
    })?;
    let password = text.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(CliError::Usage(format!(
            "--state-password-file {}: the file is empty; write the password in it",
            file.display()
        )));
    }
    Ok(Some(password.to_owned()))
}
