//! Replicas that share state through a real Redis (Debian's
//! `redis-server`, started here on a free port; CI installs it and sets
//! SKILLBOX_REQUIRE_REDIS, elsewhere the tests skip with a word): a
//! stateless approval asked through one replica is answered through
//! another and runs once, a replay through any replica is asked again, and
//! a replica whose store is down says so on `/readyz` and takes no
//! approval until the store is back; a task started on one replica is
//! read and cancelled through the others, and reads as failed on them
//! once its replica is killed; a commit a replica on another machine left
//! half-done is finished by the next replica to commit to the workspace.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, InputResponses,
    TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use skillbox_e2e::mcp::{
    Client, Recorder, base_url, connect_stateless, serve_http, serve_http_saying, stateless_call,
};
use skillbox_e2e::{testkit_skills, workspace};

use crate::mcp_confirm_tasks::{
    confirm_flags, sleep_call, testkit_flags, wait_terminal, write_call,
};
use crate::transactions::{TOOL, stager, stages_left, tree};

const PASSWORD: &str = "redis-test-pass-51c9e0";

/// A `redis-server` of its own, with a password, keeping nothing on disk;
/// killed (SIGKILL) when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start(port: u16) -> Redis {
        Self::start_with(port, &[])
    }

    /// A server with `extra` settings (`--name value` pairs).
    fn start_with(port: u16, extra: &[&str]) -> Redis {
        let mut child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--requirepass", PASSWORD])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut said = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            said.push_str(&line);
            said.push('\n');
            if line.contains("Ready to accept connections") {
                std::thread::spawn(move || for _ in lines {});
                return Redis { child, port };
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server stopped before it was ready:\n{said}");
    }
}

impl Redis {
    /// The `--state` address of this server.
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends one command, as anyone who can reach the store could, and
    /// returns the first line of the reply.
    fn command(&self, args: &[&[u8]]) -> String {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut reply = String::new();
        for command in [&[b"AUTH".as_slice(), PASSWORD.as_bytes()][..], args] {
            let mut request = format!("*{}\r\n", command.len()).into_bytes();
            for arg in command {
                request.extend(format!("${}\r\n", arg.len()).into_bytes());
                request.extend(*arg);
                request.extend(b"\r\n");
            }
            stream.write_all(&request).unwrap();
            reply.clear();
            reader.read_line(&mut reply).unwrap();
        }
        reply.trim().to_string()
    }
}

/// The store's password in a file in `dir`, as `--state-password-file`
/// takes it (with the newline an editor leaves).
fn password_file(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("redis-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    file
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis of its own for three replicas, with the store's password in
/// a file and an audit log for each replica, in `dir`.
struct Cluster {
    redis: Option<Redis>,
    dir: tempfile::TempDir,
    password_file: std::path::PathBuf,
    /// The `--state` address.
    state: String,
    audits: Vec<std::path::PathBuf>,
}

impl Cluster {
    /// `None` (the test skips) when redis-server is not installed.
    fn start() -> Option<Cluster> {
        if !redis_installed() {
            return None;
        }
        let redis = Redis::start(free_port());
        let dir = tempfile::tempdir().unwrap();
        Some(Cluster {
            password_file: password_file(dir.path()),
            state: redis.url(),
            audits: (0..3)
                .map(|i| dir.path().join(format!("audit-{i}.jsonl")))
                .collect(),
            dir,
            redis: Some(redis),
        })
    }
}

fn redis_installed() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("SKILLBOX_REQUIRE_REDIS").is_none(),
            "redis-server is not installed (apt-get install redis-server); CI requires it"
        );
        eprintln!(
            "SKIPPED: redis-server is not installed; `apt-get install redis-server` to run this test"
        );
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A replica's flags: the confirmed testkit over `ws`, its own audit log,
/// the state in `redis` with the password from a file.
fn replica_flags<'a>(
    kit: &'a Path,
    ws: &'a Path,
    audit: &'a Path,
    state: &'a str,
    password_file: &'a Path,
) -> Vec<&'a str> {
    let mut flags = confirm_flags(kit, ws, audit);
    flags.extend([
        "--state",
        state,
        "--state-password-file",
        password_file.to_str().unwrap(),
    ]);
    flags
}

