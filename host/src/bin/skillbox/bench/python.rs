//! Figures for a large componentize-py component (about 18 MB): a Python
//! interpreter compiled to WebAssembly, which is what a Python tool ships.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use super::Stats;
use skillbox::unstable::sandbox::{DiskCache, EngineOptions, Grants, Limits, Sandbox};

pub struct PythonFigures {
    /// A new `skillbox call` process, cache warm: spawn to exit.
    pub second_start: Stats,
    /// One call in a process that has the component loaded.
    pub warm_call: Stats,
}

const FUNCTION: &str = "count-words";

fn arguments() -> serde_json::Value {
    json!({"text": "the quick brown fox jumps over the lazy dog", "min-length": null})
}

pub async fn run(component: &Path, calls: usize) -> anyhow::Result<PythonFigures> {
    let exe = std::env::current_exe()?;
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
        second_start: Stats::of(starts),
        warm_call: Stats::of(samples),
    })
}
