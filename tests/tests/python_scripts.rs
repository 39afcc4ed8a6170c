//! The Python scripts real skills ship, run in the sandbox by the Python
//! runtime (`runtimes/python/`): the shapes public skills use, pinned
//! pure-Python requirements prepared once, and hostile scripts, each
//! stopped with its own error while the host keeps serving.

use std::path::Path;

use serde_json::{Value, json};
use skillbox_e2e::mcp::{
    Recorder, assert_says, assert_tool_error, call, connect_stateless, connect_stdio, serve_http,
    serve_http_with_env, stateless_call,
};
use skillbox_e2e::{Run, python_runtime, python_skill, run, run_script, skillbox, workspace};

const REPORT: &str = r#"
import json, os, sys
from helpers.count import words

folder = sys.argv[1]
rows = []
for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name)) as f:
        rows.append({"file": name, "words": words(f.read())})
print(json.dumps({"cwd": os.getcwd(), "files": rows}))
"#;

const STDIN_UPPER: &str = r#"
import sys
data = sys.stdin.read()
sys.stdout.write(data.upper())
sys.exit(3 if "fail" in data else 0)
"#;

#[test]
fn scripts_of_the_shapes_skills_ship_run_with_their_own_modules_and_the_workspace() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "report",
        &[
            ("scripts/report.py", REPORT),
            ("scripts/helpers/__init__.py", ""),
            (
                "scripts/helpers/count.py",
                "def words(text):\n    return len(text.split())\n",
            ),
            ("scripts/upper.py", STDIN_UPPER),
        ],
    );
    let ws = workspace(&[("notes/a.txt", "one two three"), ("notes/b.txt", "four")]);
    let ws_arg = ws.path().to_str().unwrap();

    // A stdlib-only script that imports a helper from its own folder,
    // reads the workspace (a public skill with no manifest gets it
    // read-only) and prints JSON.
    let out = run_script(
        skills.path(),
        "report/scripts/report.py",
        &["--workspace", ws_arg],
        &["notes"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        report,
        json!({"cwd": "/workspace", "files": [
            {"file": "a.txt", "words": 3},
            {"file": "b.txt", "words": 1},
        ]})
    );

    // stdin in, the exit code out.
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), "please fail\n").unwrap();
    let out = run_script(
        skills.path(),
        "report/scripts/upper.py",
        &["--stdin", input.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "PLEASE FAIL\n");

    // The workspace stays read-only without a manifest that asks.
    let writer = python_skill(
        "writer",
        &[("scripts/write.py", "open('out.txt', 'w').write('x')\n")],
    );
    let out = run_script(
        writer.path(),
        "writer/scripts/write.py",
        &["--workspace", ws_arg, "--allow-write"],
        &[],
    );
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["Errno"]);
    assert!(!ws.path().join("out.txt").exists());
}

#[test]
fn a_script_writes_under_a_write_grant_and_only_then() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "writer",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            (
                "scripts/write.py",
                "import sys\nwith open(sys.argv[1], 'w') as f:\n    f.write('written by python\\n')\nprint('ok')\n",
            ),
        ],
    );
    let ws = workspace(&[("keep.txt", "x")]);
    let ws_arg = ws.path().to_str().unwrap();
    let out = run_script(
        skills.path(),
        "writer/scripts/write.py",
        &["--workspace", ws_arg],
        &["report.txt"],
    );
    assert_eq!(out.code, 1, "without --allow-write: {out:?}");
    out.stderr_says(&["read-only without --allow-write"]);
    assert!(!ws.path().join("report.txt").exists());

    let out = run_script(
        skills.path(),
        "writer/scripts/write.py",
        &["--workspace", ws_arg, "--allow-write"],
        &["report.txt"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("report.txt")).unwrap(),
        "written by python\n"
    );
}

