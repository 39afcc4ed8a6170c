//! Workspace transaction figures, over a 10,000-file workspace: what
//! staging adds to a call that only reads, what it adds to a call that
//! writes one small file (against the same write to `/tmp`, which is not
//! staged), and a commit of 100 files.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use super::Stats;
use skillbox::unstable::sandbox::{
    Grants, Limits, LoadedComponent, Sandbox, SideEffect, WorkspaceGrant, commit,
};

pub struct TransactionFigures {
    /// A read of one file, the workspace granted read-only (not staged).
    pub read_unstaged: Stats,
    /// The same read, the workspace writable (staged, nothing written).
    pub read_staged: Stats,
    /// Writing one small file to `/tmp`: a write that is not staged.
    pub write_direct: Stats,
    /// Writing one small file to the workspace, staged and committed.
    pub write_staged: Stats,
    /// Committing a call that wrote 100 files.
    pub commit_100: Stats,
}

fn grants(ws: &Path, writable: bool) -> Grants {
    Grants {
        workspace: Some(WorkspaceGrant {
            host_dir: ws.to_path_buf(),
            writable,
        }),
        ..Grants::default()
    }
}

async fn timed_calls(
    sandbox: &Sandbox,
    testbed: &LoadedComponent,
    args: &Value,
    grants: &Grants,
    iterations: usize,
) -> anyhow::Result<Stats> {
    let limits = Limits::for_class(SideEffect::Write);
    sandbox
        .call(testbed, "stage-steps", args, grants, &limits)
        .await?;
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        sandbox
            .call(testbed, "stage-steps", args, grants, &limits)
            .await?;
        samples.push(start.elapsed());
    }
    Ok(Stats::of(samples))
}

pub async fn run(testbed: &Path, iterations: usize) -> anyhow::Result<TransactionFigures> {
    eprintln!("bench: workspace transactions over 10,000 files…");
    let ws = tempfile::tempdir()?;
    for n in 0..10_000 {
        let dir = ws.path().join(format!("d{:02}", n % 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("f{n:05}.txt")), "some text\n")?;
    }
    let sandbox = Sandbox::with_options(&Default::default(), None)?;
    let testbed = sandbox.load_file(testbed)?;
    let read = json!({"steps": ["read /workspace/d07/f00007.txt"]});
    let read_unstaged = timed_calls(
        &sandbox,
        &testbed,
        &read,
        &grants(ws.path(), false),
        iterations,
    )
    .await?;
    let read_staged = timed_calls(
        &sandbox,
        &testbed,
        &read,
        &grants(ws.path(), true),
        iterations,
    )
    .await?;
    let writable = grants(ws.path(), true);
    let to_tmp = json!({"steps": ["write /tmp/note.txt a small file"]});
    let write_direct = timed_calls(&sandbox, &testbed, &to_tmp, &writable, iterations).await?;
    let to_ws = json!({"steps": ["write /workspace/note.txt a small file"]});
    let write_staged = timed_calls(&sandbox, &testbed, &to_ws, &writable, iterations).await?;

    let hundred: Vec<String> = (0..100)
        .map(|n| format!("write /workspace/batch/f{n:03}.txt file {n}"))
        .chain(std::iter::once("mkdir /workspace/batch".to_string()))
        .rev()
        .collect();
    let args = json!({ "steps": hundred });
    let limits = Limits::for_class(SideEffect::Write);
    let mut samples = Vec::new();
    for _ in 0..iterations.clamp(5, 30) {
        std::fs::remove_dir_all(ws.path().join("batch")).ok();
        let out = sandbox
            .call_traced(
                &testbed,
                "stage-steps",
                &args,
                &writable,
                &limits,
                &Default::default(),
                None,
            )
            .await?;
        let start = Instant::now();
        let written = commit(&out.staged).await?;
        samples.push(start.elapsed());
        anyhow::ensure!(
            written.files() == 101,
            "the batch wrote {}",
            written.files()
        );
    }
    Ok(TransactionFigures {
        read_unstaged,
        read_staged,
        write_direct,
        write_staged,
        commit_100: Stats::of(samples),
    })
}
