//! Scripts that start programs: Python children run by the runtime
//! itself, and programs of the host's the user granted a skill, each in
//! the OS sandbox (bubblewrap over a kernel overlay of the workspace) with
//! the call's grants, limits, staging and audit. Real programs from
//! Debian's packages: `pdftoppm` (poppler-utils) and `bash`, the latter as
//! the hostile program that tries to get out.

use std::path::Path;

use serde_json::Value;
use skillbox_e2e::{host_programs, python_runtime, python_skill, run_script, workspace};

/// The audit records of `skill`, newest last.
fn audit_of(skill: &str) -> Vec<Value> {
    let state = skillbox_e2e::hermetic_env()
        .into_iter()
        .find(|(key, _)| *key == "XDG_STATE_HOME")
        .unwrap()
        .1;
    std::fs::read_to_string(state.join("skillbox/audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["skill"] == skill)
        .collect()
}

/// A PDF of `pages` pages, each saying its number: small enough to build
/// here, real enough for poppler.
fn tiny_pdf(pages: usize) -> Vec<u8> {
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {pages} >>",
            (0..pages)
                .map(|i| format!("{} 0 R", 4 + 2 * i))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    for page in 0..pages {
        let content = 5 + 2 * page;
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents {content} 0 R \
             /Resources << /Font << /F1 3 0 R >> >> >>"
        ));
        let text = format!("BT /F1 24 Tf 20 100 Td (Page {}) Tj ET", page + 1);
        objects.push(format!(
            "<< /Length {} >>\nstream\n{text}\nendstream",
            text.len()
        ));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

const CHILDREN: &str = r#"
import json, subprocess, sys
done = subprocess.run([sys.executable, "helper.py", "one", "two"], capture_output=True, text=True)
text = subprocess.check_output(["python3", "-c", "import sys; print(sys.stdin.read().upper())"],
                               input="piped", text=True)
proc = subprocess.Popen([sys.executable, "helper.py", "fail"], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT)
out, _ = proc.communicate()
try:
    subprocess.run([sys.executable, "helper.py", "fail"], check=True, capture_output=True)
    raised = False
except subprocess.CalledProcessError as e:
    raised = e.returncode
print(json.dumps({"run": [done.returncode, done.stdout, done.stderr], "upper": text,
                  "popen": [proc.returncode, out.decode()], "raised": raised,
                  "argv_after": sys.argv[1:]}))
"#;

const HELPER: &str = r#"
import os, sys
if sys.argv[1:] == ["fail"]:
    print("failing", file=sys.stderr)
    sys.exit(4)
with open("/workspace/child.txt", "w") as f:
    f.write(" ".join(sys.argv[1:]))
print("child saw", sys.argv[1:], os.getcwd())
"#;

/// A Python child (`sys.executable`, `python3`) runs in the sandbox's own
/// Python with its own argv and streams, its writes staged with the
/// parent's; and it shares the parent's limits: a child that loops uses
/// up the call's fuel, not a budget of its own.
#[test]
fn python_children_run_in_the_sandbox_and_share_the_call_s_limits() {
    if !python_runtime() {
        return;
    }
    let skills = python_skill(
        "kids",
        &[
            ("scripts/parent.py", CHILDREN),
            (
                "scripts/loop.py",
                "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'while True: pass'])\n",
            ),
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
        ],
    );
    let ws = workspace(&[("helper.py", HELPER)]);
    let ws_arg = ws.path().to_str().unwrap();
    let out = run_script(
        skills.path(),
        "kids/scripts/parent.py",
        &["--workspace", ws_arg, "--allow-write"],
        &["a"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let seen: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(seen["run"][0], 0, "{seen}");
    assert_eq!(
        seen["run"][1], "child saw ['one', 'two'] /workspace\n",
        "{seen}"
    );
    assert_eq!(seen["upper"], "PIPED\n");
    assert_eq!(seen["popen"], serde_json::json!([4, "failing\n"]));
    assert_eq!(seen["raised"], 4);
    assert_eq!(
        seen["argv_after"],
        serde_json::json!(["a"]),
        "the parent's argv came back"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("child.txt")).unwrap(),
        "one two"
    );

    let out = run_script(
        skills.path(),
        "kids/scripts/loop.py",
        &["--workspace", ws_arg, "--fuel", "300000000"],
        &[],
    );
    assert_ne!(out.code, 0, "{out:?}");
    out.stderr_says(&["out of fuel", "300000000 instructions"]);
}

const TO_PNG: &str = r#"
import os, shutil, subprocess, sys
print("which", shutil.which("pdftoppm"))
done = subprocess.run(["pdftoppm", "-png", "-r", "30", sys.argv[1], "pages/page"],
                      capture_output=True, text=True)
print("exit", done.returncode, done.stderr.strip())
print(sorted(os.listdir("pages")))
"#;

/// Anthropic's PDF skill's image step, as a script: `pdftoppm` turns a PDF
/// in the workspace into PNGs. Without the grant it is refused with the
/// command that grants it, and nothing is written; with it, it runs in
/// the OS sandbox, its files are staged (a dry run writes nothing) and
/// then committed, and the audit names the program, its arguments and
/// its exit code.
#[test]
fn a_granted_program_turns_a_pdf_into_pngs_with_its_writes_staged() {
    if !python_runtime() || !host_programs() {
        return;
    }
    let skills = python_skill(
        "pdfpages",
        &[("scripts/to_png.py", TO_PNG), ("scripts/fails.py", FAILS)],
    );
    let ws = workspace(&[("pages/.keep", "")]);
    std::fs::write(ws.path().join("report.pdf"), tiny_pdf(3)).unwrap();
    let ws_arg = ws.path().to_str().unwrap();
    let write = ["--workspace", ws_arg, "--grant", "pdfpages:workspace=write"];
    let pngs = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(ws.path().join("pages"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".png"))
            .collect();
        names.sort();
        names
    };

    let refused = run_script(
        skills.path(),
        "pdfpages/scripts/to_png.py",
        &write,
        &["report.pdf"],
    );
    assert_ne!(refused.code, 0, "{refused:?}");
    refused.stderr_says(&[
        "`pdftoppm` is a program of the host's",
        "skillbox grant pdfpages --program pdftoppm",
        "--allow-program pdfpages:pdftoppm",
    ]);
    assert!(pngs().is_empty(), "a refused program wrote");
    let record = audit_of("pdfpages").pop().unwrap();
    assert_eq!(record["programs"][0]["outcome"], "refused", "{record}");

    let mut granted = write.to_vec();
    granted.extend(["--allow-program", "pdfpages:pdftoppm"]);
    let mut dry = granted.clone();
    dry.push("--dry-run");
    let out = run_script(
        skills.path(),
        "pdfpages/scripts/to_png.py",
        &dry,
        &["report.pdf"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["exit 0", "'page-1.png', 'page-2.png', 'page-3.png'"]);
    assert!(pngs().is_empty(), "a dry run wrote: {out:?}");

    let out = run_script(
        skills.path(),
        "pdfpages/scripts/to_png.py",
        &granted,
        &["report.pdf"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["which /usr/bin/pdftoppm", "exit 0"]);
    out.stderr_says(&["workspace: committed", "pages/page-1.png"]);
    assert_eq!(pngs(), ["page-1.png", "page-2.png", "page-3.png"]);
    for name in pngs() {
        let bytes = std::fs::read(ws.path().join("pages").join(&name)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name} is not a PNG");
        // 200 pt at 30 dpi: 83 pixels square.
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        assert_eq!(width, 84, "{name}");
    }
    // A script that fails after its program failed is told which, and
    // what it said.
    let out = run_script(skills.path(), "pdfpages/scripts/fails.py", &granted, &[]);
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&[
        "RuntimeError: Image conversion failed",
        "skillbox: `pdftoppm`, which the script started, exited with 1",
        "missing.pdf",
    ]);
    assert!(!out.stderr.contains("socket"), "{out:?}");

    let record = audit_of("pdfpages")
        .into_iter()
        .rev()
        .find(|r| r["component"] == "scripts/to_png.py")
        .unwrap();
    let program = &record["programs"][0];
    assert_eq!(program["program"], "/usr/bin/pdftoppm", "{record}");
    assert_eq!(program["outcome"], "ok");
    assert_eq!(program["exit_code"], 0);
    assert_eq!(
        program["args"],
        serde_json::json!(["-png", "-r", "30", "report.pdf", "pages/page"])
    );
    assert!(
        record["grants"]
            .as_str()
            .unwrap()
            .contains("programs pdftoppm"),
        "{record}"
    );
}

/// A skill's own shell script, run with the shell the user granted the
/// skill: text plumbing through a pipe of grep, sed, awk and jq, its
/// arguments and stdin, a write to the workspace staged like any other,
/// and its exit status. Without the grant it is refused, and nothing runs.
#[test]
fn a_skill_s_shell_script_runs_with_the_granted_shell_and_its_writes_staged() {
    if !python_runtime() || !host_programs() {
        return;
    }
    if !Path::new("/usr/bin/jq").is_file() {
        assert!(
            std::env::var_os("SKILLBOX_REQUIRE_PROGRAMS").is_none(),
            "jq is required (Debian's jq)"
        );
        return;
    }
    let skills = python_skill(
        "textkit",
        &[
            ("scripts/count.sh", COUNT_SH),
            ("scripts/posix.sh", POSIX_SH),
            ("scripts/not_shell.sh", "#!/usr/bin/python3\nprint('hi')\n"),
        ],
    );
    let ws = workspace(&[(
        "notes.json",
        r##"[{"text": "Hello, World!"}, {"text": "# a heading"}, {"text": "one two three"}]"##,
    )]);
    let ws_arg = ws.path().to_str().unwrap();
    let write = ["--workspace", ws_arg, "--grant", "textkit:workspace=write"];
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), "from stdin").unwrap();
    let count = |flags: &[&str]| {
        let mut flags = flags.to_vec();
        flags.extend(["--stdin", input.path().to_str().unwrap()]);
        run_script(
            skills.path(),
            "textkit/scripts/count.sh",
            &flags,
            &["notes.json", "two words"],
        )
    };

    let refused = count(&write);
    assert_ne!(refused.code, 0, "{refused:?}");
    refused.stderr_says(&[
        "`scripts/count.sh` is a shell script for `bash`",
        "skillbox grant textkit --program bash",
        "--allow-program textkit:bash",
    ]);
    assert!(!ws.path().join("summary.txt").exists());

    let mut granted = write.to_vec();
    granted.extend(["--allow-program", "textkit:bash"]);
    let mut dry = granted.clone();
    dry.push("--dry-run");
    let out = count(&dry);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!ws.path().join("summary.txt").exists(), "a dry run wrote");

    let out = count(&granted);
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&[
        "words 5",
        "hello world",
        "args 2 [two words]",
        "stdin [from stdin]",
    ]);
    out.stderr_says(&["workspace: committed", "summary.txt"]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("summary.txt")).unwrap(),
        "words 5\n"
    );
    let record = audit_of("textkit")
        .into_iter()
        .rev()
        .find(|r| r["component"] == "scripts/count.sh")
        .unwrap();
    let program = &record["programs"][0];
    assert_eq!(program["program"], "/usr/bin/bash", "{record}");
    assert_eq!(program["exit_code"], 0, "{record}");

    // A POSIX `sh` script runs under the granted bash; its status is the
    // call's, and what it printed before failing is kept.
    let out = run_script(
        skills.path(),
        "textkit/scripts/posix.sh",
        &granted,
        &["a b", "c"],
    );
    assert_eq!(out.code, 3, "{out:?}");
    out.stdout_says(&["first [a b]", "count 2"]);
    out.stderr_says(&["giving up"]);
    assert!(!out.stderr.contains("which the script started"), "{out:?}");

    // A `#!` line that names no shell is refused before anything runs.
    let out = run_script(skills.path(), "textkit/scripts/not_shell.sh", &granted, &[]);
    assert_ne!(out.code, 0, "{out:?}");
    out.stderr_says(&["asks for `python3`, which is not a shell"]);
}