#[test]
fn a_pinned_requirement_is_prepared_once_and_imported_offline() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "toml-read",
        &[
            (
                "requirements.txt",
                "# what the scripts import\ntomlkit==0.13.2\n",
            ),
            (
                "scripts/keys.py",
                "import sys\nimport tomlkit\ndoc = tomlkit.parse(sys.argv[1])\nprint(sorted(doc), doc['a']['b'])\n",
            ),
        ],
    );
    let skills_arg = skills.path().to_str().unwrap();
    let before = run_script(
        skills.path(),
        "toml-read/scripts/keys.py",
        &[],
        &["[a]\nb = 1\nc = 2\n"],
    );
    assert_eq!(before.code, 1, "{before:?}");
    before.stderr_says(&[
        "No module named 'tomlkit'",
        "module `tomlkit` is not installed for this skill",
        "skillbox prepare",
    ]);

    // Refused before pip runs: an unpinned requirement, and one with no
    // pure-Python wheel (compiled code).
    let unpinned = run(&[
        "prepare",
        "toml-read",
        "--skills",
        skills_arg,
        "--with",
        "tomli",
    ]);
    assert_eq!(unpinned.code, 1, "{unpinned:?}");
    unpinned.stderr_says(&["`tomli` is not pinned", "name==1.2.3", "--without NAME"]);
    let compiled = run(&[
        "prepare",
        "toml-read",
        "--skills",
        skills_arg,
        "--with",
        "orjson==3.10.15",
    ]);
    assert_eq!(compiled.code, 1, "{compiled:?}");
    compiled.stderr_says(&[
        "`orjson==3.10.15` has no wheel that runs here",
        "Nothing was installed",
    ]);

    let prepared = run(&["prepare", "toml-read", "--skills", skills_arg, "--json"]);
    assert_eq!(prepared.code, 0, "{prepared:?}");
    let prepared = prepared.json();
    assert_eq!(prepared["distributions"], json!(["tomlkit 0.13.2"]));
    assert!(
        prepared["files_checked"].as_u64().unwrap() > 5,
        "{prepared}"
    );

    let after = run_script(
        skills.path(),
        "toml-read/scripts/keys.py",
        &[],
        &["[a]\nb = 1\nc = 2\n"],
    );
    assert_eq!(after.code, 0, "{after:?}");
    assert_eq!(after.stdout.trim(), "['a'] 1");

    // The packages were byte-compiled at prepare, by the runtime itself:
    // checked hash-based pycs (flags 3), whose tracebacks name the modules
    // where a run sees them.
    let pycs = pycs_under(
        &skillbox_e2e::hermetic_env()
            .into_iter()
            .find(|(key, _)| *key == "XDG_DATA_HOME")
            .unwrap()
            .1
            .join("skillbox/python"),
    );
    let parser = pycs
        .iter()
        .find(|p| p.ends_with("tomlkit/__pycache__/parser.cpython-314.pyc"))
        .unwrap_or_else(|| panic!("no pyc for tomlkit's parser: {pycs:?}"));
    let header = std::fs::read(parser).unwrap();
    assert_eq!(header[4..8], [3, 0, 0, 0], "not a checked hash-based pyc");
    let failed = run_script(skills.path(), "toml-read/scripts/keys.py", &[], &["[a"]);
    assert_eq!(failed.code, 1, "{failed:?}");
    failed.stderr_says(&["File \"/packages/tomlkit/parser.py\""]);
    // A module changed by hand is compiled from its source again, never
    // run from its stale pyc.
    let source = parser
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("__init__.py");
    let mut perms = std::fs::metadata(&source).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&source, perms).unwrap();
    let mut text = std::fs::read_to_string(&source).unwrap();
    text.push_str("\nEDITED_BY_HAND = 42\n");
    std::fs::write(&source, text).unwrap();
    let skill = skills.path().join("toml-read");
    std::fs::write(
        skill.join("scripts/edited.py"),
        "import tomlkit\nprint(tomlkit.EDITED_BY_HAND)\n",
    )
    .unwrap();
    let edited = run_script(skills.path(), "toml-read/scripts/edited.py", &[], &[]);
    assert_eq!(edited.stdout.trim(), "42", "{edited:?}");

    // --with adds to what is prepared; --list shows it; --replace goes
    // back to what the skill declares.
    let prepare = |extra: &[&str]| {
        let mut argv = vec!["prepare", "toml-read", "--skills", skills_arg, "--json"];
        argv.extend(extra);
        let out = run(&argv);
        assert_eq!(out.code, 0, "{extra:?}: {out:?}");
        out.json()
    };
    let added = prepare(&["--with", "six==1.16.0"]);
    assert_eq!(
        added["distributions"],
        json!(["six 1.16.0", "tomlkit 0.13.2"])
    );
    let listed = prepare(&["--list"]);
    assert_eq!(
        listed["requirements"],
        json!(["tomlkit==0.13.2", "six==1.16.0"])
    );
    let replaced = prepare(&["--replace"]);
    assert_eq!(replaced["distributions"], json!(["tomlkit 0.13.2"]));
}