/// `/readyz` of the replica at `url`, once it answers `status`.
async fn readyz_until(url: &str, status: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let http = reqwest::Client::new();
    loop {
        let response = http
            .get(format!("{}/readyz", base_url(url)))
            .send()
            .await
            .expect("GET /readyz");
        if response.status() == status {
            return response.json().await.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never answered {status}: {}",
            response.text().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The writes an audit log says reached the workspace.
fn commits(audit: &Path) -> usize {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    records
        .iter()
        .filter(|r| {
            r["tool"] == "testkit__write-file"
                && r["workspace"]["outcome"] == "committed"
                && r["workspace"]["files"].as_u64() > Some(0)
        })
        .count()
}

/// The write of `contents`, answering the question sealed in `state` yes.
fn answered(contents: &str, state: &str) -> CallToolRequestParams {
    let mut yes = InputResponses::new();
    yes.insert(
        "confirm".into(),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let mut call = write_call(contents);
    call.input_responses = Some(yes);
    call.request_state = Some(state.to_owned());
    call
}

/// Asks for the write of `contents` through `client`; returns the sealed
/// state of the question it gets.
async fn asked(client: &Client, contents: &str) -> String {
    match client.call_tool_once(write_call(contents)).await.unwrap() {
        CallToolResponse::InputRequired(asked) => asked.request_state.expect("a request state"),
        other => panic!("a confirmed call must ask first: {other:?}"),
    }
}

async fn is_asked_again(client: &Client, call: CallToolRequestParams) {
    let reply = client.call_tool_once(call).await.unwrap();
    assert!(
        matches!(reply, CallToolResponse::InputRequired(_)),
        "an approval was taken where it must be asked again: {reply:?}"
    );
}

#[tokio::test]
async fn an_approval_answered_through_another_replica_runs_once_and_a_replay_is_asked_again() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (password_file, state, audits) = (&cluster.password_file, &cluster.state, &cluster.audits);
    let kit = testkit_skills();
    let ws = workspace(&[]);
    let out = ws.path().join("out.txt");
    let replicas: Vec<_> = audits
        .iter()
        .map(|audit| {
            serve_http(&replica_flags(
                kit.path(),
                ws.path(),
                audit,
                state,
                password_file,
            ))
        })
        .collect();
    let urls: Vec<&str> = replicas.iter().map(|(_, url)| url.as_str()).collect();
    for url in &urls {
        let ready = readyz_until(url, 200).await;
        assert_eq!(ready["state"], json!({"store": "redis", "reachable": true}));
        assert!(!ready.to_string().contains(PASSWORD));
    }

    // Asked through the first replica, answered through the second.
    let first = connect_stateless(Recorder::answering(true), urls[0]).await;
    let sealed = asked(&first, "across replicas").await;
    let second = connect_stateless(Recorder::answering(true), urls[1]).await;
    let CallToolResponse::Complete(done) = second
        .call_tool_once(answered("across replicas", &sealed))
        .await
        .unwrap()
    else {
        panic!("the approval did not count on another replica")
    };
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "across replicas");

    // The same answer again, with the file gone so the replay would stage
    // the very diff that was approved: through the third replica and
    // through the one that asked (which still holds the call it ran
    // staged), the spent approval is refused and nothing is written.
    std::fs::remove_file(&out).unwrap();
    let third = connect_stateless(Recorder::answering(true), urls[2]).await;
    is_asked_again(&third, answered("across replicas", &sealed)).await;
    is_asked_again(&first, answered("across replicas", &sealed)).await;
    assert!(!out.exists(), "a spent approval wrote again");

    // One answer sent to two replicas at once is spent once. The other
    // replica asks again, or, if the first committed before it staged its
    // run, finds nothing to change and needs no answer: either way one
    // commit writes (counted below).
    let sealed = asked(&first, "at once").await;
    let (a, b) = tokio::join!(
        second.call_tool_once(answered("at once", &sealed)),
        third.call_tool_once(answered("at once", &sealed)),
    );
    let completed = [a.unwrap(), b.unwrap()]
        .iter()
        .filter(|reply| matches!(reply, CallToolResponse::Complete(_)))
        .count();
    assert!(completed >= 1, "the approval ran no call");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "at once");

    // Each replica audits its staged runs and its answers; one write
    // reached the workspace, through the replica the answer reached.
    let committed: usize = audits.iter().map(|audit| commits(audit)).sum();
    assert_eq!(commits(&audits[0]), 0, "the replica that asked committed");
    assert_eq!(committed, 2, "two approvals, two commits");
    for client in [first, second, third] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_replica_whose_store_is_down_is_not_ready_and_takes_no_approval_until_it_is_back() {
    if !redis_installed() {
        return;
    }
    let port = free_port();
    let redis = Redis::start(port);
    let dir = tempfile::tempdir().unwrap();
    let password_file = password_file(dir.path());
    let state = redis.url();
    let kit = testkit_skills();
    let ws = workspace(&[]);
    let out = ws.path().join("out.txt");
    let audit = dir.path().join("audit.jsonl");
    let (_replica, url) = serve_http(&replica_flags(
        kit.path(),
        ws.path(),
        &audit,
        &state,
        &password_file,
    ));
    readyz_until(&url, 200).await;
    let client = connect_stateless(Recorder::answering(true), &url).await;
    let sealed = asked(&client, "while down").await;

    drop(redis);
    let down = readyz_until(&url, 503).await;
    assert_eq!(down["status"], "state store unreachable", "{down}");
    assert_eq!(down["state"]["reachable"], false);
    assert!(down["hint"].as_str().unwrap().contains("Redis"), "{down}");
    let text = down.to_string();
    assert!(
        !text.contains(PASSWORD) && !text.contains(&port.to_string()),
        "{text}"
    );
    // An approval that cannot be recorded as spent is not taken.
    is_asked_again(&client, answered("while down", &sealed)).await;
    assert!(!out.exists(), "an approval was taken with the store down");

    // Back, but empty (nothing was kept on disk): the replica is ready
    // again under a fresh key, so the answer sealed before, whose spending
    // the store forgot, still cannot be spent; a new question can.
    let _redis = Redis::start(port);
    readyz_until(&url, 200).await;
    is_asked_again(&client, answered("while down", &sealed)).await;
    assert!(!out.exists());
    let sealed = asked(&client, "after").await;
    let CallToolResponse::Complete(done) = client
        .call_tool_once(answered("after", &sealed))
        .await
        .unwrap()
    else {
        panic!("a fresh approval did not count once the store was back")
    };
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "after");
    client.cancel().await.unwrap();
}

/// A `--state` that cannot be used stops the server before it serves,
/// saying why, and never prints a password.
#[test]
fn a_state_store_that_cannot_be_used_is_refused_at_start() {
    let port = free_port().to_string();
    let unreachable = format!("redis://127.0.0.1:{port}");
    let with_password = format!("redis://:hunter2-secret@127.0.0.1:{port}");
    for (state, code, says) in [
        ("localhost", 2, "not a Redis address"),
        (with_password.as_str(), 2, "carries a password"),
        (unreachable.as_str(), 1, "cannot be used"),
    ] {
        let run = skillbox_e2e::run(&["serve", "--http", "127.0.0.1:0", "--state", state]);
        assert_eq!(run.code, code, "{state}: {run:?}");
        run.stderr_says(&[says]);
        assert!(!run.stderr.contains("hunter2"), "{}", run.stderr);
    }
    let run = skillbox_e2e::run(&["serve", "--state", &unreachable]);
    assert_eq!(run.code, 2, "{run:?}");
    run.stderr_says(&["--http"]);
}

/// A store that may evict keys under memory pressure would drop spent
/// approvals before the key: a replica refuses it at start.
#[test]
fn a_store_that_evicts_keys_is_refused_at_start() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start_with(free_port(), &["--maxmemory-policy", "allkeys-lru"]);
    let dir = tempfile::tempdir().unwrap();
    let password_file = password_file(dir.path());
    let state = redis.url();
    let run = skillbox_e2e::run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--state",
        &state,
        "--state-password-file",
        password_file.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    run.stderr_says(&["allkeys-lru", "noeviction"]);
    assert!(!run.stderr.contains(PASSWORD), "{}", run.stderr);
}

