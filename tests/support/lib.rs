//! Shared set-up for the end-to-end tests: the built guest components, the
//! real `skillbox` binary, and scratch workspaces.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

pub mod fake_model;
pub mod issuer;
pub mod mcp;
pub mod registry;
pub mod web;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The folder of the built Rust guest components (this crate's build
/// script builds them before any test runs).
pub fn guests() -> &'static Path {
    Path::new(env!("SKILLBOX_E2E_GUESTS"))
}

/// The folder of the Python and JavaScript components, or `None` when a
/// toolchain was missing at build time (CI sets `SKILLBOX_REQUIRE_FOREIGN`,
/// so there the build fails instead).
pub fn foreign_components() -> Option<&'static Path> {
    let dir = env!("SKILLBOX_E2E_FOREIGN");
    (!dir.is_empty()).then(|| Path::new(dir))
}

/// Whether the official MCP Python SDK can be imported; CI requires it.
pub fn python_sdk() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .status()
        .is_ok_and(|s| s.success());
    if !found && std::env::var_os("SKILLBOX_REQUIRE_MCP_SDK").is_some() {
        panic!("the MCP Python SDK is required (pip install mcp)");
    }
    if !found {
        eprintln!("skipped: the MCP Python SDK is not installed (pip install mcp)");
    }
    found
}

/// Whether this host can run granted programs in the OS sandbox:
/// bubblewrap with user namespaces, and `pdftoppm` and `bash` to run. CI
/// installs them (`SKILLBOX_REQUIRE_PROGRAMS`); elsewhere the tests that
/// need them are skipped with a word.
pub fn host_programs() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let sandbox = Command::new("bwrap")
            .args(["--unshare-all", "--ro-bind", "/", "/", "true"])
            .status()
            .is_ok_and(|s| s.success());
        let programs = ["/usr/bin/pdftoppm", "/usr/bin/bash"]
            .iter()
            .all(|p| Path::new(p).is_file());
        let found = sandbox && programs;
        if !found && std::env::var_os("SKILLBOX_REQUIRE_PROGRAMS").is_some() {
            panic!("bubblewrap (with user namespaces), poppler-utils and bash are required");
        }
        if !found {
            eprintln!(
                "skipped: bubblewrap or pdftoppm is missing (apt install bubblewrap poppler-utils)"
            );
        }
        found
    })
}

/// Whether the Python runtime was built (`scripts/build-runtimes`) for the
/// binary under test, which finds it in `target/runtimes/`. Compiles it
/// into the shared test cache once per test process, so tests running at
/// once do not each compile it.
pub fn python_runtime() -> bool {
    static WARM: OnceLock<bool> = OnceLock::new();
    *WARM.get_or_init(|| {
        if env!("SKILLBOX_E2E_RUNTIMES").is_empty() {
            eprintln!("skipping: the Python runtime was not built (componentize-py missing)");
            return false;
        }
        compile_runtime_for("print('warm')\n", "python.wasm");
        true
    })
}

/// `skillbox compile` of a skill whose one script is `script`, which
/// compiles the Python runtime it needs (`row`, as compile names it) into
/// the shared test cache.
fn compile_runtime_for(script: &str, row: &str) {
    let skill = python_skill("warm", &[("scripts/warm.py", script)]);
    let out = skillbox()
        .args(["compile", skill.path().to_str().expect("utf-8 path")])
        .env("SKILLBOX_SYSTEM_SKILLS", "")
        .output()
        .expect("run skillbox compile");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains(row),
        "compiling {row} failed: {stderr}"
    );
}

/// A skill folder with `files` (path, text) and no manifest, as public
/// skills ship, unless `files` has a `skillbox.yaml`.
pub fn python_skill(name: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join(name);
    std::fs::create_dir_all(dir.join("scripts")).expect("skill file");
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: Python scripts for the tests. Use in tests only.\n---\n\
             Run `python3 scripts/report.py DIR` from the skill folder.\n"
        ),
    )
    .expect("skill file");
    for (path, body) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().expect("a file in the skill")).expect("skill file");
        std::fs::write(file, body).expect("skill file");
    }
    root
}

/// Whether the full Python runtime was built (`scripts/build-python-full`)
/// for the binary under test, which finds it in `target/runtimes/`.
/// Compiles it into the shared test cache once per test process (about a
/// minute: it is CPython with numpy, pandas, scipy and matplotlib).
pub fn python_full_runtime() -> bool {
    static WARM: OnceLock<bool> = OnceLock::new();
    *WARM.get_or_init(|| {
        if env!("SKILLBOX_E2E_PYTHON_FULL").is_empty() || !python_runtime() {
            eprintln!("skipping: the full Python runtime was not built (PyPI unreachable)");
            return false;
        }
        compile_runtime_for("import numpy\n", "python-full");
        true
    })
}

/// The bundled sample workspace, as a string for command lines.
pub fn examples() -> String {
    repo()
        .join("examples/workspace")
        .to_string_lossy()
        .into_owned()
}

/// A built guest component by crate name (`testbed`, `text`, …).
pub fn component(name: &str) -> PathBuf {
    guests().join(format!("{name}.wasm"))
}

/// The `skillbox` binary of this build: `target/<profile>/skillbox`,
/// beside this test's own `deps/` folder. `scripts/test` builds the
/// workspace before running the tests; the tests never build it.
pub fn skillbox_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let test = std::env::current_exe().expect("test binary path");
        let profile = test
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps/<test>");
        let bin = profile.join("skillbox");
        assert!(
            bin.is_file(),
            "the skillbox binary is not built ({} is missing). Run the tests with scripts/test, \
             or build it first: cargo build --workspace",
            bin.display()
        );
        warn_if_older_than_the_library(&bin, &profile.join("deps"));
        bin
    })
}