/// A script a limit stops keeps what it printed before the stop (a print
/// without `flush` too), within the output cap and with granted secrets
/// redacted: a person debugging a long script needs to see how far it got.
#[test]
fn a_script_stopped_by_a_limit_keeps_what_it_printed() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "longrun",
        &[
            (
                "scripts/spin.py",
                "import os, sys\nprint('working on step 1')\nprint('token', os.environ['TOKEN'])\n\
                 print('warming up', file=sys.stderr)\nwhile True:\n    pass\n",
            ),
            (
                "scripts/grow.py",
                "print('allocating')\nchunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))\n",
            ),
            ("scripts/quiet.py", "while True:\n    pass\n"),
            ("skillbox.yaml", "grants:\n  env: [TOKEN]\n"),
        ],
    );
    let stop = |script: &str| -> Run {
        skillbox()
            .env("TOKEN", "s3cret-value")
            .args(["run-script", "--skills"])
            .arg(skills.path())
            .args(["--script", script, "--allow-env", "longrun:TOKEN"])
            .args(["--fuel", "2000000000"])
            .output()
            .unwrap()
            .into()
    };
    let out = stop("longrun/scripts/spin.py");
    assert_ne!(out.code, 0, "{out:?}");
    out.stderr_says(&[
        "out of fuel",
        "What it printed on stdout before it was stopped:\nworking on step 1",
        "token [redacted:TOKEN]",
        "What it printed on stderr before it was stopped:\nwarming up",
    ]);
    assert!(!out.stderr.contains("s3cret"), "{out:?}");
    assert!(!out.stdout.contains("s3cret"), "{out:?}");

    let out = stop("longrun/scripts/grow.py");
    out.stderr_says(&["memory limit", "before it was stopped:\nallocating"]);

    let out = stop("longrun/scripts/quiet.py");
    out.stderr_says(&["out of fuel"]);
    assert!(!out.stderr.contains("before it was stopped"), "{out:?}");
}

