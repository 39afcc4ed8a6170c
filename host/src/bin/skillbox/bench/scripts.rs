//! Figures for a skill's Python script run by the Python runtime, beside
//! a Rust command component run the same way: both go through the whole
//! call path (`Skillbox::run_script`), so the ratio is the interpreter's
//! cost alone. Beside `print(1)`, the same script starting a child: a
//! nested Python, and the host's `true` granted to the skill, which runs in
//! the OS sandbox; the differences are what a child costs.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use super::Stats;
use skillbox::{SkillGrant, Skillbox};

pub(super) struct ScriptFigures {
    /// Loading the runtime with an empty compiled-code cache: the first
    /// Python script run on a machine.
    pub cold: Stats,
    /// Loading it again from the disk cache, in a new process's sandbox.
    pub from_cache: Stats,
    /// A warm run of a script that imports json, re, argparse and pathlib.
    pub python_run: Stats,
    /// A warm run of a Rust command component with the same job size.
    pub rust_run: Stats,
    /// A warm run of the smallest script, `print(1)`.
    pub smallest_script: Stats,
    /// The same `print(1)` through `run_code`, as the skill's code.
    pub smallest_code: Stats,
    /// A script whose only work is a nested Python child's `print(1)`.
    pub nested_python: Stats,
    /// A script whose only work is running the granted host program
    /// `true` in the OS sandbox; None where that sandbox cannot run.
    pub granted_true: Option<Stats>,
    /// A script's own file operations, each timed inside the script.
    pub file_work: FileWork,
}

/// What one file operation of a script costs, timed inside the script, so
/// that each figure is the operation's (the guest's work and the host's
/// behind it), not the run's.
pub(super) struct FileWork {
    pub stat: Stats,
    pub read: Stats,
    pub list: Stats,
    pub write: Stats,
}

const SCRIPT: &str = "import argparse, json, pathlib, re, sys\n\
p = argparse.ArgumentParser()\n\
p.add_argument('words', nargs='*')\n\
a = p.parse_args()\n\
print(json.dumps({'n': len(a.words), 'ok': bool(re.match('a', 'abc'))}))\n";

/// The smallest script, run both as a file of the skill and as code.
const SMALLEST: &str = "print(1)\n";

/// Each file operation 100 times, on the skill's files and the call's
/// `/tmp`; prints the seconds each took on average, as JSON.
const FILE_WORK: &str = r#"import json, os, time
def each(op, n=100):
    start = time.perf_counter()
    for _ in range(n):
        op()
    return (time.perf_counter() - start) / n
def read():
    with open('/skill/scripts/one.py', 'rb') as f:
        f.read()
def write():
    with open('/tmp/note.txt', 'wb') as f:
        f.write(b'a small file\n')
print(json.dumps({
    'stat': each(lambda: os.stat('/skill/scripts/one.py')),
    'read': each(read),
    'list': each(lambda: os.listdir('/skill/scripts')),
    'write': each(write),
}))
"#;

/// A nested run of the sandbox's own Python.
const NESTED: &str =
    "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(1)'], check=True)\n";

/// The host's `true`, granted to the skill.
const GRANTED_TRUE: &str = "import subprocess\nsubprocess.run(['true'], check=True)\n";

/// A skills folder with one skill holding the Python script and the Rust
/// command component.
fn skills(rust_command: &Path) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let skill = dir.path().join("bench-scripts");
    super::write_skill(
        &skill,
        "bench-scripts",
        "Scripts for the benchmark; use for nothing else.",
        &[
            ("scripts/words.py", SCRIPT),
            ("scripts/one.py", SMALLEST),
            ("scripts/nested.py", NESTED),
            ("scripts/true.py", GRANTED_TRUE),
            ("scripts/files.py", FILE_WORK),
        ],
    )?;
    std::fs::copy(rust_command, skill.join("scripts/check.wasm"))?;
    std::fs::write(
        skill.join("skillbox.yaml"),
        "scripts:\n  - component: scripts/check.wasm\n    usage: check [FILE...]\n",
    )?;
    Ok(dir)
}

async fn run_n(skillbox: &Skillbox, script: &str, iterations: usize) -> anyhow::Result<Stats> {
    run_script_n(skillbox, "bench-scripts", script, &["a", "b"], iterations).await
}