const COUNT_SH: &str = r#"#!/usr/bin/env bash
set -euo pipefail
input="/workspace/$1"
words=$(jq -r '.[].text' "$input" | grep -v '^#' | sed 's/[^A-Za-z ]//g' | awk '{ n += NF } END { print n }')
echo "words $words"
jq -r '.[0].text' "$input" | tr 'A-Z' 'a-z' | sed 's/[^a-z ]//g'
echo "args $# [$2]"
echo "stdin [$(cat)]"
echo "words $words" > /workspace/summary.txt
"#;

const POSIX_SH: &str = r#"#!/bin/sh
echo "first [$1]"
echo "count $#"
echo "giving up" >&2
exit 3
"#;

const FAILS: &str = r#"
import subprocess
# As the public pptx skill's thumbnail.py reports it (it also starts soffice).
done = subprocess.run(["pdftoppm", "-jpeg", "missing.pdf", "slide"], capture_output=True)
if done.returncode != 0:
    raise RuntimeError("Image conversion failed")
"#;

const SHELL: &str = r#"
import subprocess, sys
done = subprocess.run(["bash", "-c", sys.argv[1]], capture_output=True, text=True)
print("exit", done.returncode)
print(done.stdout)
print(done.stderr, file=sys.stderr)
"#;

const ENV: &str = r#"
import socket, subprocess
done = subprocess.run(["bash", "-c", "echo pre=[$LD_PRELOAD] lib=[$LD_LIBRARY_PATH] kept=[$KEPT]"],
                      env={"LD_PRELOAD": "/tmp/evil.so", "LD_LIBRARY_PATH": "/tmp", "KEPT": "yes"},
                      capture_output=True, text=True)
