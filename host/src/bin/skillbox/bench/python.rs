//! Figures for a large componentize-py component (about 18 MB): a Python
//! interpreter compiled to WebAssembly, which is what a Python tool ships.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use super::Stats;
use skillbox_sandbox::{DiskCache, EngineOptions, Grants, Limits, Sandbox};

pub(super) struct PythonFigures {
    /// `skillbox serve` with the bundled skills and a skill whose tool is
    /// this component, and an empty compiled-code cache: spawn to the
    /// first `tools/list` answer.
    pub first_list_cold: Stats,
    /// A new `skillbox call` process, cache warm: spawn to exit.
    pub second_start: Stats,
    /// One call in a process that has the component loaded.
    pub warm_call: Stats,
}

const FUNCTION: &str = "count-words";

fn arguments() -> serde_json::Value {
    json!({"text": "the quick brown fox jumps over the lazy dog", "min-length": null})
}

/// A skills folder with one skill whose tool is `component`.
fn python_skill(component: &Path) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let skill = dir.path().join("words");
    std::fs::create_dir_all(skill.join("tools"))?;
    std::fs::copy(component, skill.join("tools/wordcount.wasm"))?;
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: words\ndescription: Counts words in a text; use when asked how long a text is.\n---\nCall words__count-words.\n",
    )?;
    std::fs::write(
        skill.join("skillbox.yaml"),
        "tools:\n  - component: tools/wordcount.wasm\n    functions:\n      count-words:\n        description: Count the words of a text.\n        effect: read\n",
    )?;
    Ok(dir)
}

/// Spawn to the first `tools/list` answer, each time with an empty cache:
/// the bundled skills and the Python tool's skill, every tool listed. The
/// list must not wait for the Python component's compile.
async fn first_list_cold(exe: &Path, component: &Path) -> anyhow::Result<Stats> {
    use rmcp::ServiceExt;
    let skills = python_skill(component)?;
    let mut samples = Vec::new();
    for _ in 0..3 {
        let cache = tempfile::tempdir()?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args([
            "serve",
            "--no-audit",
            "--reload-ms",
            "0",
            "--tools",
            "all",
            "--skills",
        ])
        .arg(skills.path())
        .env("SKILLBOX_CACHE_DIR", cache.path());
        let started = Instant::now();
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let client = ().serve(transport).await?;
        let tools = client.peer().list_all_tools().await?;
        samples.push(started.elapsed());
        if !tools.iter().any(|t| t.name == "words__count-words") {
            bail!("the Python tool was not listed");
        }
        client.cancel().await?;
    }
    Ok(Stats::of(samples))
}

pub(super) async fn run(component: &Path, calls: usize) -> anyhow::Result<PythonFigures> {
    let exe = std::env::current_exe()?;
    let first_list_cold = first_list_cold(&exe, component).await?;
    let call = || {
        std::process::Command::new(&exe)
            .args(["call", "--component"])
            .arg(component)
            .arg(FUNCTION)
            .args(["--args", &arguments().to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
    };
    // The first start compiles into the cache (the cold case).
    let first = call()?;
    if !first.status.success() {
        bail!(
            "the Python component failed: {}",
            String::from_utf8_lossy(&first.stderr)
        );
    }
    let mut starts = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let out = call()?;
        starts.push(started.elapsed());
        if !out.status.success() {
            bail!("the Python component failed on a warm start");
        }
    }

    let sandbox = Sandbox::with_options(&EngineOptions::default(), DiskCache::default_location())?;
    let loaded = sandbox
        .load_file(component)
        .context("load the Python component")?;
    let (grants, limits, args) = (Grants::default(), Limits::default(), arguments());
    sandbox
        .call(&loaded, FUNCTION, &args, &grants, &limits)
        .await?;
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls.max(1) {
        let started = Instant::now();
        sandbox
            .call(&loaded, FUNCTION, &args, &grants, &limits)
            .await?;
        samples.push(started.elapsed());
    }
    Ok(PythonFigures {
        first_list_cold,
        second_start: Stats::of(starts),
        warm_call: Stats::of(samples),
    })
}