/// `iterations` warm runs of a skill's script through the whole call
/// path; a Python script that fails stops the benchmark.
pub(super) async fn run_script_n(
    skillbox: &Skillbox,
    skill: &str,
    script: &str,
    args: &[&str],
    iterations: usize,
) -> anyhow::Result<Stats> {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let out = skillbox
            .run_script(
                skill,
                script,
                args.iter().map(|a| a.to_string()).collect(),
                Vec::new(),
                &CancellationToken::new(),
            )
            .await
            .with_context(|| format!("running {script}"))?;
        samples.push(start.elapsed());
        if script.ends_with(".py") && out.exit_code != 0 {
            bail!("{script} exited {}: {}", out.exit_code, out.stderr);
        }
    }
    Ok(Stats::of(samples))
}

async fn run_code_n(skillbox: &Skillbox, iterations: usize) -> anyhow::Result<Stats> {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let out = skillbox
            .run_code(
                Some("bench-scripts"),
                SMALLEST,
                Vec::new(),
                Vec::new(),
                &CancellationToken::new(),
            )
            .await
            .context("running code")?;
        samples.push(start.elapsed());
        if out.exit_code != 0 {
            bail!("the code exited {}: {}", out.exit_code, out.stderr);
        }
    }
    Ok(Stats::of(samples))
}

pub(super) async fn run(
    runtime: &Path,
    rust_command: &Path,
    compiles: usize,
    iterations: usize,
) -> anyhow::Result<ScriptFigures> {
    let cache = tempfile::tempdir()?;
    let (cold, from_cache) = super::load_times(&std::fs::read(runtime)?, compiles, cache.path())?;

    let folder = skills(rust_command)?;
    let mut programs = SkillGrant::default();
    programs.programs = vec!["true".into()];
    let skillbox = Skillbox::builder()
        .skills_dir(folder.path())
        .cache_dir(cache.path())
        .grant("bench-scripts", programs)
        .build()?;
    // The first run of each loads it; the figures are of warm runs.
    run_n(&skillbox, "scripts/words.py", 1).await?;
    run_n(&skillbox, "check", 1).await?;
    let granted_true = match run_n(&skillbox, "scripts/true.py", 1).await {
        Ok(_) => Some(run_n(&skillbox, "scripts/true.py", iterations).await?),
        Err(e) => {
            eprintln!("bench: a granted program cannot run here ({e:#}); its rows are skipped");
            None
        }
    };
    Ok(ScriptFigures {
        cold,
        from_cache,
        python_run: run_n(&skillbox, "scripts/words.py", iterations).await?,
        rust_run: run_n(&skillbox, "check", iterations).await?,
        smallest_script: run_n(&skillbox, "scripts/one.py", iterations).await?,
        smallest_code: run_code_n(&skillbox, iterations).await?,
        nested_python: run_n(&skillbox, "scripts/nested.py", iterations).await?,
        granted_true,
        file_work: file_work(&skillbox, iterations.clamp(3, 15)).await?,
    })
}

/// `runs` runs of the file-work script; each figure is a median over runs.
async fn file_work(skillbox: &Skillbox, runs: usize) -> anyhow::Result<FileWork> {
    let mut seconds: [Vec<std::time::Duration>; 4] = Default::default();
    for _ in 0..runs {
        let out = skillbox
            .run_script(
                "bench-scripts",
                "scripts/files.py",
                Vec::new(),
                Vec::new(),
                &CancellationToken::new(),
            )
            .await
            .context("running the file-work script")?;
        if out.exit_code != 0 {
            bail!(
                "the file-work script exited {}: {}",
                out.exit_code,
                out.stderr
            );
        }
        let figures: serde_json::Value =
            serde_json::from_str(&out.stdout).context("the file-work script's figures")?;
        for (samples, key) in seconds.iter_mut().zip(["stat", "read", "list", "write"]) {
            let each = figures[key]
                .as_f64()
                .with_context(|| format!("the file-work script gave no `{key}`"))?;
            samples.push(std::time::Duration::from_secs_f64(each));
        }
    }
    let [stat, read, list, write] = seconds.map(Stats::of);
    Ok(FileWork {
        stat,
        read,
        list,
        write,
    })
}