/// Hostile scripts, each with the error that names its limit or its
/// missing capability.
const HOSTILE: &[(&str, &str, &[&str])] = &[
    (
        "spin.py",
        "while True:\n    pass\n",
        &["out of fuel", "--fuel"],
    ),
    (
        "bomb.py",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))\n",
        &["memory limit", "--memory-mib"],
    ),
    (
        "flood.py",
        "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n",
        &["output limit", "--max-output-bytes"],
    ),
    (
        "passwd.py",
        "print(open('/etc/passwd').read())\n",
        &["`/etc/passwd` is outside what this script may see"],
    ),
    (
        "dotdot.py",
        "print(open('/workspace/../../../etc/hostname').read())\n",
        &["outside what this script may see"],
    ),
    (
        "shell.py",
        "import subprocess\nsubprocess.run(['sh', '-c', 'id'])\n",
        &["skillbox grant hostile --program sh", "OS sandbox"],
    ),
    (
        "connect.py",
        "import socket\nsocket.create_connection(('127.0.0.1', 9))\n",
        &["no network sockets"],
    ),
    (
        "files.py",
        "for i in range(20000):\n    open(f'/tmp/f{i}', 'w').close()\n",
        &["quota", "--scratch-quota-entries"],
    ),
    (
        "cext.py",
        "import cv2\n",
        &["`cv2` (the PyPI project `opencv-python`) is compiled (C-extension) code"],
    ),
    (
        "docxish.py",
        "import docx\n",
        &[
            "the PyPI project `python-docx`",
            "skillbox prepare hostile --with python-docx==VERSION",
        ],
    ),
    (
        "cryptoish.py",
        "import Crypto\n",
        &["the PyPI project `pycryptodome`", "only compiled wheels"],
    ),
    (
        "caught.py",
        "import sys\ntry:\n    open('/workspace/out.txt', 'w')\nexcept OSError as e:\n    print('Error:', e)\n    sys.exit(1)\n",
        &[
            "the workspace is read-only for this script",
            "skillbox grant hostile --workspace write",
        ],
    ),
    (
        "office_caught.py",
        "import socket, sys\nSOFFICE = 'soffice'\ntry:\n    socket.socket(socket.AF_UNIX).connect('/tmp/lo.sock')\nexcept Exception as e:\n    print('Error:', e)\n    sys.exit(1)\n",
        &["drives LibreOffice (`soffice`)", "no sockets"],
    ),
    (
        "pdfinfo.py",
        "import subprocess\nclass PDFInfoNotInstalledError(Exception):\n    pass\ntry:\n    subprocess.run(['pdfinfo', 'a.pdf'])\nexcept Exception:\n    raise PDFInfoNotInstalledError('Unable to get page count. Is poppler installed?')\n",
        &[
            "PDFInfoNotInstalledError",
            "skillbox grant hostile --program pdfinfo",
        ],
    ),
    (
        "office.py",
        "import socket\nSOFFICE = 'soffice'\nsocket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect('/tmp/lo.sock')\n",
        &["drives LibreOffice (`soffice`)", "no sockets"],
    ),
];

#[tokio::test]
async fn hostile_python_gets_its_precise_error_and_the_host_keeps_serving() {
    if !python_runtime() {
        return;
    }
    let mut files: Vec<(String, &str)> = HOSTILE
        .iter()
        .map(|(name, body, _)| (format!("scripts/{name}"), *body))
        .collect();
    files.push(("scripts/ok.py".into(), "print('still serving')\n"));
    let files: Vec<(&str, &str)> = files.iter().map(|(p, b)| (p.as_str(), *b)).collect();
    let skills = python_skill("hostile", &files);
    let ws = workspace(&[("a.txt", "a")]);
    let (client, _) = connect_stdio(&[
        "--skills",
        skills.path().to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
        "--tools",
        "all",
        "--fuel",
        "2000000000",
    ])
    .await;
    for (name, _, says) in HOSTILE {
        let result = call(
            &client,
            "run_script",
            json!({"skill": "hostile", "script": format!("scripts/{name}")}),
        )
        .await;
        let all = serde_json::to_string(&result).unwrap();
        for part in *says {
            assert!(all.contains(part), "{name}: lacks {part:?}: {all}");
        }
        assert!(
            !all.contains("/tmp/skillbox") && !all.contains(skills.path().to_str().unwrap()),
            "{name}: a host path leaked: {all}"
        );
    }
    let ok = call(
        &client,
        "run_script",
        json!({"skill": "hostile", "script": "scripts/ok.py"}),
    )
    .await;
    assert_says(&ok, &["still serving"]);
    client.cancel().await.unwrap();
}

