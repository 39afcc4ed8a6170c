//! The first Python script on a machine, as a person meets it: a new
//! `skillbox run-script` process with an empty compiled-code cache, timed
//! to the script's first line of output. The runtime is compiled by the
//! baseline compiler for that run; the process then stays for the
//! optimizing compile, which the run after it loads from the cache.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::Stats;

pub(super) struct FirstRunFigures {
    /// Start to the script's first line, empty cache.
    pub first_output: Stats,
    /// Start to exit of the same process: the optimizing compile included.
    pub exit: Stats,
    /// The next process's start to its first line, from the cache it left.
    pub second_output: Stats,
}

const SCRIPT: &str =
    "import json, sys\nprint('first', flush=True)\nprint(json.dumps(sys.argv[1:]))\n";

pub(super) fn run(
    exe: &Path,
    python_runtime: &Path,
    runs: usize,
) -> anyhow::Result<FirstRunFigures> {
    let python_runtime = std::fs::canonicalize(python_runtime)?;
    let root = tempfile::tempdir()?;
    super::write_skill(
        &root.path().join("skills/bench-first"),
        "bench-first",
        "A script for the first-run benchmark; use for nothing else.",
        &[("scripts/hello.py", SCRIPT)],
    )?;
    let (mut first_output, mut exit, mut second_output) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let cache = tempfile::tempdir_in(root.path())?;
        let run = || -> anyhow::Result<(Duration, Duration)> {
            let started = Instant::now();
            let mut child = Command::new(exe)
                .args([
                    "run-script",
                    "--skills",
                    "skills",
                    "--script",
                    "bench-first/scripts/hello.py",
                ])
                .env("SKILLBOX_DATA_DIR", root.path().join("data"))
                .env("SKILLBOX_STATE_DIR", root.path().join("state"))
                .env("SKILLBOX_CACHE_DIR", cache.path())
                .env("SKILLBOX_PYTHON_RUNTIME", &python_runtime)
                .current_dir(root.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("starting skillbox")?;
            let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
            let mut line = String::new();
            stdout.read_line(&mut line)?;
            let to_output = started.elapsed();
            let status = child.wait()?;
            if line.trim() != "first" || !status.success() {
                bail!("the first-run script printed {line:?} and ended with {status}");
            }
            Ok((to_output, started.elapsed()))
        };
        let (output, ended) = run()?;
        first_output.push(output);
        exit.push(ended);
        second_output.push(run()?.0);
    }
    Ok(FirstRunFigures {
        first_output: Stats::of(first_output),
        exit: Stats::of(exit),
        second_output: Stats::of(second_output),
    })
}
