//! MCP figures: stdio round trip, throughput with 1 and 8 clients over
//! HTTP, and time from process start to the first `tools/list` answer.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use tokio::io::AsyncBufReadExt;

use super::Stats;
use super::http_load;

pub(super) struct McpFigures {
    pub round_trip: Stats,
    pub calls_per_sec_1: f64,
    pub calls_per_sec_8: f64,
    pub startup_4: Stats,
    pub startup_50: Stats,
    /// The same 50 skills installed: each checked against skillbox.lock.
    pub startup_50_locked: Stats,
    /// 3,000 instruction-only skills beside the kit (a large public
    /// collection's size), catalog under the default budget.
    pub startup_3000: Stats,
    /// Resident bytes of a server with 50 skills, every tool listed.
    pub idle_rss_50: Option<u64>,
}

/// A skills folder with `bench-kit` (whose `noop` tool is the trivial call)
/// plus `extra` skills alike.
pub(super) fn skills_dir(trivial: &Path, extra: usize) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let write_skill = |name: &str| -> anyhow::Result<()> {
        let skill = dir.path().join(name);
        std::fs::create_dir_all(skill.join("tools"))?;
        std::fs::write(
            skill.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: Benchmark skill {name}; use only when measuring skillbox itself.\n---\nCall the tool.\n"
            ),
        )?;
        std::fs::copy(trivial, skill.join("tools/testbed.wasm"))?;
        std::fs::write(
            skill.join("skillbox.yaml"),
            "tools:\n  - component: tools/testbed.wasm\n    functions:\n      noop:\n        description: Returns 42. Use to measure calls. Not for real work.\n",
        )?;
        Ok(())
    };
    write_skill("bench-kit")?;
    for i in 0..extra {
        write_skill(&format!("bench-extra-{i:02}"))?;
    }
    Ok(dir)
}

/// Adds `n` instruction-only skills to `dir`.
fn add_text_skills(dir: &Path, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let name = format!("bench-text-{i:04}");
        let skill = dir.join(&name);
        std::fs::create_dir_all(&skill)?;
        std::fs::write(
            skill.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: Handles task family {i}: parsing, checking and reporting. Use when a task names family {i}.\n---\n# Steps\nRead, check, report.\n"
            ),
        )?;
    }
    Ok(())
}

fn serve_command(exe: &Path, skills: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "serve",
        "--no-audit",
        "--reload-ms",
        "0",
        "--tools",
        "all",
        "--skills",
    ])
    .arg(skills)
    .env("SKILLBOX_SYSTEM_SKILLS", "");
    cmd
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn connect(exe: &Path, skills: &Path) -> anyhow::Result<Client> {
    Ok(connect_with_pid(exe, skills).await?.0)
}

async fn connect_with_pid(exe: &Path, skills: &Path) -> anyhow::Result<(Client, Option<u32>)> {
    let (transport, _) = TokioChildProcess::builder(serve_command(exe, skills))
        .stderr(Stdio::null())
        .spawn()?;
    let pid = transport.id();
    Ok((().serve(transport).await?, pid))
}