const COMMAND_SKILL: &[(&str, &str)] = &[
    (
        "scripts/greet.py",
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--name')\np.add_argument('words', nargs='*')\na = p.parse_args()\nprint('hello', a.name, '+'.join(a.words))\n",
    ),
    ("scripts/setup.sh", "echo setting up\n"),
];

/// `run_script` by path and by command line, and what cannot run, on one
/// connected client.
async fn by_path_and_command_line(client: &skillbox_e2e::mcp::Client) {
    let loaded = call(client, "load_skill", json!({"name": "greeter"})).await;
    assert_says(
        &loaded,
        &[
            "`scripts/greet.py`",
            "python3 scripts/greet.py",
            "`scripts/setup.sh`: a shell script",
            "skillbox grant greeter --program sh",
            "a granted shell runs in the OS sandbox",
        ],
    );
    let scripts = &loaded.structured_content.as_ref().unwrap()["scripts"];
    assert_eq!(scripts[0]["name"], "scripts/greet.py", "{scripts}");

    let by_path = call(
        client,
        "run_script",
        json!({"skill": "greeter", "script": "scripts/greet.py", "args": ["--name", "Ada", "x"]}),
    )
    .await;
    assert_eq!(by_path.is_error, Some(false), "{by_path:?}");
    assert_says(&by_path, &["hello Ada x"]);

    let by_command = call(
        client,
        "run_script",
        json!({"skill": "greeter", "command": "python3 scripts/greet.py --name 'Grace Hopper' a b"}),
    )
    .await;
    assert_says(&by_command, &["hello Grace Hopper a+b"]);
    let as_module = call(
        client,
        "run_script",
        json!({"skill": "greeter", "command": "python -m scripts.greet --name M"}),
    )
    .await;
    assert_says(&as_module, &["hello M"]);

    let piped = call(
        client,
        "run_script",
        json!({"skill": "greeter", "command": "python3 scripts/greet.py | sh"}),
    )
    .await;
    assert_tool_error(
        &piped,
        &["uses `|`, which needs a shell", "Nothing was run"],
    );
    let shell = call(
        client,
        "run_script",
        json!({"skill": "greeter", "command": "bash scripts/setup.sh"}),
    )
    .await;
    assert_tool_error(
        &shell,
        &[
            "is a shell script for `sh`",
            "no shell of its own",
            "--allow-program greeter:sh",
        ],
    );
    let missing = call(
        client,
        "run_script",
        json!({"skill": "greeter", "script": "scripts/nope.py"}),
    )
    .await;
    assert_tool_error(
        &missing,
        &["has no script `scripts/nope.py`", "scripts/greet.py"],
    );
}

#[tokio::test]
async fn run_script_takes_a_path_or_the_command_line_on_both_revisions() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill("greeter", COMMAND_SKILL);
    let dir = skills.path().to_str().unwrap();

    let (session, _) = connect_stdio(&["--skills", dir, "--tools", "all"]).await;
    by_path_and_command_line(&session).await;
    session.cancel().await.unwrap();

    let (_server, url) = serve_http(&["--skills", dir, "--tools", "all"]);
    let stateless = connect_stateless(Recorder::default(), &url).await;
    by_path_and_command_line(&stateless).await;
    stateless.cancel().await.unwrap();

    // The same over the raw 2026-07-28 wire, with the arguments as a model
    // sends them.
    let http = reqwest::Client::new();
    let result = stateless_call(
        &http,
        &url,
        "run_script",
        json!({"skill": "greeter", "command": "python3 scripts/greet.py --name raw"}),
        json!({}),
    )
    .await
    .unwrap();
    assert!(result.to_string().contains("hello raw"), "{result}");
}

