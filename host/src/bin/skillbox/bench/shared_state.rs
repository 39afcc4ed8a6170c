//! What sharing state through Redis costs a replica: 2025-11-25 session
//! calls per second with 8 clients, with the replica's own state and with
//! `--state redis://…` (each such call reads the session's skills from
//! the store), and how many such calls one Redis core carries, from the
//! CPU time `redis-server` spent during the run.
//!
//! Runs against Debian's `redis-server`, started here on a free port with
//! a password and no persistence; without it the rows are skipped.

use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use tokio::io::AsyncBufReadExt;

use super::http_load::{self, Revision};
use super::mcp::{skills_dir, start_http_with};

const NOOP: &str = "bench-kit__noop";

pub(super) struct SharedStateFigures {
    /// Session calls per second, 8 clients, the replica's own state.
    pub local: f64,
    /// The same with `--state redis://…`.
    pub redis: f64,
    /// Session calls one fully busy Redis core would carry per second.
    pub per_redis_core: Option<f64>,
}

impl SharedStateFigures {
    /// How much longer a call takes with the shared store (8 clients in a
    /// closed loop, so latency goes as the inverse of throughput).
    pub(super) fn latency_ratio(&self) -> f64 {
        self.local / self.redis.max(f64::MIN_POSITIVE)
    }
}

/// `None` when `redis-server` is not installed.
pub(super) async fn run(
    exe: &Path,
    trivial: &Path,
    seconds: f64,
) -> anyhow::Result<Option<SharedStateFigures>> {
    let Some(redis) = RedisServer::start().await? else {
        return Ok(None);
    };
    let kit = skills_dir(trivial, 0)?;
    eprintln!(
        "bench: 2025-11-25 session calls per second, 8 clients, own state and --state redis ({seconds} s each)…"
    );
    let (mut server, addr) = start_http_with(exe, kit.path(), &[], &[]).await?;
    let local = http_load::throughput_as(Revision::Sessions, addr, NOOP, 8, seconds).await?;
    let _ = server.kill().await;

    let url = redis.url();
    let (mut server, addr) = start_http_with(
        exe,
        kit.path(),
        &["--state", &url],
        &[("SKILLBOX_STATE_PASSWORD", &redis.password)],
    )
    .await?;
    let cpu_before = redis.cpu_seconds();
    let started = Instant::now();
    let redis_rate = http_load::throughput_as(Revision::Sessions, addr, NOOP, 8, seconds).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let per_redis_core = match (cpu_before, redis.cpu_seconds()) {
        (Some(before), Some(after)) if after > before => {
            Some(redis_rate * elapsed / (after - before))
        }
        _ => None,
    };
    let _ = server.kill().await;
    Ok(Some(SharedStateFigures {
        local,
        redis: redis_rate,
        per_redis_core,
    }))
}

/// A `redis-server` of the benchmark's own, killed when dropped.
struct RedisServer {
    child: tokio::process::Child,
    port: u16,
    password: String,
}

impl RedisServer {
    async fn start() -> anyhow::Result<Option<RedisServer>> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut bytes = [0u8; 16];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
        let password: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let spawned = tokio::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--requirepass", &password])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!(
                    "bench: redis-server is not installed; the shared-state rows are skipped"
                );
                return Ok(None);
            }
            Err(e) => return Err(e).context("start redis-server"),
        };
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await? {
            if line.contains("Ready to accept connections") {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Ok(Some(RedisServer {
                    child,
                    port,
                    password,
                }));
            }
        }
        bail!("redis-server stopped before it was ready")
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// CPU time (user and system) the server has used, from `/proc`.
    fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()?)).ok()?;
        // The fields after the command's name, which is in parentheses.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        let per_second = rustix::param::clock_ticks_per_second() as f64;
        Some(ticks / per_second)
    }
}