/// The tool calls an audit log records, by tool.
fn calls_of(audit: &Path, tool: &str) -> usize {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["tool"] == tool)
        .count()
}

/// A 2025-11-25 client of the official Python SDK, behind HAProxy
/// round-robin with no stick table: its session, the skill it loads and
/// its calls are answered by whichever replica each request reaches.
#[tokio::test]
async fn a_session_is_answered_by_every_replica_behind_a_balancer_with_no_stickiness() {
    if !skillbox_e2e::python_sdk() {
        return;
    }
    let Some(haproxy) = crate::load_balancer::haproxy() else {
        return;
    };
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (dir, password_file, state, audits) = (
        cluster.dir.path(),
        &cluster.password_file,
        &cluster.state,
        &cluster.audits,
    );
    let kit = testkit_skills();
    // Tools are listed only once their skill is loaded (the default), so
    // a replica that did not see load_skill must learn it from the store.
    let replicas: Vec<_> = audits
        .iter()
        .map(|audit| {
            serve_http(&[
                "--skills",
                kit.path().to_str().unwrap(),
                "--skill",
                "testkit",
                "--audit",
                audit.to_str().unwrap(),
                "--state",
                state,
                "--state-password-file",
                password_file.to_str().unwrap(),
            ])
        })
        .collect();
    let urls: Vec<&str> = replicas.iter().map(|(_, url)| url.as_str()).collect();
    for url in &urls {
        readyz_until(url, 200).await;
    }
    let (_balancer, lb) = crate::load_balancer::balance(
        &haproxy,
        &skillbox_e2e::repo().join("deploy/haproxy/haproxy-shared-state.cfg"),
        &urls,
        dir,
    )
    .await;

    let out = tokio::process::Command::new("python3")
        .arg(skillbox_e2e::repo().join("tests/support/python/session_client.py"))
        .args([lb.as_str(), "testkit", "testkit__noop", "{}", "6"])
        .envs(skillbox_e2e::hermetic_env())
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(said.trim()).unwrap();
    assert_eq!(report["protocol"], "2025-11-25", "{report}");
    assert_eq!(report["loaded"], true, "{report}");
    let listed = |when: &str| {
        report[when]
            .as_array()
            .unwrap()
            .contains(&json!("testkit__noop"))
    };
    assert!(!listed("before") && listed("after"), "{report}");
    for call in report["calls"].as_array().unwrap() {
        assert_eq!(call["is_error"], false, "{report}");
    }
    // The calls were answered by more than one replica, none of which
    // needed the balancer to send a session back to where it started.
    let served: Vec<usize> = audits
        .iter()
        .map(|a| calls_of(a, "testkit__noop"))
        .collect();
    assert_eq!(served.iter().sum::<usize>(), 6, "{served:?}");
    assert!(
        served.iter().filter(|n| **n > 0).count() >= 2,
        "every call reached one replica: {served:?}"
    );
}