#[test]
fn the_bundled_data_skill_answers_with_its_python_script() {
    if !python_runtime() {
        return;
    }
    let examples = skillbox_e2e::examples();
    let out = run(&[
        "run-script",
        "--workspace",
        &examples,
        "--script",
        "data-peek/scripts/sample_rows.py",
        "--",
        "data/orders.csv",
        "--where",
        "paid=false",
        "--rows",
        "1",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let sample: Value = serde_json::from_str(&out.stdout).unwrap();
    let unpaid = std::fs::read_to_string(Path::new(&examples).join("data/orders.csv"))
        .unwrap()
        .lines()
        .filter(|l| l.split(',').nth(5) == Some("false"))
        .count();
    assert_eq!(sample["matched"], json!(unpaid), "{sample}");
    assert_eq!(sample["rows"][0]["paid"], "false", "{sample}");

    let unknown = run(&[
        "run-script",
        "--workspace",
        &examples,
        "--script",
        "data-peek/scripts/sample_rows.py",
        "--",
        "data/orders.csv",
        "--where",
        "colour=red",
    ]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    unknown.stderr_says(&["no column 'colour'", "order_id"]);
}

#[test]
fn fifos_and_links_out_of_the_workspace_are_refused_and_exit_codes_hold() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "edges",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            (
                "scripts/open.py",
                "import sys\nprint(open(sys.argv[1]).read(10))\n",
            ),
            (
                "scripts/link.py",
                "import os, sys\nos.symlink(sys.argv[1], 'made-link')\nprint('linked')\n",
            ),
            (
                "scripts/break.py",
                "import sys, traceback\ntraceback.TracebackException = None\nif sys.argv[1] == 'close':\n    sys.stderr.close()\nraise ValueError('x')\n",
            ),
            (
                "scripts/exit.py",
                "import os, sys\nif sys.argv[1] == 'os':\n    os._exit(7)\nsys.exit(int(sys.argv[1]))\n",
            ),
        ],
    );
    let fifo = |path: &Path| {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    };
    fifo(&skills.path().join("edges/fifo"));
    let ws = workspace(&[("a.txt", "a")]);
    fifo(&ws.path().join("pipe"));
    let ws_arg = ws.path().to_str().unwrap();
    let write = [
        "--workspace",
        ws_arg,
        "--allow-write",
        "--timeout-ms",
        "20000",
    ];

    // Opening a FIFO would hold a host thread until a writer came.
    for target in ["/skill/fifo", "/workspace/pipe"] {
        let out = run_script(skills.path(), "edges/scripts/open.py", &write, &[target]);
        assert_eq!(out.code, 1, "{target}: {out:?}");
        out.stderr_says(&["is a FIFO, socket or device, which the sandbox never opens"]);
    }

    // A link that leads out of the workspace is refused; one inside is not.
    let out = run_script(
        skills.path(),
        "edges/scripts/link.py",
        &write,
        &["../../../etc/passwd"],
    );
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["must point inside"]);
    assert!(std::fs::symlink_metadata(ws.path().join("made-link")).is_err());
    let out = run_script(skills.path(), "edges/scripts/link.py", &write, &["a.txt"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made-link")).unwrap(),
        "a"
    );

    // A script that breaks Python's error reporting still fails cleanly.
    let out = run_script(skills.path(), "edges/scripts/break.py", &[], &["keep"]);
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["ValueError: x"]);
    assert!(!out.stderr.contains("runner.py"), "{out:?}");
    let out = run_script(skills.path(), "edges/scripts/break.py", &[], &["close"]);
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["its error could not be shown"]);
    assert!(
        !out.stderr.contains("runner.py") && !out.stderr.contains("wasm trap"),
        "{out:?}"
    );

    // Each exit is the command's, and the audit tells success from
    // failure by it.
    let state = tempfile::tempdir().unwrap();
    let codes = [("os", 7), ("256", 1), ("3", 3), ("0", 0)];
    for (arg, code) in codes {
        let out: Run = skillbox()
            .env("SKILLBOX_STATE_DIR", state.path())
            .args(["run-script", "--skills"])
            .arg(skills.path())
            .args(["--script", "edges/scripts/exit.py", "--", arg])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, code, "exit {arg}: {out:?}");
    }
    let audit = std::fs::read_to_string(state.path().join("audit.jsonl")).unwrap();
    let recorded: Vec<(i64, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| (r["exit_code"].as_i64().unwrap(), r["outcome"].to_string()))
        .collect();
    let expected: Vec<(i64, String)> = codes
        .iter()
        .map(|(_, code)| {
            let outcome = if *code == 0 { "ok" } else { "nonzero_exit" };
            (i64::from(*code), format!("\"{outcome}\""))
        })
        .collect();
    assert_eq!(recorded, expected, "{audit}");
}

