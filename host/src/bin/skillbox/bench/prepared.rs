//! Figures for a script that imports a prepared pure-Python package
//! (pypdf, as the public pdf skill's scripts do), run the way a person
//! runs one: a new `skillbox run-script` process each time, beside the
//! host's CPython running the same script with the same package in a new
//! process. Both have bytecode: the sandbox the pycs `prepare` writes, the
//! host's CPython its own, written on the first run.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use anyhow::{Context, bail};

use super::Stats;

pub(super) struct PreparedFigures {
    /// `skillbox run-script` of the pypdf script, a new process each time.
    pub sandbox: Stats,
    /// The same script by the host's CPython; `None` when it cannot run it.
    pub native: Option<Stats>,
}

const REQUIREMENT: &str = "pypdf==5.1.0";

/// Writes a one-page PDF and reads its form fields back, as
/// `check_fillable_fields.py` does with the user's file.
const SCRIPT: &str = "import io\n\
from pypdf import PdfReader, PdfWriter\n\
writer = PdfWriter()\n\
writer.add_blank_page(200, 200)\n\
pdf = io.BytesIO()\n\
writer.write(pdf)\n\
reader = PdfReader(io.BytesIO(pdf.getvalue()))\n\
print(len(reader.pages), reader.get_fields() is None)\n";

const EXPECTED: &str = "1 True";

/// `None` when pypdf cannot be prepared here (no PyPI).
pub(super) fn run(
    exe: &Path,
    python_runtime: &Path,
    native_python: &Path,
    iterations: usize,
) -> anyhow::Result<Option<PreparedFigures>> {
    let python_runtime = std::fs::canonicalize(python_runtime)?;
    let root = tempfile::tempdir()?;
    let skill = root.path().join("skills/bench-pdf");
    super::write_skill(
        &skill,
        "bench-pdf",
        "A pypdf script for the benchmark; use for nothing else.",
        &[
            ("requirements.txt", &format!("{REQUIREMENT}\n")),
            ("scripts/fields.py", SCRIPT),
        ],
    )?;
    let skillbox = |args: &[&str]| -> anyhow::Result<Output> {
        Command::new(exe)
            .args(args)
            .env("SKILLBOX_DATA_DIR", root.path().join("data"))
            .env("SKILLBOX_STATE_DIR", root.path().join("state"))
            .env("SKILLBOX_CACHE_DIR", root.path().join("cache"))
            .env("SKILLBOX_PYTHON_RUNTIME", &python_runtime)
            .current_dir(root.path())
            .output()
            .context("starting skillbox")
    };
    let prepared = skillbox(&["prepare", "bench-pdf", "--skills", "skills"])?;
    if !prepared.status.success() {
        eprintln!(
            "bench: {REQUIREMENT} could not be prepared ({}); its rows are skipped",
            String::from_utf8_lossy(&prepared.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("")
        );
        return Ok(None);
    }
    let script = [
        "run-script",
        "--skills",
        "skills",
        "--script",
        "bench-pdf/scripts/fields.py",
    ];
    let sandbox = timed(iterations, || skillbox(&script))?;

    // The host's CPython gets the same files, in a folder it may write its
    // own pycs to.
    let site = find_site(&root.path().join("data"))
        .context("the prepared packages folder was not found")?;
    let native_site = root.path().join("native-site");
    copy_sources(&site, &native_site)?;
    let native_run = || -> anyhow::Result<Output> {
        Command::new(native_python)
            .arg(skill.join("scripts/fields.py"))
            .env("PYTHONPATH", &native_site)
            .output()
            .context("starting the host's CPython")
    };
    let native = match native_run() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == EXPECTED => {
            Some(timed(iterations, native_run)?)
        }
        _ => None,
    };
    Ok(Some(PreparedFigures { sandbox, native }))
}

/// One warm-up run, then `iterations` timed runs, each checked.
fn timed(
    iterations: usize,
    mut run: impl FnMut() -> anyhow::Result<Output>,
) -> anyhow::Result<Stats> {
    let mut samples = Vec::with_capacity(iterations);
    for round in 0..=iterations {
        let start = Instant::now();
        let out = run()?;
        let took = start.elapsed();
        let said = String::from_utf8_lossy(&out.stdout);
        if said.trim() != EXPECTED {
            bail!(
                "the pypdf script printed {said:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if round > 0 {
            samples.push(took);
        }
    }
    Ok(Stats::of(samples))
}

/// The `site` folder `prepare` made under `data`.
fn find_site(data: &Path) -> Option<std::path::PathBuf> {
    let python = data.join("python");
    std::fs::read_dir(python)
        .ok()?
        .flatten()
        .map(|entry| entry.path().join("current/site"))
        .find(|site| site.is_dir())
}

/// Copies the Python sources of `from` (not the sandbox's pycs) to `to`.
fn copy_sources(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)?.flatten() {
        let (path, name) = (entry.path(), entry.file_name());
        if entry.file_type()?.is_dir() {
            if name != "__pycache__" {
                copy_sources(&path, &to.join(&name))?;
            }
        } else {
            std::fs::copy(&path, to.join(&name))?;
        }
    }
    Ok(())
}
