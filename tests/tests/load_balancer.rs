//! Three replicas behind the real HAProxy, with the configuration in
//! `deploy/haproxy/haproxy.cfg`: they share only files (the skills and a
//! read-only compiled-code cache filled by `skillbox compile`), any
//! replica answers any stateless request, a 2025-11-25 session sticks to
//! its replica, and when one replica is killed mid-stream every read is
//! still answered, no write runs twice, the killed replica's calls in
//! flight are reported, and the survivors keep serving.
//!
//! Needs `haproxy` on PATH. Without it the test says so and passes,
//! unless SKILLBOX_REQUIRE_HAPROXY is set (CI installs it and sets it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillbox_e2e::mcp::{Recorder, base_url, sample, scrape, serve_http, stateless_call};

const CLIENTS: usize = 4;
const CALLS_PER_CLIENT: usize = 36;
/// Each read sleeps this long in the guest, so a replica always has calls
/// in flight when it is killed.
const READ_MS: u64 = 250;
/// How often a client tries a read before it gives up.
const READ_ATTEMPTS: usize = 5;

pub(crate) fn haproxy() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .map(|dir| dir.join("haproxy"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("SKILLBOX_REQUIRE_HAPROXY").is_none(),
            "haproxy is not installed (apt-get install haproxy); CI requires it"
        );
        eprintln!("SKIPPED: haproxy is not installed; `apt-get install haproxy` to run this test");
    }
    found
}

pub(crate) struct Balancer(Child);

