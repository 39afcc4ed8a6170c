//! `run_code`: the Python a skill's steps show, run in the sandbox as that
//! skill's code or as the host's, from the command line and over MCP; what
//! it may not reach, what the audit keeps of it, and the limits it hits.

use serde_json::{Value, json};
use skillbox_e2e::mcp::{assert_says, assert_tool_error, call, connect_stdio};
use skillbox_e2e::{python_runtime, run, workspace};

/// A skill as public skills ship code for the model to write: a helper
/// package at the skill's root and a step that imports it, with a
/// manifest asking to write the workspace.
fn helper_skill() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("shouter");
    std::fs::create_dir_all(dir.join("core")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: shouter\ndescription: Shouts text into files. Use in tests only.\n---\n\
         To shout, run:\n\n```python\nfrom core.shout import shout\nprint(shout('hi'))\n```\n",
    )
    .unwrap();
    std::fs::write(dir.join("core/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("core/shout.py"),
        "def shout(text):\n    return text.upper() + '!'\n",
    )
    .unwrap();
    std::fs::write(dir.join("skillbox.yaml"), "grants:\n  workspace: write\n").unwrap();
    root
}

const WRITES: &str = r#"from core.shout import shout
with open('out.txt', 'w') as f:
    f.write(shout('written'))
print(shout('done'))
"#;

#[test]
fn the_command_line_runs_code_as_a_skills_and_stages_its_writes() {
    if !python_runtime() {
        return;
    }
    let skills = helper_skill();
    let dir = skills.path().to_str().unwrap();
    let ws = workspace(&[("keep.txt", "x")]);
    let ws_arg = ws.path().to_str().unwrap();
    let run_code = |extra: &[&str], code: &str| {
        let mut argv = vec!["run-code", "--skills", dir, "--workspace", ws_arg];
        argv.extend(extra);
        argv.push(code);
        run(&argv)
    };

    // As the skill's code: its helper imports, and with the user's yes to
    // writing, the file lands.
    let out = run_code(&["--skill", "shouter", "--allow-write"], WRITES);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "DONE!");
    out.stderr_says(&["workspace: committed", "out.txt"]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "WRITTEN!"
    );
    std::fs::remove_file(ws.path().join("out.txt")).unwrap();

    // A dry run keeps the write out of the workspace.
    let out = run_code(&["--skill", "shouter", "--dry-run"], WRITES);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!ws.path().join("out.txt").exists(), "{out:?}");

    // Without --allow-write the workspace is read-only, and the code is
    // told so.
    let out = run_code(&["--skill", "shouter"], WRITES);
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["/workspace is read-only for this call", "--allow-write"]);
    assert!(!ws.path().join("out.txt").exists());

    // Without a skill, the skill's modules are not there: no /skill.
    let out = run_code(&[], "from core.shout import shout\n");
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&[
        "No module named 'core'",
        "code run without a skill has the standard library only",
    ]);

    // The working folder is on sys.path, behind the standard library: a
    // module the code wrote imports, a `json.py` there shadows nothing.
    std::fs::write(
        ws.path().join("helper.py"),
        "VALUE = 'from the workspace'\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("json.py"), "raise SystemExit('shadowed')\n").unwrap();
    let out = run_code(
        &[],
        "import helper, json\nprint(helper.VALUE, json.dumps(1))\n",
    );
    assert_eq!(out.stdout.trim(), "from the workspace 1", "{out:?}");
    for name in ["helper.py", "json.py"] {
        std::fs::remove_file(ws.path().join(name)).unwrap();
    }

    // Arguments and stdin, as `python -c` gives them.
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), "piped").unwrap();
    let out = run_code(
        &["--stdin", input.path().to_str().unwrap()],
        "import sys\nprint(sys.argv, sys.stdin.read())\nsys.exit(4)\n",
    );
    // `--` and the arguments come after the code.
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.stdout.trim(), "['-c'] piped");
    let out = run(&[
        "run-code",
        "print(__import__('sys').argv)",
        "--",
        "a",
        "b c",
    ]);
    assert_eq!(out.stdout.trim(), "['-c', 'a', 'b c']", "{out:?}");

    // What cannot run says so before anything runs.
    let out = run_code(&["--language", "sh"], "ls");
    assert_eq!(out.code, 2, "{out:?}");
    out.stderr_says(&["needs a shell", "Python"]);
    let out = run_code(&["--skill", "shouter", "--skill", "other"], "print(1)");
    assert_eq!(out.code, 2, "{out:?}");
    out.stderr_says(&["give --skill once"]);
}