/// `cargo test` alone rebuilds the library the tests link, not the binary
/// they run: say so when the binary is older than the newest library.
fn warn_if_older_than_the_library(bin: &Path, deps: &Path) {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(bin) else { return };
    let newest_library = std::fs::read_dir(deps)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libskillbox-") && name.ends_with(".rlib")
        })
        .filter_map(|e| modified(&e.path()))
        .max();
    if newest_library.is_some_and(|library| library > built) {
        eprintln!(
            "warning: {} is older than the skillbox library; the tests may run a stale binary. \
             Run scripts/test, or cargo build --workspace first.",
            bin.display()
        );
    }
}

/// The environment every test's `skillbox` runs in: a private home and
/// XDG folders (so a developer's own skills, cache and audit log never
/// take part), and one compile cache shared by the test run (mode 0700,
/// as the host requires of a cache it loads native code from).
pub fn hermetic_env() -> Vec<(&'static str, PathBuf)> {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    let home = HOME.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("skillbox-test-home-")
            .tempdir()
            .expect("temp home");
        dir.keep()
    });
    let cache = test_cache();
    vec![
        ("HOME", home.clone()),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("XDG_STATE_HOME", home.join(".local/state")),
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("SKILLBOX_CACHE_DIR", cache),
    ]
}

/// The compiled-code cache the tests share, private to this user.
pub fn test_cache() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = repo().join("target/test-cache");
    std::fs::create_dir_all(&dir).expect("create the test cache");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .expect("make the test cache private");
    dir
}

/// A `skillbox` command with a private home and compile cache, run from
/// the repo.
pub fn skillbox() -> Command {
    let mut cmd = Command::new(skillbox_bin());
    cmd.current_dir(repo())
        .envs(hermetic_env())
        .env_remove("SKILLBOX_LOG")
        .env_remove("SKILLBOX_STATE_DIR");
    cmd
}

/// The result of one CLI run, with output decoded.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts that stderr says each of `parts`; shows the whole run when
    /// it does not.
    #[track_caller]
    pub fn stderr_says(&self, parts: &[&str]) {
        for part in parts {
            assert!(
                self.stderr.contains(part),
                "stderr lacks {part:?}: {self:?}"
            );
        }
    }

    /// Asserts that stdout says each of `parts`; shows the whole run when
    /// it does not.
    #[track_caller]
    pub fn stdout_says(&self, parts: &[&str]) {
        for part in parts {
            assert!(
                self.stdout.contains(part),
                "stdout lacks {part:?}: {self:?}"
            );
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Waits for `child` to exit and collects its output; panics with `what`
/// if it has not exited within `within` (the wait is for the exit itself,
/// on a thread of its own, not a poll).
pub fn exit_within(child: std::process::Child, within: std::time::Duration, what: &str) -> Run {
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match exited.recv_timeout(within) {
        Ok(output) => output.expect("wait for the child").into(),
        Err(_) => panic!("{what}: still running after {within:?}"),
    }
}

/// Runs `skillbox` with `args` and collects the result.
pub fn run(args: &[&str]) -> Run {
    skillbox().args(args).output().expect("run skillbox").into()
}

/// Runs `skillbox run-script` on a skill's script (`SKILL/PATH`) found in
/// `skills`, with flags `extra` and the script's `args`.
pub fn run_script(skills: &Path, script: &str, extra: &[&str], args: &[&str]) -> Run {
    let mut argv = vec![
        "run-script",
        "--skills",
        skills.to_str().expect("utf-8 path"),
        "--script",
        script,
    ];
    argv.extend(extra);
    argv.push("--");
    argv.extend(args);
    run(&argv)
}

/// Runs `skillbox call` on a component function with JSON arguments and
/// any extra flags.
pub fn call(component_name: &str, function: &str, args: &Value, extra: &[&str]) -> Run {
    let path = component(component_name);
    let args_text = args.to_string();
    let mut argv = vec![
        "call",
        "--component",
        path.to_str().expect("utf-8 path"),
        function,
        "--args",
        &args_text,
    ];
    argv.extend_from_slice(extra);
    run(&argv)
}

/// A fresh workspace folder with the given files (relative path, content).
pub fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (rel, content) in files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write file");
    }
    dir
}

/// A skills folder holding `testkit`, a skill whose tools are the testbed's
/// hostile and trivial functions, for server tests.
pub fn testkit_skills() -> tempfile::TempDir {
    let dir = workspace(&[
        (
            "testkit/SKILL.md",
            "---\nname: testkit\ndescription: Test tools for the server's own tests; use only when testing skillbox itself.\nuser-invocable: true\n---\nCall testkit__noop. Args: $ARGUMENTS; first: $1.\n",
        ),
        (
            "testkit/skillbox.yaml",
            "tools:\n  - component: tools/testbed.wasm\n    functions:\n      noop:\n        description: Returns 42. Use to test calls. Not for real work.\n      spin:\n        description: Loops until stopped. Use to test cancellation. Not for real work.\n      sleep-ms:\n        description: Sleeps. Use to test progress. Not for real work.\n        params:\n          ms: Milliseconds to sleep.\n      big-string:\n        description: Returns a long string. Use to test output budgets. Not for real work.\n      fail:\n        description: Fails with a message. Use to test errors. Not for real work.\n      write-file:\n        description: Writes a file. Use to test write grants. Not for real work.\n        effect: write\ngrants:\n  workspace: write\nlimits:\n  timeout-ms: 60000\n  fuel: 1000000000000000\n",
        ),
    ]);
    std::fs::create_dir_all(dir.path().join("testkit/tools")).expect("mkdir");
    std::fs::copy(
        component("testbed"),
        dir.path().join("testkit/tools/testbed.wasm"),
    )
    .expect("copy testbed");
    dir
}