print(done.stdout.strip(), done.stderr.strip())
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
try:
    socket.socket(socket.AF_UNIX).connect("/tmp/lo.sock")
except OSError as e:
    print("connect refused", e.errno)
"#;

const BIG: &str = r#"
import subprocess
out = subprocess.run(["bash", "-c", "head -c 3000000 /dev/zero"], capture_output=True).stdout
print("got", len(out))
"#;

const WAIT: &str = r#"
import subprocess
try:
    subprocess.run(["bash", "-c", "echo started; sleep 4444"], timeout=1, capture_output=True)
except subprocess.TimeoutExpired as e:
    print("timed out after", e.timeout, "with", e.output)
print("then went on")
"#;

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .count()
}

/// A granted program that tries to get out: a shell (the most any skill
/// could be granted) reading what it was not given, reaching the network,
/// forking without end, writing past the quota, outliving the call and
/// leaving a process behind. Each is stopped; nothing outside the grants
/// is read or written; and the next call runs.
#[test]
fn a_hostile_granted_program_is_held_to_its_sandbox() {
    if !python_runtime() || !host_programs() {
        return;
    }
    let skills = python_skill(
        "shelly",
        &[
            ("scripts/sh.py", SHELL),
            ("scripts/wait.py", WAIT),
            ("scripts/env.py", ENV),
            ("scripts/big.py", BIG),
        ],
    );
    let ws = workspace(&[("a.txt", "workspace file\n")]);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "host secret").unwrap();
    let ws_arg = ws.path().to_str().unwrap();
    let granted = [
        "--workspace",
        ws_arg,
        "--grant",
        "shelly:workspace=write",
        "--allow-program",
        "shelly:bash",
    ];
    let sh = |command: &str, extra: &[&str]| {
        let mut flags = granted.to_vec();
        flags.extend(extra);
        run_script(skills.path(), "shelly/scripts/sh.py", &flags, &[command])
    };

    // What it was not given is not there at all.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let out = sh(
        &format!(
            "cat /etc/shadow; cat {}/secret.txt; ls {home}; ls /proc | grep -c '^[0-9]'; cat /workspace/a.txt",
            outside.path().display()
        ),
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stderr_says(&["/etc/shadow: No such file", "secret.txt: No such file"]);
    assert!(!out.stdout.contains("host secret"), "{out:?}");
    out.stdout_says(&["workspace file"]);
    let visible: usize = out
        .stdout
        .lines()
        .find_map(|l| l.trim().parse().ok())
        .unwrap();
    assert!(visible <= 4, "it sees {visible} processes: {out:?}");

    // No network, even to a listener on loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let out = sh(
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
        &[],
    );
    assert!(!out.stdout.contains("connected"), "{out:?}");
    assert!(listener.accept().is_err(), "a connection arrived");

    // A fork bomb meets the process bound, and the call still ends. The
    // shell waits one to two seconds (`SECONDS` counts whole seconds) with
    // builtins alone: once the bound is met, a `sleep` could not be
    // started, and bash exits when it cannot fork.
    let out = sh(
        "f(){ f|f& }; f; SECONDS=0; while (( SECONDS < 2 )); do :; done; echo bounded",
        &["--timeout-ms", "20000"],
    );
    out.stdout_says(&["bounded"]);
    out.stderr_says(&["fork", "Resource temporarily unavailable"]);
    assert_eq!(processes_with("f|f&"), 0, "the bomb outlived the call");

    // Writing past the workspace quota stops the call; nothing is written.
    let out = sh(
        "head -c 3000000 /dev/zero > /workspace/big.bin; echo wrote",
        &["--workspace-quota-mib", "1"],
    );
    assert_ne!(out.code, 0, "{out:?}");
    out.stderr_says(&["workspace quota"]);
    assert!(!ws.path().join("big.bin").exists());

    // Outliving the call's wall clock: the whole tree is killed.
    let out = sh("sleep 4242; echo late", &["--timeout-ms", "2000"]);
    out.stderr_says(&["timeout", "2000 ms"]);
    assert_eq!(
        processes_with("sleep 4242"),
        0,
        "the program outlived the call"
    );

    // The script's own timeout kills the program; the script goes on.
    let out = run_script(skills.path(), "shelly/scripts/wait.py", &granted, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["timed out after 1 with b'started\\n'", "then went on"]);
    assert_eq!(
        processes_with("sleep 4444"),
        0,
        "the program outlived its timeout"
    );

    // What a program prints reaches the script whole past the call's own
    // output cap (a rendered page is megabytes), up to its /tmp quota.
    let big = "head -c 3000000 /dev/zero | tr '\\0' a";
    let out = sh(
        &format!("{big} | wc -c; {big}"),
        &["--max-output-bytes", "4000000"],
    );
    out.stdout_says(&["exit 0", "3000000"]);
    let out = run_script(skills.path(), "shelly/scripts/big.py", &granted, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["got 3000000"]);
    let mut small = granted.to_vec();
    small.extend(["--scratch-quota-mib", "1"]);
    let out = run_script(skills.path(), "shelly/scripts/big.py", &small, &[]);
    out.stdout_says(&["got 1048576"]);
    out.stderr_says(&["printed more than this call keeps", "--scratch-quota-mib"]);

    // A library the script names for the program is not loaded, and a
    // Unix socket of the script's own can be made (the probe scripts use
    // before starting soffice) but not used.
    let out = run_script(skills.path(), "shelly/scripts/env.py", &granted, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["pre=[] lib=[] kept=[yes]", "connect refused 95"]);

    // A process left behind on purpose goes with the program.
    let out = sh("(setsid sleep 4343 >/dev/null 2>&1 &); echo left", &[]);
    out.stdout_says(&["left"]);
    assert_eq!(processes_with("sleep 4343"), 0, "a process was left behind");

    // And the next call runs, its change staged and committed.
    let out = sh("echo fine > /workspace/after.txt; echo ok", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("after.txt")).unwrap(),
        "fine\n"
    );
}