/// The secret a user gives a skill is for the code they installed: the
/// skill's script reads it (redacted in what it prints), code run as the
/// skill does not, and the code is told why.
#[test]
fn code_never_sees_the_secrets_given_to_its_skill() {
    if !python_runtime() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("keeper");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: keeper\ndescription: Holds a token for its own script. Use in tests only.\n---\nRun scripts/show.py.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("skillbox.yaml"),
        "grants:\n  env: [KEEPER_TOKEN]\n",
    )
    .unwrap();
    let probe = "import os\nprint('token:', os.environ.get('KEEPER_TOKEN'), len(os.environ))\n";
    std::fs::write(dir.join("scripts/show.py"), probe).unwrap();
    let skills = root.path().to_str().unwrap();
    let with_token = |argv: &[&str]| -> skillbox_e2e::Run {
        skillbox_e2e::skillbox()
            .env("KEEPER_TOKEN", "tok-5ecret-value")
            .args(argv)
            .output()
            .unwrap()
            .into()
    };
    // Given as the skill asks (--allow-env), or by the user outright
    // (--grant, as `skillbox grant` does for good): the same for code.
    for grant in [
        ["--allow-env", "keeper:KEEPER_TOKEN"],
        ["--grant", "keeper:env=KEEPER_TOKEN"],
    ] {
        let script = with_token(
            &[
                &[
                    "run-script",
                    "--skills",
                    skills,
                    "--script",
                    "keeper/scripts/show.py",
                ][..],
                &grant,
            ]
            .concat(),
        );
        assert_eq!(script.code, 0, "{script:?}");
        assert!(
            script.stdout.contains("token: [redacted:KEEPER_TOKEN]"),
            "{script:?}"
        );

        let code = with_token(
            &[
                &["run-code", "--skills", skills, "--skill", "keeper"][..],
                &grant,
                &[probe],
            ]
            .concat(),
        );
        assert_eq!(code.code, 0, "{code:?}");
        assert_eq!(code.stdout.trim(), "token: None 0", "{code:?}");
        code.stderr_says(&[
            "does not pass environment variables (KEEPER_TOKEN)",
            "run_script",
        ]);
        assert!(!format!("{code:?}").contains("5ecret"), "{code:?}");
    }
}

/// The text of a tool result, errors included.
fn all_text(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_string(result).unwrap()
}

#[tokio::test]
async fn a_model_runs_code_in_the_sandbox_and_the_audit_keeps_its_digest() {
    if !python_runtime() {
        return;
    }
    let skills = helper_skill();
    let ws = workspace(&[("notes.txt", "secret-free notes")]);
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.jsonl");
    let (client, _) = connect_stdio(&[
        "--skills",
        skills.path().to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
    ])
    .await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "run_code"), "{tools:?}");

    // The host's own code: the workspace as the working folder, nothing of
    // the host beyond its mounts, no skill folder.
    let probe = r#"import os
print(6 * 7, os.getcwd(), open('notes.txt').read())
for path in ('/etc/passwd', '/skill/SKILL.md', '/root'):
    try:
        open(path).read()
        print('REACHED', path)
    except OSError as e:
        print('refused', path, type(e).__name__)
