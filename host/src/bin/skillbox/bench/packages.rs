//! Figures for scripts that import compiled packages, run by the full
//! Python runtime through the whole call path, beside the same scripts run
//! by the host's own CPython when it has the packages (a virtual
//! environment named with `--native-python`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::Stats;
use skillbox::Skillbox;
use skillbox_skill::runtime::python_full;

pub(super) struct PackageFigures {
    /// Compiling the runtime with an empty cache: the first script that
    /// imports a compiled package on a machine.
    pub cold: Stats,
    /// Loading it from the disk cache in a new sandbox: each CLI run that
    /// needs it, and each server's first.
    pub from_cache: Stats,
    /// The runtime's folder on disk, in bytes.
    pub size: u64,
    /// A warm run of `import numpy`.
    pub numpy_import: Stats,
    /// A warm run of a numpy and pandas group-by on a small frame.
    pub pandas_run: Stats,
    /// The same by the host's CPython, when it has numpy and pandas.
    pub pandas_native: Option<Stats>,
    /// A warm run of an lxml parse and XPath query.
    pub lxml_run: Stats,
    /// The same by the host's CPython, when it has lxml.
    pub lxml_native: Option<Stats>,
}

const NUMPY: &str = "import numpy\nprint(numpy.__version__)\n";

const PANDAS: &str = "import numpy as np, pandas as pd\n\
frame = pd.DataFrame({'k': list('abcab') * 200, 'v': np.arange(1000)})\n\
print(frame.groupby('k')['v'].sum().to_dict())\n";

const LXML: &str = "from lxml import etree\n\
doc = etree.fromstring('<r>' + '<i n=\"1\">x</i>' * 500 + '</r>')\n\
print(len(doc.xpath('//i[@n=\"1\"]')))\n";

/// A skills folder with one skill holding the three scripts.
fn skills() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let skill = dir.path().join("bench-packages");
    super::write_skill(
        &skill,
        "bench-packages",
        "Scripts for the benchmark; use for nothing else.",
        &[
            ("scripts/bench_numpy.py", NUMPY),
            ("scripts/bench_pandas.py", PANDAS),
            ("scripts/bench_lxml.py", LXML),
        ],
    )?;
    Ok(dir)
}

async fn run_n(skillbox: &Skillbox, script: &str, iterations: usize) -> anyhow::Result<Stats> {
    super::scripts::run_script_n(skillbox, "bench-packages", script, &[], iterations).await
}

/// The host's CPython running `code`, timed per process; `None` when it
/// lacks the packages.
fn native_n(python: &Path, code: &str, iterations: usize) -> Option<Stats> {
    let run = || {
        Command::new(python)
            .args(["-c", code])
            .output()
            .ok()
            .filter(|out| out.status.success())
    };
    run()?;
    let samples: Vec<Duration> = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .collect();
    Some(Stats::of(samples))
}

fn folder_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| match entry.file_type() {
                    Ok(kind) if kind.is_dir() => folder_size(&entry.path()),
                    _ => entry.metadata().map_or(0, |m| m.len()),
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `None` when the full runtime is not installed where this binary finds
/// it.
pub(super) async fn run(
    native_python: &Path,
    compiles: usize,
    iterations: usize,
) -> anyhow::Result<Option<PackageFigures>> {
    let Some(full) = python_full::installed() else {
        return Ok(None);
    };
    let cache = tempfile::tempdir()?;
    let (cold, from_cache) =
        super::load_times(&std::fs::read(full.component())?, compiles, cache.path())?;

    let folder = skills()?;
    let skillbox = Skillbox::builder()
        .skills_dir(folder.path())
        .cache_dir(cache.path())
        .build()?;
    run_n(&skillbox, "scripts/bench_numpy.py", 1).await?;
    Ok(Some(PackageFigures {
        cold,
        from_cache,
        size: folder_size(&full.component().with_file_name("")),
        numpy_import: run_n(&skillbox, "scripts/bench_numpy.py", iterations).await?,
        pandas_run: run_n(&skillbox, "scripts/bench_pandas.py", iterations).await?,
        pandas_native: native_n(native_python, PANDAS, iterations),
        lxml_run: run_n(&skillbox, "scripts/bench_lxml.py", iterations).await?,
        lxml_native: native_n(native_python, LXML, iterations),
    }))
}
