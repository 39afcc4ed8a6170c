//! Confirmation before calls that change things, and long calls as tasks,
//! end to end: the real binary, rmcp's client, over stdio (a 2025-11-25
//! session: elicitation) and over HTTP (the stateless 2026-07-28 revision:
//! an `input_required` result the client answers by calling again).

use std::path::Path;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, InputResponses,
    TaskPayload, TaskStatus,
};
use serde_json::{Map, Value, json};
use skillbox_e2e::mcp::{
    Client, Recorder, assert_says, assert_tool_error, connect_stateless, connect_stdio_as, text,
};
use skillbox_e2e::{testkit_skills, workspace};

fn args(value: Value) -> Map<String, Value> {
    let Value::Object(map) = value else {
        panic!("arguments are an object")
    };
    map
}

pub(crate) fn write_call(contents: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("testkit__write-file").with_arguments(args(
        json!({"path": "/workspace/out.txt", "contents": contents}),
    ))
}

/// The flags of a server over the testkit with a writable workspace, where
/// every write is confirmed.
pub(crate) fn confirm_flags<'a>(kit: &'a Path, ws: &'a Path, audit: &'a Path) -> Vec<&'a str> {
    let mut flags = testkit_flags(kit);
    flags.extend([
        "--workspace",
        ws.to_str().unwrap(),
        "--allow-write",
        "--confirm",
        "write",
        "--audit",
        audit.to_str().unwrap(),
    ]);
    flags
}

/// Serve only the testkit, every tool listed up front.
pub(crate) fn testkit_flags(kit: &Path) -> Vec<&str> {
    vec![
        "--skills",
        kit.to_str().unwrap(),
        "--skill",
        "testkit",
        "--tools",
        "all",
    ]
}

fn audit_outcomes(audit: &Path) -> Vec<String> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["tool"] == "testkit__write-file")
        .map(|r| r["outcome"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn call(client: &Client, params: CallToolRequestParams) -> rmcp::model::CallToolResult {
    client.call_tool(params).await.expect("tools/call")
}

#[tokio::test]
async fn a_session_client_is_asked_and_only_a_yes_runs_the_call() {
    let kit = testkit_skills();
    let ws = workspace(&[]);
    let audit = tempfile::tempdir().unwrap();
    let audit = audit.path().join("audit.jsonl");
    let flags = confirm_flags(kit.path(), ws.path(), &audit);
    let out = ws.path().join("out.txt");

    // A client that says no: the user saw the tool, its arguments and its
    // grants; nothing is written.
    let (client, recorder) = connect_stdio_as(Recorder::answering(false), &flags).await;
    let declined = call(&client, write_call("no")).await;
    assert_tool_error(&declined, &["declined"]);
    let questions = recorder.questions();
    assert_eq!(questions.len(), 1, "{questions:?}");
    for shown in [
        "testkit__write-file",
        "\"contents\":\"no\"",
        "/workspace (read-write)",
    ] {
        assert!(
            questions[0].contains(shown),
            "{shown} not in {}",
            questions[0]
        );
    }
    assert!(!out.exists(), "a declined call wrote");
    client.cancel().await.unwrap();

    // A client that cannot be asked: a teaching error, nothing written.
    let (client, _) = connect_stdio_as(Recorder::default(), &flags).await;
    let refused = call(&client, write_call("unasked")).await;
    assert_eq!(refused.is_error, Some(true));
    let message = text(&refused);
    assert!(
        message.contains("cannot ask the user") && message.contains("--confirm"),
        "{message}"
    );
    assert!(!out.exists(), "an unconfirmed call wrote");
    // A read tool is never asked about.
    let noop = call(&client, CallToolRequestParams::new("testkit__noop")).await;
    assert_ne!(noop.is_error, Some(true), "{}", text(&noop));
    client.cancel().await.unwrap();

    // A client that says yes: the call runs.
    let (client, recorder) = connect_stdio_as(Recorder::answering(true), &flags).await;
    let done = call(&client, write_call("yes")).await;
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    assert_eq!(recorder.questions().len(), 1);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "yes");
    client.cancel().await.unwrap();

    // A write whose only effects are in the workspace runs staged before
    // the question (so the question shows its diff): each call is its
    // staged run, then the answer.
    assert_eq!(
        audit_outcomes(&audit),
        ["ok", "declined", "ok", "unconfirmed", "ok", "ok"],
        "every answer is audited"
    );
}

#[tokio::test]
async fn a_stateless_client_answers_an_input_required_round() {
    let kit = testkit_skills();
    let ws = workspace(&[]);
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.jsonl");
    let flags = confirm_flags(kit.path(), ws.path(), &audit);
    let (_server, url) = skillbox_e2e::mcp::serve_http(&flags);
    let out = ws.path().join("out.txt");

    // One round by hand: the server answers with a question and a sealed
    // state, and runs nothing.
    let client = connect_stateless(Recorder::answering(true), &url).await;
    let CallToolResponse::InputRequired(asked) =
        client.call_tool_once(write_call("by hand")).await.unwrap()
    else {
        panic!("a confirmed call must ask first")
    };
    let state = asked.request_state.clone().expect("a request state");
    let requests = asked.input_requests.clone().expect("input requests");
    let question = serde_json::to_value(&requests["confirm"]).unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert!(!out.exists());

    let mut yes = InputResponses::new();
    yes.insert(
        "confirm".into(),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    // The approval cannot be spent on other arguments, nor with a forged
    // state: the server asks again and nothing runs.
    let mut other = write_call("something else");
    other.input_responses = Some(yes.clone());
    other.request_state = Some(state.clone());
    let mut forged = write_call("by hand");
    forged.input_responses = Some(yes.clone());
    forged.request_state = Some(format!("{}x", state));
    for attempt in [other, forged] {
        let reply = client.call_tool_once(attempt).await.unwrap();
        assert!(
            matches!(reply, CallToolResponse::InputRequired(_)),
            "{reply:?}"
        );
        assert!(!out.exists(), "an unapproved call wrote");
    }
    // The answer to the question asked runs the call.
    let mut answered = write_call("by hand");
    answered.input_responses = Some(yes);
    answered.request_state = Some(state);
    let CallToolResponse::Complete(done) = client.call_tool_once(answered).await.unwrap() else {
        panic!("an approved call completes")
    };
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "by hand");

    // rmcp's own client drives the round through its handler.
    let done = call(&client, write_call("by the client")).await;
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "by the client");
    client.cancel().await.unwrap();

    let client = connect_stateless(Recorder::answering(false), &url).await;
    let declined = call(&client, write_call("declined")).await;
    assert_says(&declined, &["declined"]);
    client.cancel().await.unwrap();
    let client = connect_stateless(Recorder::default(), &url).await;
    let refused = call(&client, write_call("unasked")).await;
    assert!(text(&refused).contains("cannot ask the user"));
    client.cancel().await.unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "by the client");
}