# MARKER-code-text
"#;
    let result = call(&client, "run_code", json!({"code": probe})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_says(
        &result,
        &["42 /workspace secret-free notes", "refused /etc/passwd"],
    );
    assert!(!all_text(&result).contains("REACHED"), "{result:?}");

    // As a skill's code, the skill must be loaded first (lazy tools), and
    // load_skill says how its code blocks run.
    let early = call(
        &client,
        "run_code",
        json!({"skill": "shouter", "code": "print(1)"}),
    )
    .await;
    assert_tool_error(&early, &["not loaded in this session"]);
    let loaded = call(&client, "load_skill", json!({"name": "shouter"})).await;
    assert_says(&loaded, &[r#"run_code {"skill": "shouter""#]);
    let result = call(
        &client,
        "run_code",
        json!({"skill": "shouter", "code": "from core.shout import shout\nimport sys\nprint(shout(sys.stdin.read()), sys.argv[1:])", "args": ["x"], "stdin": "in"}),
    )
    .await;
    assert_says(&result, &["IN! ['x']"]);

    // What cannot run: another language, more code than it takes, a
    // malformed argument. Each says why; nothing runs.
    let shell = call(
        &client,
        "run_code",
        json!({"code": "ls", "language": "bash"}),
    )
    .await;
    assert_tool_error(&shell, &["needs a shell", "Nothing was run"]);
    let huge = "#".repeat(300 * 1024);
    let too_big = call(&client, "run_code", json!({"code": huge})).await;
    assert_tool_error(&too_big, &["at most 256 KiB"]);
    let bad = call(
        &client,
        "run_code",
        json!({"code": "print(1)", "args": "x"}),
    )
    .await;
    assert_tool_error(&bad, &["`args` must be an array of strings"]);
    let syntax = call(&client, "run_code", json!({"code": "def f(:\n"})).await;
    assert_says(&syntax, &["SyntaxError", "<code>"]);

    let after = call(
        &client,
        "run_code",
        json!({"code": "print('still serving')"}),
    )
    .await;
    assert_says(&after, &["still serving"]);
    client.cancel().await.unwrap();

    // The audit names each run `run_code` with the code's digest and size,
    // never the code itself.
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(!text.contains("MARKER-code-text"), "{text}");
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let digest = skillbox_sandbox::digest::sha256(probe.as_bytes());
    let probe_record = records
        .iter()
        .find(|r| r["code_digest"] == digest.as_str())
        .unwrap_or_else(|| panic!("no record of the probe: {text}"));
    assert_eq!(probe_record["tool"], "run_code");
    assert_eq!(probe_record["code_bytes"], probe.len());
    assert_eq!(probe_record["outcome"], "ok");
    let refused = records
        .iter()
        .find(|r| r["code_bytes"] == 300 * 1024)
        .unwrap_or_else(|| panic!("no record of the refused code: {text}"));
    assert_eq!(refused["outcome"], "unsupported");
}

#[tokio::test]
async fn a_read_only_server_offers_run_code_with_the_workspace_read_only() {
    if !python_runtime() {
        return;
    }
    let skills = helper_skill();
    let ws = workspace(&[("a.txt", "a")]);
    let (client, _) = connect_stdio(&[
        "--skills",
        skills.path().to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
        "--read-only",
        "--tools",
        "all",
    ])
    .await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"run_code") && !names.contains(&"run_script"),
        "{names:?}"
    );
    let result = call(
        &client,
        "run_code",
        json!({"skill": "shouter", "code": "open('b.txt', 'w').write('b')"}),
    )
    .await;
    // The code ran and failed on the write, which the runner explains.
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_says(
        &result,
        &[
            "/workspace is read-only for this call",
            "never on a read-only server",
        ],
    );
    assert!(!ws.path().join("b.txt").exists());
    client.cancel().await.unwrap();
}