/// A FIFO put where a file was, after the guard looked and before the
/// open (the worst moment for a process racing the call), never reaches the
/// script and never holds the server: an open that returns is refused, in
/// the staged workspace and in `/tmp` alike, and one that waits for a
/// writer waits on the host's blocking pool, so the call still ends at its
/// deadline and the next call is answered.
#[tokio::test]
async fn a_fifo_swapped_in_before_the_open_never_holds_the_server() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "racer",
        &[(
            "scripts/open.py",
            "import os, sys\nmode, path = sys.argv[1:]\nif path.startswith('/tmp/'):\n    with open('/tmp/made.txt', 'w') as f:\n        f.write('made')\n    os.rename('/tmp/made.txt', path)\nwith open(path, mode) as f:\n    print('read', f.read(10))\n",
        )],
    );
    let ws = workspace(&[
        ("swap-1.txt", "one"),
        ("swap-2.txt", "two"),
        ("kept.txt", "kept"),
    ]);
    let (_server, url) = serve_http_with_env(
        &[
            "--skills",
            skills.path().to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--grant",
            "racer:workspace=write",
            "--grant",
            "racer:timeout-ms=3000",
        ],
        &[("SKILLBOX_TEST_FIFO_BEFORE_OPEN", "swap-")],
    );
    // A server whose open held the call's thread would never answer.
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let run = |mode: &str, path: &str| {
        let args = json!({"skill": "racer", "script": "scripts/open.py", "args": [mode, path]});
        let http = http.clone();
        let url = url.clone();
        async move {
            stateless_call(&http, &url, "run_script", args, json!({}))
                .await
                .unwrap()
                .to_string()
        }
    };
    // Read and write: Linux opens a FIFO so without waiting.
    for path in ["/workspace/swap-1.txt", "/tmp/swap-3.txt"] {
        let said = run("r+", path).await;
        assert!(
            said.contains("is a FIFO, socket or device"),
            "{path}: {said}"
        );
        assert!(!said.contains("read "), "{path}: {said}");
    }
    // Read only: the open waits for a writer that never comes.
    let said = run("r", "/workspace/swap-2.txt").await;
    assert!(said.contains("wall-clock limit"), "{said}");
    let said = run("r", "/workspace/kept.txt").await;
    assert!(said.contains("read kept"), "{said}");
}

/// A file opened with `create` but not for writing is, when it exists,
/// the user's own file: a write through that handle (a direct WASI call,
/// which wasmtime-wasi would let through) never reaches it, in a dry run
/// or a call that commits.
#[test]
fn a_file_opened_to_create_but_not_write_is_never_written_in_place() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "creator",
        &[(
            "scripts/poke.py",
            "import os\nfd = os.open('/workspace/a.txt', os.O_CREAT | os.O_RDONLY)\ntry:\n    os.write(fd, b'EVIL')\nexcept OSError as e:\n    print('refused:', e)\ntry:\n    os.open('/workspace/d', os.O_CREAT | os.O_RDONLY)\nexcept OSError as e:\n    print('folder:', e)\n",
        )],
    );
    let ws = workspace(&[("a.txt", "original"), ("d/b.txt", "b")]);
    let grant = [
        "--workspace",
        ws.path().to_str().unwrap(),
        "--grant",
        "creator:workspace=write",
    ];
    for mode in [&["--dry-run"][..], &[]] {
        let flags: Vec<&str> = grant.iter().chain(mode).copied().collect();
        let out = run_script(skills.path(), "creator/scripts/poke.py", &flags, &[]);
        assert_eq!(out.code, 0, "{mode:?}: {out:?}");
        out.stdout_says(&[
            "refused:",
            "Bad file descriptor",
            "folder:",
            "Is a directory",
        ]);
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "original",
            "{mode:?}"
        );
    }
}