/// Polls a task until it is terminal.
pub(crate) async fn wait_terminal(client: &Client, id: &str) -> rmcp::model::DetailedTask {
    loop {
        let task = client
            .peer()
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get")
            .task;
        if task.status().is_terminal() {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn sleep_call(ms: u64) -> CallToolRequestParams {
    CallToolRequestParams::new("testkit__sleep-ms").with_arguments(args(json!({"ms": ms})))
}

fn kit_flags(kit: &Path) -> Vec<&str> {
    let mut flags = testkit_flags(kit);
    flags.extend([
        "--task-after-ms",
        "200",
        "--task-ttl-secs",
        "1",
        "--timeout-ms",
        "3000",
    ]);
    flags
}

/// A long call becomes a task; the task completes with the call's result;
/// another is cancelled; results expire after the TTL; a quick call and a
/// client without the extension get plain results.
async fn exercise_tasks(client: &Client, plain: &Client) {
    let CallToolResponse::Task(created) = client.call_tool_once(sleep_call(1500)).await.unwrap()
    else {
        panic!("a long call becomes a task")
    };
    let id = created.task.task_id.clone();
    // The call's limit (3 s) plus the result's retention (1 s).
    assert_eq!(created.task.ttl_ms, Some(4000));
    let done = wait_terminal(client, &id).await;
    let TaskPayload::Completed { result } = &done.payload else {
        panic!("the task completes: {done:?}")
    };
    assert_ne!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "{result:?}"
    );

    let CallToolResponse::Task(spinning) = client
        .call_tool_once(CallToolRequestParams::new("testkit__spin"))
        .await
        .unwrap()
    else {
        panic!("a spinning call becomes a task")
    };
    let spin_id = spinning.task.task_id.clone();
    client
        .peer()
        .cancel_task(CancelTaskParams::new(spin_id.clone()))
        .await
        .unwrap();
    assert_eq!(
        wait_terminal(client, &spin_id).await.status(),
        TaskStatus::Cancelled
    );

    // The result expires: the task is forgotten within a few TTLs.
    let mut forgotten = false;
    for _ in 0..200 {
        if client
            .peer()
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .is_err()
        {
            forgotten = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(forgotten, "the task outlived its TTL");

    let quick = client
        .call_tool_once(CallToolRequestParams::new("testkit__noop"))
        .await
        .unwrap();
    assert!(matches!(quick, CallToolResponse::Complete(_)), "{quick:?}");
    let long = plain.call_tool_once(sleep_call(400)).await.unwrap();
    assert!(matches!(long, CallToolResponse::Complete(_)), "{long:?}");
}

#[tokio::test]
async fn long_calls_become_tasks_over_stdio() {
    let kit = testkit_skills();
    let flags = kit_flags(kit.path());
    let tasks = Recorder {
        tasks: true,
        ..Recorder::default()
    };
    let mut flags = flags;
    flags.push("--no-audit");
    let (client, _) = connect_stdio_as(tasks, &flags).await;
    let (plain, _) = connect_stdio_as(Recorder::default(), &flags).await;
    exercise_tasks(&client, &plain).await;
    client.cancel().await.unwrap();
    plain.cancel().await.unwrap();
}

#[tokio::test]
async fn long_calls_become_tasks_over_stateless_http() {
    let kit = testkit_skills();
    let (_server, url) = skillbox_e2e::mcp::serve_http(&kit_flags(kit.path()));
    let tasks = Recorder {
        tasks: true,
        ..Recorder::default()
    };
    let client = connect_stateless(tasks, &url).await;
    let plain = connect_stateless(Recorder::default(), &url).await;
    exercise_tasks(&client, &plain).await;
    // Without the extension declared, tasks/get is refused (-32021).
    let refused = plain.peer().get_task(GetTaskParams::new("any")).await;
    assert!(refused.is_err());
    client.cancel().await.unwrap();
    plain.cancel().await.unwrap();
}

#[tokio::test]
async fn scripts_are_confirmed_under_the_write_policy() {
    let project = skillbox_e2e::repo().join("examples/release-project");
    let flags = [
        "--no-audit",
        "--tools",
        "all",
        "--workspace",
        project.to_str().unwrap(),
        "--confirm",
        "write",
    ];
    let script = CallToolRequestParams::new("run_script").with_arguments(args(json!({
        "skill": "release-check", "script": "release-check", "args": ["src/main.rs"]
    })));
    let (client, recorder) = connect_stdio_as(Recorder::answering(true), &flags).await;
    let ran = call(&client, script.clone()).await;
    assert!(text(&ran).starts_with("exit code 1"), "{}", text(&ran));
    let questions = recorder.questions();
    assert!(
        questions.len() == 1
            && questions[0].contains("run_script release-check/release-check")
            && questions[0].contains("src/main.rs"),
        "{questions:?}"
    );
    client.cancel().await.unwrap();
    // The default policy (destructive) does not ask about scripts.
    let (client, recorder) = connect_stdio_as(Recorder::answering(false), &flags[..5]).await;
    let ran = call(&client, script).await;
    assert!(text(&ran).starts_with("exit code 1"), "{}", text(&ran));
    assert!(recorder.questions().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn past_the_task_cap_long_calls_finish_in_their_request() {
    let kit = testkit_skills();
    let mut flags = kit_flags(kit.path());
    flags.extend(["--no-audit", "--max-tasks", "1"]);
    let tasks = Recorder {
        tasks: true,
        ..Recorder::default()
    };
    let (client, _) = connect_stdio_as(tasks, &flags).await;
    let CallToolResponse::Task(first) = client.call_tool_once(sleep_call(2500)).await.unwrap()
    else {
        panic!("the first long call becomes a task")
    };
    // The one task is still running: the next long call is answered whole.
    let second = client.call_tool_once(sleep_call(400)).await.unwrap();
    assert!(
        matches!(second, CallToolResponse::Complete(_)),
        "{second:?}"
    );
    let first = wait_terminal(&client, &first.task.task_id).await;
    assert_eq!(first.status(), TaskStatus::Completed);
    client.cancel().await.unwrap();
}