/// Through the official MCP Python SDK: code that writes waits for the
/// user's yes (`--confirm write`), the question shows the code and the
/// change it would make, and a decline leaves the workspace as it was.
#[test]
fn through_the_python_sdk_a_declined_write_by_code_stays_unwritten() {
    if !python_runtime() || !skillbox_e2e::python_sdk() {
        return;
    }
    let skills = helper_skill();
    let ws = workspace(&[("keep.txt", "x")]);
    let arguments = json!({"skill": "shouter", "code": WRITES});
    let ask = |answer: &str| -> Value {
        let out = std::process::Command::new("python3")
            .arg(skillbox_e2e::repo().join("tests/support/python/confirm_client.py"))
            .args([answer, "run_code", &arguments.to_string()])
            .arg(skillbox_e2e::skillbox_bin())
            .args([
                "--tools",
                "all",
                "--confirm",
                "write",
                "--allow-write",
                "--skills",
            ])
            .arg(skills.path())
            .arg("--workspace")
            .arg(ws.path())
            .current_dir(skillbox_e2e::repo())
            .envs(skillbox_e2e::hermetic_env())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let declined = ask("decline");
    let question = declined["asked"][0].as_str().unwrap_or_default();
    for part in [
        "  code:\n  | from core.shout import shout",
        "  | print(shout('done'))",
        "It would change:",
        "out.txt",
    ] {
        assert!(
            question.contains(part),
            "{part:?} is not in the question: {declined}"
        );
    }
    assert_eq!(declined["is_error"], true, "{declined}");
    assert!(!ws.path().join("out.txt").exists(), "a decline wrote");

    let accepted = ask("accept");
    assert_eq!(accepted["is_error"], false, "{accepted}");
    assert!(
        accepted["text"].as_str().unwrap().contains("DONE!"),
        "{accepted}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "WRITTEN!"
    );
}

/// The hostile scripts' set, as code: each stops on its limit or its
/// missing capability with the error that names it, and the server keeps
/// serving.
#[tokio::test]
async fn hostile_code_gets_its_precise_error_and_the_host_keeps_serving() {
    if !python_runtime() {
        return;
    }
    const HOSTILE_CODE: &[(&str, &[&str])] = &[
        ("while True:\n    pass\n", &["out of fuel", "--fuel"]),
        (
            "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))\n",
            &["memory limit", "--memory-mib"],
        ),
        (
            "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n",
            &["output limit", "--max-output-bytes"],
        ),
        (
            "for i in range(20000):\n    open(f'/tmp/f{i}', 'w').close()\n",
            &["quota", "--scratch-quota-entries"],
        ),
        (
            "print(open('/etc/passwd').read())\n",
            &["`/etc/passwd` is outside what this code may see"],
        ),
        (
            "print(open('/workspace/../../../etc/hostname').read())\n",
            &["outside what this code may see"],
        ),
        (
            "import subprocess\nsubprocess.run(['sh', '-c', 'id'])\n",
            &["code run without a skill may not start programs"],
        ),
    ];
    let ws = workspace(&[("a.txt", "a")]);
    let (client, _) = connect_stdio(&[
        "--workspace",
        ws.path().to_str().unwrap(),
        "--fuel",
        "2000000000",
    ])
    .await;
    for (code, says) in HOSTILE_CODE {
        let result = call(&client, "run_code", json!({"code": code})).await;
        let all = all_text(&result);
        for part in *says {
            assert!(all.contains(part), "{code}: lacks {part:?}: {all}");
        }
        assert!(
            !all.contains("/tmp/skillbox"),
            "{code}: a host path leaked: {all}"
        );
    }
    let ok = call(
        &client,
        "run_code",
        json!({"code": "print('still serving')"}),
    )
    .await;
    assert_says(&ok, &["still serving"]);
    client.cancel().await.unwrap();
}

/// A one-page PDF whose page shows `text`, built by hand (objects, then a
/// cross-reference table with their real offsets) so the test needs no
/// PDF library of its own.
fn pdf_saying(text: &str) -> Vec<u8> {
    let stream = format!("BT /F1 24 Tf 72 700 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_string(),
        format!(
            "<< /Length {} >>\nstream\n{stream}\nendstream",
            stream.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (n, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend(format!("{} 0 obj\n{body}\nendobj\n", n + 1).as_bytes());
    }
    let xref = pdf.len();
    pdf.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        pdf.extend(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

/// The inline tasks of a PDF skill (its steps show pypdf code, as
/// Anthropic's `pdf` skill does): prepared once, then merge, extract,
/// rotate and encrypt through `run_code` as the skill's code, each output
/// read back.
#[tokio::test]
async fn a_pdf_skills_inline_tasks_run_with_run_code() {
    if !python_runtime() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("pdf-steps");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: pdf-steps\ndescription: Merges, reads, rotates and locks PDF files. Use in tests only.\n---\n\
         Read a PDF's text:\n\n```python\nfrom pypdf import PdfReader\nprint(PdfReader('a.pdf').pages[0].extract_text())\n```\n",
    )
    .unwrap();
    std::fs::write(dir.join("requirements.txt"), "pypdf==5.4.0\n").unwrap();
    std::fs::write(dir.join("skillbox.yaml"), "grants:\n  workspace: write\n").unwrap();
    let skills = root.path().to_str().unwrap();
    let prepared = run(&["prepare", "pdf-steps", "--skills", skills]);
    assert_eq!(prepared.code, 0, "{prepared:?}");

    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.pdf"), pdf_saying("Hello from a")).unwrap();
    std::fs::write(ws.path().join("b.pdf"), pdf_saying("Hello from b")).unwrap();
    let (client, _) = connect_stdio(&[
        "--skills",
        skills,
        "--workspace",
        ws.path().to_str().unwrap(),
        "--allow-write",
        "--tools",
        "all",
    ])
    .await;
    let run_code = |code: &str| {
        call(
            &client,
            "run_code",
            json!({"skill": "pdf-steps", "code": code}),
        )
    };
    let tasks = r#"from pypdf import PdfReader, PdfWriter
writer = PdfWriter()
for name in ["a.pdf", "b.pdf"]:
    for page in PdfReader(name).pages:
        writer.add_page(page)
with open("merged.pdf", "wb") as out:
    writer.write(out)
rotated = PdfWriter()
page = PdfReader("a.pdf").pages[0]
page.rotate(90)
rotated.add_page(page)
with open("rotated.pdf", "wb") as out:
    rotated.write(out)
locked = PdfWriter()
locked.add_page(PdfReader("b.pdf").pages[0])
locked.encrypt("user-pw", "owner-pw")
with open("locked.pdf", "wb") as out:
    locked.write(out)
"#;
    let done = run_code(tasks).await;
    assert_eq!(done.is_error, Some(false), "{done:?}");
    for name in ["merged.pdf", "rotated.pdf", "locked.pdf"] {
        assert!(ws.path().join(name).is_file(), "{name} was not written");
    }

    // Read back in a fresh sandbox: what the files hold, not that a call
    // returned.
    let check = r#"from pypdf import PdfReader
merged = PdfReader("merged.pdf")
print(len(merged.pages), [p.extract_text() for p in merged.pages])
print(PdfReader("rotated.pdf").pages[0].rotation)
locked = PdfReader("locked.pdf")
print(locked.is_encrypted, locked.decrypt("user-pw") != 0, locked.pages[0].extract_text())
"#;
    let read = run_code(check).await;
    assert_says(
        &read,
        &[
            "2 ['Hello from a', 'Hello from b']",
            "90",
            "True True Hello from b",
        ],
    );
    let locked = std::fs::read(ws.path().join("locked.pdf")).unwrap();
    assert!(
        !String::from_utf8_lossy(&locked).contains("Hello from b"),
        "the locked PDF keeps its text in the clear"
    );
    client.cancel().await.unwrap();
}