/// A long call that becomes a task on one replica: the others read it
/// while it runs and once it is done, cancel another through a third, and
/// once its replica is killed (SIGKILL, nothing said to anyone) the others
/// read its task as failed, the same on each.
#[tokio::test]
async fn a_task_is_read_and_cancelled_through_every_replica_and_fails_when_its_replica_dies() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (password_file, state, audits) = (&cluster.password_file, &cluster.state, &cluster.audits);
    let kit = testkit_skills();
    let mut replicas: Vec<_> = audits
        .iter()
        .map(|audit| {
            let mut flags = testkit_flags(kit.path());
            flags.extend([
                "--task-after-ms",
                "200",
                "--timeout-ms",
                "60000",
                "--audit",
                audit.to_str().unwrap(),
                "--state",
                state,
                "--state-password-file",
                password_file.to_str().unwrap(),
            ]);
            serve_http(&flags)
        })
        .collect();
    let mut clients = Vec::new();
    for (_, url) in &replicas {
        readyz_until(url, 200).await;
        let tasks = Recorder {
            tasks: true,
            ..Default::default()
        };
        clients.push(connect_stateless(tasks, url).await);
    }
    let get = |client: usize, id: &str| {
        let (peer, id) = (clients[client].peer().clone(), id.to_owned());
        async move { peer.get_task(GetTaskParams::new(id)).await.map(|r| r.task) }
    };

    // Started on replica 0, known to replica 2 at once, and its result
    // read through replica 1.
    let CallToolResponse::Task(created) =
        clients[0].call_tool_once(sleep_call(1500)).await.unwrap()
    else {
        panic!("a long call becomes a task")
    };
    let id = created.task.task_id;
    get(2, &id)
        .await
        .expect("replica 2 knows the task as soon as it exists");
    let done = wait_terminal(&clients[1], &id).await;
    let TaskPayload::Completed { result } = &done.payload else {
        panic!("the task completes, read through another replica: {done:?}")
    };
    assert_ne!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "{result:?}"
    );
    assert_eq!(get(2, &id).await.unwrap(), done);

    // Cancelled through replica 2, which does not run it: replica 0 stops
    // the call, and every replica reads it cancelled.
    // A spinning call on replica 0, which becomes a task: its id.
    let spin = || async {
        match clients[0]
            .call_tool_once(CallToolRequestParams::new("testkit__spin"))
            .await
            .unwrap()
        {
            CallToolResponse::Task(created) => created.task.task_id,
            other => panic!("a spinning call becomes a task: {other:?}"),
        }
    };
    let spin_id = spin().await;
    assert_eq!(
        get(1, &spin_id).await.unwrap().status(),
        TaskStatus::Working
    );
    clients[2]
        .peer()
        .cancel_task(CancelTaskParams::new(spin_id.clone()))
        .await
        .expect("tasks/cancel through another replica");
    assert_eq!(
        wait_terminal(&clients[1], &spin_id).await.status(),
        TaskStatus::Cancelled
    );
    // The owner records its own end just after it shares it.
    assert_eq!(
        wait_terminal(&clients[0], &spin_id).await.status(),
        TaskStatus::Cancelled
    );
    assert_eq!(
        calls_of(&audits[0], "testkit__spin"),
        1,
        "the owner stopped the call"
    );

    // Replica 0 freezes (SIGSTOP) past the lease while a task runs on it:
    // the others report the task failed; once it runs again it finds the
    // task settled, stops the call and reports the same failure.
    let frozen_id = spin().await;
    // An id no replica handed out, and one naming another key of the
    // store (the task's lease), are unknown everywhere.
    for id in [
        "0b6c8f1e-5d1a-4f0e-9a51-3f1c9f0b7e21".to_owned(),
        format!("{frozen_id}:alive"),
    ] {
        let unknown = get(1, &id).await.expect_err("an unknown task");
        assert!(unknown.to_string().contains("unknown task"), "{unknown}");
    }
    let owner_pid = replicas[0].0.0.id().to_string();
    let signal = |which: &str| {
        let sent = Command::new("kill").args([which, &owner_pid]).status();
        assert!(sent.unwrap().success(), "kill {which}");
    };
    signal("-STOP");
    let failed = settled_within_a_minute(&clients[1], &frozen_id).await;
    signal("-CONT");
    let owner_says = settled_within_a_minute(&clients[0], &frozen_id).await;
    assert_eq!(owner_says.payload, failed.payload, "the owner agrees");
    assert_eq!(
        calls_of(&audits[0], "testkit__spin"),
        2,
        "the owner stopped the call"
    );

    // Replica 0 is killed while a task runs on it.
    let orphan_id = spin().await;
    assert_eq!(
        get(1, &orphan_id).await.unwrap().status(),
        TaskStatus::Working
    );
    let (mut owner, _) = replicas.remove(0);
    owner.0.kill().unwrap();
    owner.0.wait().unwrap();
    let failed = settled_within_a_minute(&clients[1], &orphan_id).await;
    assert_eq!(
        get(2, &orphan_id).await.unwrap(),
        failed,
        "every replica reads the same"
    );
}