const DOOR: &str = r#"
import json, os, sys
def ask(number, request, raw=None):
    with open(f"/run/skillbox/{number}.request", "w") as f:
        f.write(raw if raw is not None else json.dumps(request))
    with open(f"/run/skillbox/{number}.reply") as f:
        return json.load(f)
print(json.dumps([
    ask(1, None, raw="{not json"),
    ask(2, {"argv": []}),
    ask(3, {"argv": ["/tmp/pdftoppm", "-v"]}),
    ask(4, {"argv": ["bash", "-c", "id"]}),
    ask(5, {"argv": ["pdftoppm", "-v"], "cwd": "/../etc", "stdin": "!!"}),
    ask(6, {"argv": ["pdftoppm", "-v"], "cwd": "/../etc"}),
]))
# A script that keeps asking cannot grow the call's record past its bound,
# nor push a program that ran out of it.
for number in range(7, 7 + 300):
    ask(number, None, raw="{not json")
ask(400, {"argv": ["pdftoppm", "-v"]})
"#;

/// The door a script asks through, attacked directly: malformed requests,
/// a program granted by name but named by another path, one not granted,
/// a working folder outside the mounts. Each gets an answer that says
/// why, and only the granted program runs.
#[test]
fn the_door_to_host_programs_answers_forged_requests_with_refusals() {
    if !python_runtime() || !host_programs() {
        return;
    }
    let skills = python_skill("doorman", &[("scripts/door.py", DOOR)]);
    let out = run_script(
        skills.path(),
        "doorman/scripts/door.py",
        &["--allow-program", "doorman:pdftoppm"],
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let replies: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(replies[0]["kind"], "invalid", "{replies}");
    assert_eq!(replies[1]["kind"], "invalid");
    assert_eq!(
        replies[2]["kind"], "refused",
        "a granted name by another path"
    );
    assert_eq!(replies[3]["kind"], "refused");
    assert_eq!(replies[4]["kind"], "invalid", "stdin that is not base64");
    assert_eq!(replies[5]["returncode"], 0, "{replies}");
    let record = audit_of("doorman").pop().unwrap();
    let outcomes: Vec<&str> = record["programs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes[..6],
        ["invalid", "invalid", "refused", "refused", "invalid", "ok"],
        "{record}"
    );
    // Every attempt is accounted for: 256 refusals listed, the last
    // counting the 49 after it, beside the two runs; and the run after the
    // flood is listed.
    let programs = record["programs"].as_array().unwrap();
    assert_eq!(programs.len(), 258, "{record}");
    assert_eq!(programs[256]["program"], "?");
    assert_eq!(programs[256]["unrecorded_after"], 49, "{record}");
    assert!(programs[255].get("unrecorded_after").is_none());
    assert_eq!(programs[257]["program"], "/usr/bin/pdftoppm", "{record}");
    assert_eq!(programs[257]["outcome"], "ok");
}

const NUMPY_AND_PROGRAM: &str = r#"
import numpy, subprocess, sys
child = subprocess.run([sys.executable, "-c", "import numpy; print(numpy.arange(3).sum())"],
                       capture_output=True, text=True)
done = subprocess.run(["pdftoppm", "-png", "-r", "30", "one.pdf", "np"], capture_output=True)
print("child", child.stdout.strip(), "pdftoppm", done.returncode)
"#;

/// The full runtime (compiled packages) asks through the same door: a
/// script that imports numpy runs a numpy child and a granted program.
#[test]
fn the_full_runtime_starts_children_and_programs_too() {
    if !skillbox_e2e::python_full_runtime() || !host_programs() {
        return;
    }
    let skills = python_skill("nppages", &[("scripts/np.py", NUMPY_AND_PROGRAM)]);
    let ws = workspace(&[]);
    std::fs::write(ws.path().join("one.pdf"), tiny_pdf(1)).unwrap();
    let out = run_script(
        skills.path(),
        "nppages/scripts/np.py",
        &[
            "--workspace",
            ws.path().to_str().unwrap(),
            "--grant",
            "nppages:workspace=write",
            "--allow-program",
            "nppages:pdftoppm",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["child 3 pdftoppm 0"]);
    assert!(ws.path().join("np-1.png").is_file(), "{out:?}");
}

/// Whether LibreOffice is installed here (CI installs Debian's
/// libreoffice-writer and libreoffice-calc).
fn libreoffice() -> bool {
    let found = Path::new("/usr/bin/soffice").exists();
    if !found && std::env::var_os("SKILLBOX_REQUIRE_PROGRAMS").is_some() {
        panic!(
            "LibreOffice (soffice) is required: apt install libreoffice-writer libreoffice-calc"
        );
    }
    if !found {
        eprintln!("skipped: LibreOffice is not installed");
    }
    found
}

/// Makes `memo.docx` in `dir` with the host's own LibreOffice.
fn make_docx(dir: &Path, text: &str) {
    let profile = tempfile::tempdir().unwrap();
    std::fs::write(dir.join("memo.txt"), text).unwrap();
    let out = std::process::Command::new("soffice")
        .args(["--headless", "--convert-to", "docx", "--outdir"])
        .arg(dir)
        .arg(dir.join("memo.txt"))
        .env("HOME", profile.path())
        .output()
        .unwrap();
    assert!(dir.join("memo.docx").is_file(), "{out:?}");
    std::fs::remove_file(dir.join("memo.txt")).unwrap();
}

const CONVERT: &str = r#"
import subprocess, sys
done = subprocess.run(["soffice", "--headless", "--convert-to", "pdf", "--outdir", "out", sys.argv[1]],
                      capture_output=True, text=True, timeout=120)
print("soffice exit", done.returncode)
"#;

const MAKE_MODEL: &str = r#"
import openpyxl
book = openpyxl.Workbook()
sheet = book.active
sheet["A1"], sheet["A2"] = 6, 7
sheet["A3"] = "=A1*A2"
sheet["B1"] = "=SUM(A1:A3)"
book.save("model.xlsx")
"#;

/// The public xlsx skill's way to recalculate a workbook: a LibreOffice
/// Basic macro put in the user profile, run by soffice on the file.
const RECALC: &str = r#"
import os, subprocess, sys
from openpyxl import load_workbook
MACRO = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE script:module PUBLIC "-//OpenOffice.org//DTD OfficeDocument 1.0//EN" "module.dtd">
<script:module xmlns:script="http://openoffice.org/2000/script" script:name="Module1" script:language="StarBasic">
    Sub RecalculateAndSave()
      ThisComponent.calculateAll()
      ThisComponent.store()
      ThisComponent.close(True)
    End Sub
</script:module>"""
folder = os.path.expanduser("~/.config/libreoffice/4/user/basic/Standard")
if not os.path.exists(folder):
    subprocess.run(["soffice", "--headless", "--terminate_after_init"], capture_output=True, timeout=60)
    os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "Module1.xba"), "w") as f:
    f.write(MACRO)
env = dict(os.environ, SAL_USE_VCLPLUGIN="svp")
done = subprocess.run(["soffice", "--headless", "--norestore",
                       "vnd.sun.star.script:Standard.Module1.RecalculateAndSave?language=Basic&location=application",
                       os.path.abspath(sys.argv[1])], capture_output=True, text=True, env=env)
sheet = load_workbook(sys.argv[1], data_only=True).active
print("soffice exit", done.returncode, "A3", sheet["A3"].value, "B1", sheet["B1"].value)
"#;

/// A cell's value as the workbook file caches it, read on the host with
/// Python's standard library alone.
const CACHED: &str = r#"
import re, sys, zipfile
sheet = zipfile.ZipFile(sys.argv[1]).read("xl/worksheets/sheet1.xml").decode()
cell = re.search(r'<c r="%s"[^>]*>(.*?)</c>' % sys.argv[2], sheet).group(1)
value = re.search(r"<v>(.*?)</v>", cell)
print(value.group(1) if value else "none")
"#;

fn host_python(code: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// LibreOffice, granted to a skill: a Word document in the workspace
/// becomes a PDF (read back on the host with pdftotext), and a workbook's
/// formulas are recalculated the way the public xlsx skill does it (a
/// Basic macro run by soffice; the cached values read back on the host).
/// Its writes are staged: over MCP, a declined confirmation leaves the
/// workspace as it was.
#[test]
fn libreoffice_converts_and_recalculates_with_its_writes_staged() {
    if !python_runtime() || !host_programs() || !libreoffice() {
        return;
    }
    let skills = python_skill(
        "office",
        &[
            ("scripts/convert.py", CONVERT),
            ("scripts/make_model.py", MAKE_MODEL),
            ("scripts/recalc.py", RECALC),
        ],
    );
    let ws = workspace(&[]);
    make_docx(ws.path(), "Quarterly memo\nAll figures are final.\n");
    let ws_arg = ws.path().to_str().unwrap();
    let granted = [
        "--workspace",
        ws_arg,
        "--grant",
        "office:workspace=write",
        "--allow-program",
        "office:soffice",
    ];

    // Over MCP with a confirmation: declined, nothing is written.
    if skillbox_e2e::python_sdk() {
        let arguments = serde_json::json!({
            "skill": "office", "script": "scripts/convert.py", "args": ["memo.docx"]
        });
        let out = std::process::Command::new("python3")
            .arg(skillbox_e2e::repo().join("tests/support/python/confirm_client.py"))
            .args(["decline", "run_script", &arguments.to_string()])
            .arg(skillbox_e2e::skillbox_bin())
            .args(["--tools", "all", "--confirm", "write", "--skills"])
            .arg(skills.path())
            .args(granted)
            .current_dir(skillbox_e2e::repo())
            .envs(skillbox_e2e::hermetic_env())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("out/memo.pdf"),
            "the question lacks the PDF: {said}"
        );
        assert!(
            !ws.path().join("out").exists(),
            "a declined call wrote: {said}"
        );
    }

    let out = run_script(
        skills.path(),
        "office/scripts/convert.py",
        &granted,
        &["memo.docx"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["soffice exit 0"]);
    let pdf = ws.path().join("out/memo.pdf");
    let text = std::process::Command::new("pdftotext")
        .arg(&pdf)
        .arg("-")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("All figures are final."), "{text}");

    let out = run_script(skills.path(), "office/scripts/make_model.py", &granted, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let model = ws.path().join("model.xlsx");
    let model = model.to_str().unwrap();
    let before = host_python(CACHED, &[model, "A3"]);
    assert!(
        before.is_empty() || before == "none",
        "openpyxl caches no value: {before}"
    );
    let out = run_script(
        skills.path(),
        "office/scripts/recalc.py",
        &granted,
        &["model.xlsx"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["soffice exit 0 A3 42 B1 55"]);
    assert_eq!(host_python(CACHED, &[model, "A3"]), "42");
    assert_eq!(host_python(CACHED, &[model, "B1"]), "55");
}

const GIT: &str = r#"
import subprocess, sys
def git(*args):
    done = subprocess.run(["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com",
                           "-c", "init.defaultBranch=main", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"git {args[0]} failed: {done.stderr}")
    return done.stdout
if sys.argv[1] == "init":
    git("init", "-q")
    git("add", "notes.txt")
    git("commit", "-q", "-m", "first notes")
else:
    with open("notes.txt", "a") as f:
        f.write("a second line\n")
    print(git("log", "--format=%s"), end="")
    print(git("diff", "--stat"), end="")
"#;

/// git, granted: `git init` and a commit write `.git`, staged like every
/// other write (a dry run leaves no repository), then committed; `git
/// log` and `git diff` read it back in a later call.
#[test]
fn git_in_the_workspace_writes_its_repository_through_the_stage() {
    if !python_runtime() || !host_programs() {
        return;
    }
    let skills = python_skill("gitty", &[("scripts/git.py", GIT)]);
    let ws = workspace(&[("notes.txt", "first line\n")]);
    let ws_arg = ws.path().to_str().unwrap();
    let granted = [
        "--workspace",
        ws_arg,
        "--grant",
        "gitty:workspace=write",
        "--allow-program",
        "gitty:git",
    ];
    let mut dry = granted.to_vec();
    dry.push("--dry-run");
    let out = run_script(skills.path(), "gitty/scripts/git.py", &dry, &["init"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !ws.path().join(".git").exists(),
        "a dry run made a repository"
    );

    let out = run_script(skills.path(), "gitty/scripts/git.py", &granted, &["init"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.stderr_says(&["workspace: committed", ".git/HEAD"]);
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout), "first notes\n");

    let out = run_script(skills.path(), "gitty/scripts/git.py", &granted, &["look"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["first notes", "notes.txt | 1 +"]);
}