#[test]
fn a_missing_or_damaged_runtime_says_how_to_install_it() {
    let skills = python_skill("plain", &[("scripts/hi.py", "print('hi')\n")]);
    let damaged = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(damaged.path(), "not a component").unwrap();
    for (runtime, says) in [
        ("", "which is not installed here"),
        (damaged.path().to_str().unwrap(), "could not be loaded"),
    ] {
        let out: Run = skillbox()
            .args(["run-script", "--skills", skills.path().to_str().unwrap()])
            .args(["--script", "plain/scripts/hi.py"])
            .env("SKILLBOX_PYTHON_RUNTIME", runtime)
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 1, "{out:?}");
        out.stderr_says(&[says, "scripts/install"]);
        assert!(
            !out.stderr.contains(damaged.path().to_str().unwrap()),
            "{out:?}"
        );
    }
}

/// The first run on a machine compiles the runtime: quickly with the
/// baseline compiler, so the script's output comes within a second or two,
/// then optimized in the background; the command waits for that before it
/// exits, saying so at a terminal, so the next run starts from the cache.
/// `script` (util-linux) gives the command a terminal.
#[test]
fn the_first_run_at_a_terminal_shows_the_runtime_compiling() {
    if !python_runtime() {
        return;
    }
    let Ok(found) = std::process::Command::new("script")
        .arg("--version")
        .output()
    else {
        eprintln!("skipped: util-linux's `script` is not installed");
        return;
    };
    assert!(found.status.success(), "{found:?}");
    let empty_cache = tempfile::tempdir().unwrap();
    let at_a_terminal = || {
        let command = format!(
            "{} run-code 'print(6 * 7)'",
            skillbox_e2e::skillbox_bin().display()
        );
        let out = std::process::Command::new("script")
            .args(["--quiet", "--return", "--command", &command, "/dev/null"])
            .envs(skillbox_e2e::hermetic_env())
            .env("SKILLBOX_CACHE_DIR", empty_cache.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = at_a_terminal();
    let lines: Vec<&str> = shown.lines().map(str::trim).collect();
    let output = lines.iter().position(|line| *line == "42");
    assert!(output.is_some(), "{shown}");
    // The output does not wait for the optimizing compile: whatever the
    // machine's speed, it comes before any word of finishing it.
    let finishing = lines
        .iter()
        .position(|line| line.contains("finishing the optimized compile of runtimes/python.wasm"));
    if let Some(finishing) = finishing {
        assert!(output < Some(finishing), "{shown}");
    }
    // A compile long enough to be announced is announced as the quick one.
    if shown.contains("skillbox: compiling") {
        assert!(shown.contains("quickly for its first run"), "{shown}");
    }
    assert!(
        !shown.contains(empty_cache.path().to_str().unwrap()),
        "{shown}"
    );
    // The optimized code was kept before the first command exited.
    let kept = std::fs::read_dir(empty_cache.path().join("components"))
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".cwasm"))
        .count();
    assert!(kept > 0, "no compiled code kept after the first run");
    let again = at_a_terminal();
    assert!(again.lines().any(|line| line.trim() == "42"), "{again}");
    assert!(!again.contains("compil"), "{again}");
}

/// Every `.pyc` file under `dir`.
fn pycs_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(pycs_under(&path));
        } else if path.extension().is_some_and(|e| e == "pyc") {
            found.push(path);
        }
    }
    found
}