/// Starts `haproxy` with `config` in front of the three replicas at
/// `replicas` (MCP URLs), its log in `logs`; returns it with its MCP URL
/// once it serves `/readyz`.
pub(crate) async fn balance(
    haproxy: &Path,
    config: &Path,
    replicas: &[&str],
    logs: &Path,
) -> (Balancer, String) {
    let lb_port = free_port();
    let log = std::fs::File::create(logs.join("haproxy.log")).unwrap();
    let balancer = Balancer(
        Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(config)
            .env("SKILLBOX_LB_BIND", format!("127.0.0.1:{lb_port}"))
            .env("SKILLBOX_REPLICA_1", host_port(replicas[0]))
            .env("SKILLBOX_REPLICA_2", host_port(replicas[1]))
            .env("SKILLBOX_REPLICA_3", host_port(replicas[2]))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start haproxy"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = reqwest::get(format!("http://127.0.0.1:{lb_port}/readyz")).await
            && r.status() == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "haproxy never served /readyz");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (balancer, format!("http://127.0.0.1:{lb_port}/mcp"))
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn host_port(mcp_url: &str) -> String {
    base_url(mcp_url).trim_start_matches("http://").to_string()
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    reads_answered: usize,
    /// Reads whose first try failed because a replica died under them.
    reads_retried: Vec<String>,
    reads_failed: Vec<String>,
    writes_ok: Vec<String>,
    /// Writes whose answer never came: they may or may not have run, so
    /// they are reported, never retried.
    writes_unknown: Vec<(String, String)>,
}

async fn client(n: usize, url: String, done: Arc<AtomicUsize>) -> Tally {
    let http = reqwest::Client::new();
    let mut tally = Tally::default();
    for i in 0..CALLS_PER_CLIENT {
        let key = format!("client{n}-call{i}");
        if i % 4 == 3 {
            let args = json!({"path": format!("/workspace/{key}.txt"), "contents": key});
            let meta = json!({"io.skillbox/idempotencyKey": key});
            match stateless_call(&http, &url, "testkit__write-file", args, meta).await {
                Ok(result) if result["isError"] == false => tally.writes_ok.push(key),
                Ok(result) => panic!("write {key} failed: {result}"),
                Err(why) => tally.writes_unknown.push((key, why)),
            }
        } else {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let args = json!({"ms": READ_MS});
                match stateless_call(&http, &url, "testkit__sleep-ms", args, json!({})).await {
                    Ok(result) => {
                        assert_eq!(result["isError"], false, "{result}");
                        tally.reads_answered += 1;
                        break;
                    }
                    Err(why) if attempt < READ_ATTEMPTS => {
                        tally.reads_retried.push(format!("{key}: {why}"));
                        tokio::time::sleep(Duration::from_millis(100 * attempt as u64)).await;
                    }
                    Err(why) => {
                        tally.reads_failed.push(format!("{key}: {why}"));
                        break;
                    }
                }
            }
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_behind_haproxy_survive_losing_one() {
    let Some(haproxy) = haproxy() else { return };
    let skills = skillbox_e2e::testkit_skills();
    let skills_dir = skills.path().to_str().unwrap().to_string();
    let workspace = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();

    // The shared cache, filled ahead of time, then made read-only.
    let cache = state.path().join("cache");
    let compiled = skillbox_e2e::skillbox()
        .args(["compile", &skills_dir, "--cache", cache.to_str().unwrap()])
        .output()
        .expect("run skillbox compile");
    assert!(compiled.status.success(), "{compiled:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o500)).unwrap();
    }

    let audits: Vec<PathBuf> = (1..=3)
        .map(|n| state.path().join(format!("audit-{n}.jsonl")))
        .collect();
    let mut replicas: Vec<_> = audits
        .iter()
        .map(|audit| {
            serve_http(&[
                "--skills",
                &skills_dir,
                "--tools",
                "all",
                "--cache",
                cache.to_str().unwrap(),
                "--workspace",
                workspace.path().to_str().unwrap(),
                "--allow-write",
                "--audit",
                audit.to_str().unwrap(),
            ])
        })
        .collect();

    // Every replica starts ready from the shared cache, compiling nothing.
    for (_, url) in &replicas {
        let ready = reqwest::get(format!("{}/readyz", base_url(url)))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut body: Value = ready.json().await.unwrap();
        while body["status"] != "ready" {
            assert!(Instant::now() < deadline, "{body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            body = reqwest::get(format!("{}/readyz", base_url(url)))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        }
        assert_eq!(body["components"]["compiled_here"], 0, "{body}");
        assert!(
            body["components"]["from_cache"].as_u64().unwrap() >= 1,
            "{body}"
        );
    }

    let replica_urls: Vec<&str> = replicas.iter().map(|(_, url)| url.as_str()).collect();
    let (_balancer, lb) = balance(
        &haproxy,
        &skillbox_e2e::repo().join("deploy/haproxy/haproxy.cfg"),
        &replica_urls,
        state.path(),
    )
    .await;

    // A 2025-11-25 session through the balancer stays on its replica.
    {
        use rmcp::ServiceExt;
        let session = Recorder::default()
            .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
                lb.as_str(),
            ))
            .await
            .expect("initialize through the balancer");
        for _ in 0..6 {
            let result = skillbox_e2e::mcp::call(&session, "testkit__noop", json!({})).await;
            assert_eq!(result.structured_content.unwrap()["result"], 42);
        }
        let _ = session.cancel().await;
    }

    // The stream of calls, and one replica killed in the middle of it.
    let done = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(client(n, lb.clone(), done.clone())))
        .collect();
    let total = CLIENTS * CALLS_PER_CLIENT;
    let victim_url = replicas[1].1.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.load(Ordering::SeqCst) < total / 3 {
        assert!(Instant::now() < deadline, "the stream stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Kill it while it is running calls, so some are cut off.
    loop {
        let active = sample(
            &scrape(&victim_url, None).await,
            "skillbox_active_calls",
            &[],
        );
        if active.unwrap_or(0.0) >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the victim never had a call in flight"
        );
    }
    replicas[1].0.0.kill().expect("kill replica 2");
    let killed_at = done.load(Ordering::SeqCst);
    let survivors_before: Vec<usize> = [0, 2]
        .iter()
        .map(|&n| audit_lines(&audits[n]).len())
        .collect();

    let mut tally = Tally::default();
    for c in clients {
        let t = c.await.expect("client task");
        tally.reads_answered += t.reads_answered;
        tally.reads_retried.extend(t.reads_retried);
        tally.reads_failed.extend(t.reads_failed);
        tally.writes_ok.extend(t.writes_ok);
        tally.writes_unknown.extend(t.writes_unknown);
    }

    // Every write ran at most once, across all replicas' audit logs.
    let mut runs: HashMap<String, usize> = HashMap::new();
    let mut served = Vec::new();
    for audit in &audits {
        let lines = audit_lines(audit);
        served.push(lines.len());
        for line in lines {
            if let Some(key) = line["idempotency_key"].as_str()
                && line["outcome"] == "ok"
            {
                *runs.entry(key.to_string()).or_default() += 1;
            }
        }
    }
    eprintln!(
        "load balancer: {total} calls from {CLIENTS} clients; replica 2 killed after {killed_at}\n\
         calls served per replica (audit lines): {served:?}\n\
         reads answered {}, retried after a cut {}, failed {}\n\
         writes ok {}, cut off with outcome unknown {}: {:?}",
        tally.reads_answered,
        tally.reads_retried.len(),
        tally.reads_failed.len(),
        tally.writes_ok.len(),
        tally.writes_unknown.len(),
        tally.writes_unknown,
    );
    assert!(
        tally.reads_failed.is_empty(),
        "every read is answered: {:?}",
        tally.reads_failed
    );
    let reads = (0..CALLS_PER_CLIENT).filter(|i| i % 4 != 3).count() * CLIENTS;
    assert_eq!(tally.reads_answered, reads);
    for (key, n) in &runs {
        assert_eq!(*n, 1, "write {key} ran {n} times");
    }
    for key in &tally.writes_ok {
        assert_eq!(
            runs.get(key),
            Some(&1),
            "write {key} answered ok but not audited"
        );
    }
    assert_eq!(
        tally.writes_ok.len() + tally.writes_unknown.len(),
        (CALLS_PER_CLIENT / 4) * CLIENTS
    );
    // The killed replica's calls in flight were seen and reported.
    assert!(
        !tally.reads_retried.is_empty() || !tally.writes_unknown.is_empty(),
        "killing a replica with calls in flight cut none of them off"
    );
    // The survivors kept serving.
    for (i, &n) in [0, 2].iter().enumerate() {
        let after = audit_lines(&audits[n]).len();
        assert!(
            after > survivors_before[i],
            "replica {} served nothing after the kill",
            n + 1
        );
    }
}