/// Resident memory of a server with `skills` after its first tools/list
/// (every tool listed, so every component loaded), once it has settled.
async fn idle_rss(exe: &Path, skills: &Path) -> anyhow::Result<Option<u64>> {
    let (client, pid) = connect_with_pid(exe, skills).await?;
    client.peer().list_all_tools().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss = pid.and_then(|pid| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    client.cancel().await?;
    Ok(rss)
}

/// The trivial tool every MCP figure calls.
const NOOP: &str = "bench-kit__noop";

fn noop() -> CallToolRequestParams {
    CallToolRequestParams::new(NOOP)
}

pub(super) async fn run(
    exe: &Path,
    trivial: &Path,
    iterations: usize,
    seconds: f64,
) -> anyhow::Result<McpFigures> {
    let kit = skills_dir(trivial, 0)?;

    eprintln!("bench: {iterations} tools/call round trips over stdio…");
    let client = connect(exe, kit.path()).await?;
    let round_trip = round_trips(&client, noop(), iterations).await?;
    client.cancel().await?;

    eprintln!("bench: calls per second over HTTP with 1 and 8 clients ({seconds} s each)…");
    let (mut server, addr) = start_http_with(exe, kit.path(), &[], &[]).await?;
    let calls_per_sec_1 = http_load::throughput(addr, NOOP, 1, seconds).await?;
    let calls_per_sec_8 = http_load::throughput(addr, NOOP, 8, seconds).await?;
    let _ = server.kill().await;

    eprintln!("bench: process start to first tools/list, 4, 50 and 3,001 skills…");
    let four = skills_dir(trivial, 3)?;
    let fifty = skills_dir(trivial, 49)?;
    let thousands = skills_dir(trivial, 0)?;
    add_text_skills(thousands.path(), 3_000)?;
    let locked = skills_dir(trivial, 49)?;
    super::distribution::lock_every_skill(locked.path())?;
    // A user's skills were written before the server starts. A file
    // changed within the last second is hashed at every start, by design
    // (the digest memo cannot vouch for it yet), which is not the start
    // this row measures.
    tokio::time::sleep(SETTLED_AFTER_WRITING).await;
    let startup_4 = startup(exe, four.path()).await?;
    let startup_50 = startup(exe, fifty.path()).await?;
    let startup_50_locked = startup(exe, locked.path()).await?;
    let startup_3000 = startup(exe, thousands.path()).await?;
    let idle_rss_50 = idle_rss(exe, fifty.path()).await?;
    Ok(McpFigures {
        idle_rss_50,
        round_trip,
        calls_per_sec_1,
        calls_per_sec_8,
        startup_4,
        startup_50,
        startup_50_locked,
        startup_3000,
    })
}

/// `iterations` timed calls of `params` after ten untimed ones.
async fn round_trips(
    client: &Client,
    params: CallToolRequestParams,
    iterations: usize,
) -> anyhow::Result<Stats> {
    for _ in 0..10 {
        client.peer().call_tool(params.clone()).await?;
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let result = client.peer().call_tool(params.clone()).await?;
        samples.push(start.elapsed());
        if result.is_error == Some(true) {
            bail!("the benchmark tool failed: {result:?}");
        }
    }
    Ok(Stats::of(samples))
}

/// Other MCP servers' stdio round trips, measured after skillbox's with
/// the same client in the same run.
pub(super) struct SideBySide {
    /// The official Python SDK's server, no sandbox.
    pub python_sdk: Option<Stats>,
    /// The server the user named with `--peer`.
    pub peer: Option<Stats>,
}

pub(super) async fn side_by_side(
    sdk_python: &Path,
    peer: Option<Peer>,
    iterations: usize,
) -> anyhow::Result<SideBySide> {
    let dir = tempfile::tempdir()?;
    let python_sdk = match Peer::python_sdk(sdk_python, dir.path())? {
        Some(sdk) => {
            eprintln!("bench: the same round trip, official Python SDK server…");
            Some(sdk.round_trip(iterations).await?)
        }
        None => {
            eprintln!(
                "bench: {} lacks the MCP Python SDK (pip install mcp); its row is skipped",
                sdk_python.display()
            );
            None
        }
    };
    let peer = match peer {
        Some(peer) => {
            eprintln!("bench: the same round trip, the --peer server…");
            Some(peer.round_trip(iterations).await?)
        }
        None => None,
    };
    Ok(SideBySide { python_sdk, peer })
}

/// Another MCP server over stdio, measured beside skillbox with the same
/// client: `command` serves `tool`, called with `arguments`.
pub(super) struct Peer {
    pub command: Vec<String>,
    pub tool: String,
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

impl Peer {
    /// The official Python SDK serving a `noop` tool, when `python` has
    /// the SDK (the `mcp` package); the script is written under `dir`.
    pub(super) fn python_sdk(python: &Path, dir: &Path) -> anyhow::Result<Option<Peer>> {
        let has_sdk = std::process::Command::new(python)
            .args(["-c", "import mcp.server"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !has_sdk {
            return Ok(None);
        }
        let script = dir.join("python_sdk_echo.py");
        std::fs::write(&script, include_str!("python_sdk_echo.py"))?;
        Ok(Some(Peer {
            command: vec![python.display().to_string(), script.display().to_string()],
            tool: "noop".into(),
            arguments: serde_json::Map::new(),
        }))
    }

    /// `iterations` round trips of the peer's tool over stdio.
    pub(super) async fn round_trip(&self, iterations: usize) -> anyhow::Result<Stats> {
        let (program, args) = self
            .command
            .split_first()
            .context("the peer's command is empty")?;
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the peer server `{program}`"))?;
        let client = ().serve(transport).await?;
        let params =
            CallToolRequestParams::new(self.tool.clone()).with_arguments(self.arguments.clone());
        let stats = round_trips(&client, params, iterations).await;
        client.cancel().await?;
        stats
    }
}

/// How long after the last write a skill's files count as settled for
/// the digest memo, with a margin.
const SETTLED_AFTER_WRITING: Duration =
    skillbox_sandbox::stamp::SETTLED_AFTER.saturating_add(Duration::from_millis(100));

async fn startup(exe: &Path, skills: &Path) -> anyhow::Result<Stats> {
    let mut samples = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let client = connect(exe, skills).await?;
        let tools = client.peer().list_all_tools().await?;
        samples.push(start.elapsed());
        if tools.is_empty() {
            bail!("no tools listed");
        }
        client.cancel().await?;
    }
    Ok(Stats::of(samples))
}

/// `serve --http` on a free loopback port with `extra` flags and `env`;
/// returns the process and the address it serves at.
pub(super) async fn start_http_with(
    exe: &Path,
    skills: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(tokio::process::Child, std::net::SocketAddr)> {
    let mut cmd = serve_command(exe, skills);
    cmd.args(["--http", "127.0.0.1:0", "--max-concurrency", "8"])
        .args(extra)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let stderr = child.stderr.take().context("no stderr")?;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some(url) = line.strip_prefix("skillbox: serving MCP at ") {
            let addr = url
                .strip_prefix("http://")
                .and_then(|rest| rest.split('/').next())
                .and_then(|authority| authority.parse().ok())
                .with_context(|| format!("the server announced an unexpected URL: {url}"))?;
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok((child, addr));
        }
    }
    bail!("the HTTP server exited before listening")
}