/// Task `id`, read through `client` once a replica settled it as failed
/// because its own replica stopped renewing it. The lease is 10 s; a
/// minute means it was never settled.
async fn settled_within_a_minute(client: &Client, id: &str) -> rmcp::model::DetailedTask {
    let task = tokio::time::timeout(Duration::from_secs(60), wait_terminal(client, id))
        .await
        .expect("the task of a replica that stopped is settled once its lease runs out");
    let TaskPayload::Failed { error } = &task.payload else {
        panic!("the task of a replica that stopped fails: {task:?}")
    };
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("lost the state store") && message.contains("check"),
        "{message}"
    );
    task
}

/// The first line from `lines` that contains `what`, waiting up to a
/// minute for it.
fn said(lines: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(what) => return line,
            Ok(_) => {}
            Err(_) => panic!("the replica did not say {what:?} within a minute"),
        }
    }
}

/// The stager's steps, called through the replica at `url`.
async fn run(http: &reqwest::Client, url: &str, steps: &[&str]) -> Value {
    stateless_call(http, url, TOOL, json!({ "steps": steps }), json!({}))
        .await
        .expect("the replica answered")
}

/// The text of a `tools/call` result.
fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replicas on two machines (here: two state folders, so no lock file is
/// shared) write one workspace. Replica 0 is killed part-way through a
/// commit, holding the workspace's turn: replica 1's commit waits for the
/// turn, finishes replica 0's commit first, and then finds that its own
/// call's file changed meanwhile, and writes nothing. With the store down
/// a commit is refused, says why, and writes nothing.
#[tokio::test]
async fn a_commit_a_replica_on_another_machine_left_half_done_is_finished_before_the_next() {
    let Some(mut cluster) = Cluster::start() else {
        return;
    };
    let kit = stager();
    let ws = workspace(&[("a.txt", "alpha\n")]);
    let machines = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let start = |i: usize, pause: Option<&str>| {
        let mut env = vec![("SKILLBOX_STATE_DIR", machines[i].path().to_str().unwrap())];
        env.extend(pause.map(|at| ("SKILLBOX_TEST_PAUSE_AT", at)));
        serve_http_saying(
            &[
                "--tools",
                "all",
                "--skills",
                kit.path().to_str().unwrap(),
                "--workspace",
                ws.path().to_str().unwrap(),
                "--allow-write",
                "--shared-workspace",
                "repo",
                "--audit",
                cluster.audits[i].to_str().unwrap(),
                "--state",
                &cluster.state,
                "--state-password-file",
                cluster.password_file.to_str().unwrap(),
            ],
            &env,
        )
    };
    let (mut first, first_url, first_says) = start(0, Some("commit-mid"));
    let (_second, second_url, second_says) = start(1, None);
    let http = reqwest::Client::new();
    let steps = |steps: &[&str]| json!({ "steps": steps });

    let stuck = tokio::spawn({
        let (http, url) = (http.clone(), first_url.clone());
        let args = steps(&["write /workspace/a.txt zero", "write /workspace/b.txt zero"]);
        async move { stateless_call(&http, &url, TOOL, args, json!({})).await }
    });
    tokio::task::spawn_blocking(move || said(&first_says, "paused at commit-mid"))
        .await
        .unwrap();
    let half = tree(ws.path());
    assert_eq!(
        half["a.txt"],
        Some(b"zero".to_vec()),
        "the first change is in"
    );
    assert!(!half.contains_key("b.txt"), "the second is not");

    // Replica 1's call stages b.txt where there is none yet; its commit
    // waits for the turn replica 0 holds until its lease runs out.
    let second_call = tokio::spawn({
        let (http, url) = (http.clone(), second_url.clone());
        let args = steps(&["write /workspace/b.txt one", "write /workspace/c.txt one"]);
        async move { stateless_call(&http, &url, TOOL, args, json!({})).await }
    });
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert!(
        stuck.await.unwrap().is_err(),
        "replica 0 answered after its kill"
    );
    let refused = second_call.await.unwrap().expect("replica 1 answered");
    assert_eq!(refused["isError"], true, "{refused}");
    let text = result_text(&refused);
    assert!(
        text.contains("`b.txt` changed while the call ran; nothing was written"),
        "{text}"
    );
    let after = tree(ws.path());
    assert_eq!(after["a.txt"], Some(b"zero".to_vec()));
    assert_eq!(
        after["b.txt"],
        Some(b"zero".to_vec()),
        "replica 0's commit was finished"
    );
    assert!(
        !after.contains_key("c.txt"),
        "replica 1's refused call wrote"
    );
    assert!(
        !after.keys().any(|k| k.contains(".skillbox-commit")),
        "{:?}",
        after.keys()
    );

    // Replica 0's machine, started again, finds the stage of the commit
    // it was killed in, whose journal the store held: it drops it without
    // calling the call undone, which it was not.
    assert_eq!(stages_left(machines[0].path()), 1);
    let restart = skillbox_e2e::skillbox()
        .args(["call", TOOL, "--skills"])
        .arg(kit.path())
        .arg("--workspace")
        .arg(ws.path())
        .args(["--args", &json!({"steps": ["list /workspace"]}).to_string()])
        .env("SKILLBOX_STATE_DIR", machines[0].path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&restart.stderr);
    assert!(restart.status.success(), "{stderr}");
    assert!(!stderr.contains("discarded"), "{stderr}");
    assert_eq!(stages_left(machines[0].path()), 0);

    // The next call commits, and there is nothing left to finish.
    let done = run(&http, &second_url, &["write /workspace/c.txt two"]).await;
    assert_ne!(done["isError"], true, "{done}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("c.txt")).unwrap(),
        "two"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
        "zero"
    );

    // A journal forged in the store (anyone who can write it could) is
    // judged like one found in a state folder: a path out of the
    // workspace, or a link that leads out, is never written; the journal
    // is set aside and the call's own commit goes on.
    let real = std::fs::canonicalize(ws.path()).unwrap();
    let journal_key = "skillbox:commit:repo:journal";
    let redis = cluster.redis.as_ref().unwrap();
    let forgeries = [
        (
            json!({"version": 1, "id": "f0", "ops": [
                {"op": "write", "path": "../outside.txt"},
                {"op": "write", "path": "e.txt"},
            ]}),
            "its journal names `../outside.txt`, which no commit writes",
        ),
        (
            json!({"version": 1, "id": "f0", "ops": [{"op": "link", "path": "esc"}],
                   "links": {"esc": "../../../../../../etc/passwd"}}),
            "refused to link `esc",
        ),
        (
            // The id names the temporary file next to each change.
            json!({"version": 1, "id": "x/../.claude/skills/evil", "ops": [
                {"op": "make-dir", "path": ".skillbox-commit-x"},
                {"op": "write", "path": "e.txt"},
            ]}),
            "its journal's id is not one this host makes",
        ),
    ];
    for (n, (journal, why)) in forgeries.iter().enumerate() {
        let journal = journal.to_string();
        let planted = redis.command(&[
            b"HSET",
            journal_key.as_bytes(),
            b"journal",
            journal.as_bytes(),
            b"file:0",
            b"pwned",
            b"file:1",
            b"e",
        ]);
        assert!(planted.starts_with(':'), "{planted}");
        let file = format!("write /workspace/f{n}.txt ok");
        let mine = run(&http, &second_url, &[&file]).await;
        assert_ne!(mine["isError"], true, "{mine}");
        let line = said(&second_says, "could not finish a workspace commit");
        assert!(line.contains(why), "{line}");
        assert!(!real.parent().unwrap().join("outside.txt").exists());
        assert!(!ws.path().join("e.txt").exists());
        assert!(std::fs::symlink_metadata(ws.path().join("esc")).is_err());
        assert!(!ws.path().join(".claude").exists());
        assert_eq!(redis.command(&[b"EXISTS", journal_key.as_bytes()]), ":0");
    }

    // A journal of another version is left for a replica that can read
    // it, and the call writes nothing meanwhile.
    let newer = json!({"version": 99, "id": "f1", "ops": []}).to_string();
    redis.command(&[
        b"HSET",
        journal_key.as_bytes(),
        b"journal",
        newer.as_bytes(),
    ]);
    let later = run(&http, &second_url, &["write /workspace/g.txt x"]).await;
    assert_eq!(later["isError"], true, "{later}");
    assert!(result_text(&later).contains("another version"), "{later}");
    assert!(!ws.path().join("g.txt").exists());
    assert_eq!(redis.command(&[b"EXISTS", journal_key.as_bytes()]), ":1");
    redis.command(&[b"DEL", journal_key.as_bytes()]);

    // No store, no turn: the commit is refused and writes nothing, and
    // the replica still answers calls that change nothing.
    drop(cluster.redis.take());
    let down = run(&http, &second_url, &["write /workspace/d.txt x"]).await;
    assert_eq!(down["isError"], true, "{down}");
    let text = result_text(&down);
    assert!(
        text.contains("shared state store cannot be reached")
            && text.contains("nothing was written"),
        "{text}"
    );
    assert!(!text.contains(&cluster.state), "{text}");
    assert!(!ws.path().join("d.txt").exists());
    let read = run(&http, &second_url, &["read /workspace/c.txt"]).await;
    assert_ne!(read["isError"], true, "{read}");
}
