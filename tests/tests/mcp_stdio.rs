//! The MCP server over real stdio, driven by rmcp's client.

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientRequest, GetPromptRequestParams, PaginatedRequestParams,
    ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use skillbox_e2e::mcp::{assert_says, assert_tool_error, call, connect_stdio, text};
use skillbox_e2e::{examples, repo, testkit_skills};

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test]
async fn handshake_describes_the_server() {
    let (client, _) = connect_stdio(&["--no-audit"]).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "skillbox");
    assert!(
        info.instructions
            .as_deref()
            .unwrap_or("")
            .contains("load_skill")
    );
    let caps = &info.capabilities;
    assert_eq!(caps.tools.as_ref().and_then(|t| t.list_changed), Some(true));
    assert!(caps.resources.is_some() && caps.prompts.is_some() && caps.logging.is_some());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn lazy_mode_lists_skill_tools_after_load_skill() {
    let (client, recorder) = connect_stdio(&["--no-audit", "--workspace", &examples()]).await;
    let before = client.peer().list_all_tools().await.unwrap();
    assert_eq!(
        names(&before),
        [
            "load_skill",
            "find_skills",
            "read_skill_file",
            "run_script",
            "run_code"
        ]
    );
    let load = &before[0];
    let schema = serde_json::to_value(&*load.input_schema).unwrap();
    assert_eq!(
        schema["properties"]["name"]["enum"],
        json!([
            "data-peek",
            "log-inspect",
            "release-check",
            "report-digest",
            "web-peek"
        ])
    );
    assert!(
        load.description
            .as_deref()
            .unwrap()
            .contains("log-inspect: Read and search large log files")
    );

    let loaded = call(&client, "load_skill", json!({"name": "log-inspect"})).await;
    assert_ne!(loaded.is_error, Some(true));
    let body = text(&loaded);
    assert!(body.starts_with("# Skill: log-inspect"), "{body}");
    assert!(body.contains("`log-inspect__grep`"), "{body}");
    assert!(body.contains("references/patterns.md"), "{body}");
    assert_eq!(
        loaded.structured_content.as_ref().unwrap()["skill"],
        "log-inspect"
    );
    assert!(
        recorder
            .wait_for("tools/list_changed", 1, Duration::from_secs(5))
            .await
    );

    let after = client.peer().list_all_tools().await.unwrap();
    let grep = after
        .iter()
        .find(|t| t.name == "log-inspect__grep")
        .expect("grep listed");
    let annotations = grep.annotations.as_ref().unwrap();
    assert_eq!(annotations.read_only_hint, Some(true));
    assert_eq!(annotations.destructive_hint, Some(false));
    assert_eq!(annotations.open_world_hint, Some(false));
    let schema = serde_json::to_value(&*grep.input_schema).unwrap();
    assert_eq!(schema["required"], json!(["path", "pattern"]));
    assert!(
        schema["properties"]["pattern"]["description"]
            .as_str()
            .unwrap()
            .contains("regular expression")
    );
    assert!(
        !names(&after).iter().any(|n| n.starts_with("data-peek__")),
        "only the loaded skill's tools"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn all_mode_lists_every_tool_up_front() {
    let (client, _) = connect_stdio(&["--no-audit", "--tools", "all"]).await;
    let tools = names(&client.peer().list_all_tools().await.unwrap());
    for expected in [
        "log-inspect__grep",
        "data-peek__query",
        "data-peek__summarize",
        "report-digest__read-lines",
    ] {
        assert!(
            tools.contains(&expected.to_string()),
            "{expected} missing from {tools:?}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn skill_tools_return_structured_content_and_teaching_errors() {
    let (client, _) = connect_stdio(&["--no-audit", "--workspace", &examples()]).await;
    let unloaded = call(
        &client,
        "log-inspect__grep",
        json!({"path": "logs/app.log", "pattern": "ERROR"}),
    )
    .await;
    assert_eq!(
        unloaded.is_error,
        Some(true),
        "lazy mode runs only loaded skills"
    );
    assert_says(&unloaded, &["load_skill"]);
    call(&client, "load_skill", json!({"name": "log-inspect"})).await;
    let result = call(
        &client,
        "log-inspect__grep",
        json!({"path": "logs/app.log", "pattern": "ERROR"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(
        result.structured_content.as_ref().unwrap()["total-matches"],
        5
    );
    assert!(text(&result).contains("db pool exhausted"));

    let bad = call(
        &client,
        "log-inspect__grep",
        json!({"path": "logs/app.log"}),
    )
    .await;
    assert_tool_error(&bad, &["`pattern` is required"]);

    let missing = call(
        &client,
        "log-inspect__count-lines",
        json!({"path": "nope.log"}),
    )
    .await;
    assert_eq!(missing.is_error, Some(true));
    assert!(text(&missing).contains("cannot open `nope.log`"));
    assert!(!text(&missing).contains(&examples()), "host path leaked");

    // An unknown tool is a protocol error (-32602) that still teaches.
    let unknown = client
        .peer()
        .call_tool(CallToolRequestParams::new("log-inspect__frobnicate"))
        .await
        .expect_err("unknown tools are protocol errors");
    let rmcp::ServiceError::McpError(error) = unknown else {
        panic!("{unknown}")
    };
    assert_eq!(error.code.0, -32602);
    assert!(
        error.message.contains("log-inspect__grep"),
        "{}",
        error.message
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn large_results_are_cut_head_and_tail_with_a_note() {
    let (client, _) = connect_stdio(&[
        "--no-audit",
        "--workspace",
        &examples(),
        "--output-budget",
        "4096",
    ])
    .await;
    call(&client, "load_skill", json!({"name": "log-inspect"})).await;
    let result = call(
        &client,
        "log-inspect__grep",
        json!({"path": "logs/app.log", "pattern": "INFO", "max-matches": 300}),
    )
    .await;
    let shown = text(&result);
    assert!(shown.len() < 5000, "{} bytes shown", shown.len());
    assert!(
        shown.contains("bytes omitted: the full result is"),
        "{shown}"
    );
    // The manifest's `paging:` hint for grep, quoted in the cut note.
    assert!(
        shown.contains("call again with a narrower `pattern` or a smaller `max-matches`"),
        "{shown}"
    );
    assert!(shown.trim_end().ends_with('}'), "the tail is kept");
    assert!(result.structured_content.is_none());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn read_skill_file_is_bounded_and_stays_inside_the_skill() {
    let (client, _) = connect_stdio(&["--no-audit"]).await;
    let page = call(
        &client,
        "read_skill_file",
        json!({"skill": "log-inspect", "path": "references/patterns.md", "max_lines": 3}),
    )
    .await;
    let shown = text(&page);
    assert!(shown.starts_with("    1  # Log patterns"), "{shown}");
    assert!(
        shown.contains("call read_skill_file again with start_line=4"),
        "{shown}"
    );
    assert_eq!(page.structured_content.as_ref().unwrap()["end_line"], 3);

    for path in ["../data-peek/SKILL.md", "/etc/passwd"] {
        let escape = call(
            &client,
            "read_skill_file",
            json!({"skill": "log-inspect", "path": path}),
        )
        .await;
        assert_tool_error(&escape, &["leaves the skill folder"]);
    }
    let missing = call(
        &client,
        "read_skill_file",
        json!({"skill": "log-inspect", "path": "references/nope.md"}),
    )
    .await;
    assert!(
        text(&missing).contains("references/patterns.md"),
        "lists what exists: {}",
        text(&missing)
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn run_script_returns_exit_code_and_output() {
    let project = repo().join("examples/release-project");
    let (client, _) =
        connect_stdio(&["--no-audit", "--workspace", project.to_str().unwrap()]).await;
    call(&client, "load_skill", json!({"name": "release-check"})).await;
    let result = call(
        &client,
        "run_script",
        json!({"skill": "release-check", "script": "release-check", "args": ["src/main.rs"]}),
    )
    .await;
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(structured["exit_code"], 1);
    assert!(
        structured["stdout"]
            .as_str()
            .unwrap()
            .contains("RESULT: BLOCKED")
    );
    assert!(text(&result).starts_with("exit code 1"));

    let nope = call(
        &client,
        "run_script",
        json!({"skill": "release-check", "script": "deploy"}),
    )
    .await;
    assert_eq!(nope.is_error, Some(true));
    assert!(text(&nope).contains("its scripts: release-check"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn resources_templates_and_pagination() {
    let skills = skillbox_e2e::workspace(&[]);
    let mut files: Vec<(String, String)> = vec![(
        "many/SKILL.md".into(),
        "---\nname: many\ndescription: A skill with many references; use when testing resource pagination.\n---\nx\n".into(),
    )];
    for i in 0..60 {
        files.push((
            format!("many/references/r{i:02}.md"),
            format!("# ref {i}\n"),
        ));
    }
    for (rel, content) in &files {
        let path = skills.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let (client, _) =
        connect_stdio(&["--no-audit", "--skills", skills.path().to_str().unwrap()]).await;
    let first = client.peer().list_resources(None).await.unwrap();
    assert_eq!(first.resources.len(), 50);
    let cursor = first.next_cursor.clone().expect("a second page");
    let mut params = PaginatedRequestParams::default();
    params.cursor = Some(cursor);
    let second = client.peer().list_resources(Some(params)).await.unwrap();
    let total = first.resources.len() + second.resources.len();
    assert_eq!(
        total,
        5 + 4 + 1 + 60,
        "5 bundled SKILL.md + 4 references + many's SKILL.md + 60 references"
    );

    let patterns = first
        .resources
        .iter()
        .chain(&second.resources)
        .find(|r| r.uri == "skill://log-inspect/references/patterns.md")
        .unwrap();
    assert_eq!(patterns.mime_type.as_deref(), Some("text/markdown"));
    assert!(patterns.size.unwrap() > 100);

    let templates = client.peer().list_resource_templates(None).await.unwrap();
    assert_eq!(
        templates.resource_templates[0].uri_template,
        "skill://{name}/{path}"
    );

    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "skill://many/references/r07.md",
        ))
        .await
        .unwrap();
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => assert_eq!(text, "# ref 7\n"),
        other => panic!("expected text, got {other:?}"),
    }
    let escape = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "skill://many/../../etc/passwd",
        ))
        .await;
    assert!(escape.is_err());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn prompts_substitute_arguments() {
    let kit = testkit_skills();
    let (client, _) =
        connect_stdio(&["--no-audit", "--skills", kit.path().to_str().unwrap()]).await;
    let prompts = client.peer().list_prompts(None).await.unwrap();
    let listed: Vec<&str> = prompts.prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(
        listed.contains(&"testkit") && listed.contains(&"log-inspect"),
        "{listed:?}"
    );
    let mut args = serde_json::Map::new();
    args.insert("arguments".into(), json!("alpha 'beta gamma'"));
    let mut request = GetPromptRequestParams::new("testkit");
    request.arguments = Some(args);
    let prompt = client.peer().get_prompt(request).await.unwrap();
    let message = serde_json::to_value(&prompt.messages[0]).unwrap();
    let text = message["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("Args: alpha 'beta gamma'; first: alpha."),
        "{text}"
    );
    assert!(
        text.contains("<user-request>\nalpha 'beta gamma'\n</user-request>"),
        "{text}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn cancellation_stops_a_looping_guest_and_others_keep_running() {
    let kit = testkit_skills();
    let audit = tempfile::NamedTempFile::new().unwrap();
    let (client, recorder) = connect_stdio(&[
        "--audit",
        audit.path().to_str().unwrap(),
        "--tools",
        "all",
        "--skills",
        kit.path().to_str().unwrap(),
    ])
    .await;
    let peer = client.peer().clone();
    // The server reports progress on a call with a progress token while
    // the guest runs: the first report says the guest is looping.
    let mut with_progress = PeerRequestOptions::no_options();
    with_progress.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("spin".into())),
    ));
    let handle = peer
        .send_cancellable_request(
            ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
                CallToolRequestParams::new("testkit__spin"),
            )),
            with_progress,
        )
        .await
        .unwrap();
    assert!(
        recorder
            .wait_for("progress", 1, Duration::from_secs(30))
            .await,
        "no progress report while the guest spins"
    );

    // While the guest loops, other calls are served promptly.
    let started = Instant::now();
    for _ in 0..5 {
        let r = call(&client, "testkit__noop", json!({})).await;
        assert_eq!(r.structured_content.unwrap()["result"], 42);
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "calls stalled: {:?}",
        started.elapsed()
    );

    handle.cancel(Some("test".into())).await.unwrap();
    // The cancelled guest stops within about an epoch tick; its audit
    // record says so.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = std::fs::read_to_string(audit.path()).unwrap();
        if log
            .lines()
            .any(|l| l.contains("\"testkit__spin\"") && l.contains("\"cancelled\""))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no cancelled record: {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = call(&client, "testkit__noop", json!({})).await;
    assert_ne!(r.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn long_calls_report_progress() {
    let kit = testkit_skills();
    let (client, recorder) = connect_stdio(&[
        "--no-audit",
        "--tools",
        "all",
        "--skills",
        kit.path().to_str().unwrap(),
    ])
    .await;
    // rmcp's client puts a progressToken on every request.
    let result = call(&client, "testkit__sleep-ms", json!({"ms": 2600})).await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert!(
        recorder.count("progress") >= 1,
        "events: {:?}",
        recorder.events.lock().unwrap()
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn every_call_is_audited() {
    let kit = testkit_skills();
    let audit = tempfile::NamedTempFile::new().unwrap();
    let ws = skillbox_e2e::workspace(&[]);
    let (client, _) = connect_stdio(&[
        "--audit",
        audit.path().to_str().unwrap(),
        "--tools",
        "all",
        "--skills",
        kit.path().to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
        "--allow-write",
    ])
    .await;
    call(&client, "testkit__noop", json!({})).await;
    call(&client, "testkit__fail", json!({"message": "no"})).await;
    call(
        &client,
        "testkit__write-file",
        json!({"path": "/workspace/x", "contents": "hi"}),
    )
    .await;
    client.cancel().await.unwrap();
    let records: Vec<Value> = std::fs::read_to_string(audit.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    let noop = &records[0];
    for field in [
        "time",
        "client",
        "tool",
        "skill",
        "source",
        "component",
        "component_digest",
        "grants",
        "argument_bytes",
        "outcome",
        "duration_ms",
        "fuel",
    ] {
        assert!(
            noop.get(field).is_some_and(|v| !v.is_null()),
            "missing {field}: {noop}"
        );
    }
    assert_eq!(noop["outcome"], "ok");
    assert_eq!(noop["skill"], "testkit");
    assert!(
        noop["component_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(records[1]["outcome"], "tool_error");
    assert!(
        records[2]["grants"]
            .as_str()
            .unwrap()
            .contains("/workspace (read-write)")
    );
    assert_eq!(std::fs::read_to_string(ws.path().join("x")).unwrap(), "hi");
}

fn load_skill_enum(tools: &[rmcp::model::Tool]) -> Vec<String> {
    let load = tools.iter().find(|t| t.name == "load_skill").unwrap();
    let schema = serde_json::to_value(&*load.input_schema).unwrap();
    serde_json::from_value(schema["properties"]["name"]["enum"].clone()).unwrap()
}

#[tokio::test]
async fn reload_adds_new_skills_and_drops_broken_ones() {
    let skill = |name: &str| {
        format!(
            "---\nname: {name}\ndescription: The {name} skill; use when testing that skill folders reload.\n---\nbody of {name}\n"
        )
    };
    let skills = skillbox_e2e::workspace(&[("alpha/SKILL.md", &skill("alpha"))]);
    let dir = skills.path().to_str().unwrap();
    let (client, recorder) =
        connect_stdio(&["--no-audit", "--skills", dir, "--reload-ms", "100"]).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(load_skill_enum(&tools).contains(&"alpha".to_string()));

    std::fs::create_dir_all(skills.path().join("beta")).unwrap();
    std::fs::write(skills.path().join("beta/SKILL.md"), skill("beta")).unwrap();
    assert!(
        recorder
            .wait_for("tools/list_changed", 1, Duration::from_secs(10))
            .await,
        "no list_changed after adding beta"
    );
    let tools = client.peer().list_all_tools().await.unwrap();
    let names = load_skill_enum(&tools);
    assert!(names.contains(&"beta".to_string()), "{names:?}");

    std::fs::write(
        skills.path().join("alpha/SKILL.md"),
        "no frontmatter any more\n",
    )
    .unwrap();
    assert!(
        recorder
            .wait_for("tools/list_changed", 2, Duration::from_secs(10))
            .await,
        "no list_changed after breaking alpha"
    );
    let tools = client.peer().list_all_tools().await.unwrap();
    let names = load_skill_enum(&tools);
    assert!(!names.contains(&"alpha".to_string()), "{names:?}");
    assert!(
        names.contains(&"beta".to_string()) && names.contains(&"log-inspect".to_string()),
        "{names:?}"
    );
    let beta = call(&client, "load_skill", json!({"name": "beta"})).await;
    assert!(text(&beta).contains("body of beta"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn completion_suggests_skill_names_and_files() {
    use rmcp::model::{ArgumentInfo, CompleteRequestParams, CompletionContext, Reference};
    let (client, _) = connect_stdio(&["--no-audit"]).await;
    let names = client
        .peer()
        .complete(CompleteRequestParams::new(
            Reference::for_resource("skill://{name}/{path}"),
            ArgumentInfo::new("name", "re"),
        ))
        .await
        .unwrap();
    assert_eq!(names.completion.values, ["release-check", "report-digest"]);

    let mut request = CompleteRequestParams::new(
        Reference::for_resource("skill://{name}/{path}"),
        ArgumentInfo::new("path", "ref"),
    );
    let mut context = CompletionContext::new();
    context.arguments = Some([("name".to_string(), "log-inspect".to_string())].into());
    request.context = Some(context);
    let paths = client.peer().complete(request).await.unwrap();
    assert_eq!(paths.completion.values, ["references/patterns.md"]);
    client.cancel().await.unwrap();
}
