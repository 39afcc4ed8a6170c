//! Workspace transaction figures, over a 10,000-file workspace: what
//! staging adds to a call that only reads, what it adds to a call that
//! writes one small file (against the same write to `/tmp`, which is not
//! staged), what of that is the syncs to disk alone, and a commit of 100
//! files. Each pair is measured in turn, call by call, so both halves see
//! the same machine.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use super::Stats;
use skillbox_sandbox::{
    Entry, Grants, GuestCall, Limits, LoadedComponent, Sandbox, SideEffect, WorkspaceGrant, commit,
};

pub(super) struct TransactionFigures {
    /// A read of one file, the workspace granted read-only (not staged).
    pub read_unstaged: Stats,
    /// The same read, the workspace writable (staged, nothing written).
    pub read_staged: Stats,
    /// Writing one small file to `/tmp`: a write that is not staged.
    pub write_direct: Stats,
    /// Writing one small file to the workspace, staged and committed.
    pub write_staged: Stats,
    /// The syncs a commit of one file makes, alone.
    pub syncs: Stats,
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

/// Calls `a` and `b` in turn, `iterations` times each (after one warm-up
/// round that is not counted).
async fn timed_pair(
    sandbox: &Sandbox,
    testbed: &LoadedComponent,
    a: (&Value, &Grants),
    b: (&Value, &Grants),
    iterations: usize,
) -> anyhow::Result<(Stats, Stats)> {
    let limits = Limits::for_class(SideEffect::Write);
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for round in 0..=iterations {
        for (samples, (args, grants)) in [(&mut first, a), (&mut second, b)] {
            let start = Instant::now();
            sandbox
                .call(testbed, "stage-steps", args, grants, &limits)
                .await?;
            if round > 0 {
                samples.push(start.elapsed());
            }
        }
    }
    Ok((Stats::of(first), Stats::of(second)))
}

/// The syncs a commit of one small file makes (the journal, which carries
/// the file, and its folder; the workspace's file system), around a
/// one-byte journal.
fn sync_cost(state: &Path, ws: &Path, iterations: usize) -> anyhow::Result<Stats> {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        std::fs::write(state.join("journal"), b"x")?;
        let folder = std::fs::File::open(state)?;
        std::fs::File::open(state.join("journal"))?.sync_all()?;
        folder.sync_all()?;
        rustix::fs::syncfs(std::fs::File::open(ws)?)?;
        samples.push(start.elapsed());
    }
    Ok(Stats::of(samples))
}

pub(super) async fn run(testbed: &Path, iterations: usize) -> anyhow::Result<TransactionFigures> {
    eprintln!("bench: workspace transactions over 10,000 files…");
    let ws = tempfile::tempdir()?;
    for n in 0..10_000 {
        let dir = ws.path().join(format!("d{:02}", n % 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("f{n:05}.txt")), "some text\n")?;
    }
    // Flushed first, so their write-back does not land in the figures.
    rustix::fs::syncfs(std::fs::File::open(ws.path())?)?;
    let sandbox = Sandbox::with_options(&Default::default(), None)?;
    let testbed = sandbox.load_file(testbed)?;
    let (read_only, writable) = (grants(ws.path(), false), grants(ws.path(), true));

    let read = json!({"steps": ["read /workspace/d07/f00007.txt"]});
    let (read_unstaged, read_staged) = timed_pair(
        &sandbox,
        &testbed,
        (&read, &read_only),
        (&read, &writable),
        iterations,
    )
    .await?;
    let to_tmp = json!({"steps": ["write /tmp/note.txt a small file"]});
    let to_ws = json!({"steps": ["write /workspace/note.txt a small file"]});
    let (write_direct, write_staged) = timed_pair(
        &sandbox,
        &testbed,
        (&to_tmp, &writable),
        (&to_ws, &writable),
        iterations,
    )
    .await?;
    let state = tempfile::tempdir()?;
    let syncs = sync_cost(state.path(), ws.path(), iterations.min(100))?;

    let hundred: Vec<String> = std::iter::once("mkdir /workspace/batch".to_string())
        .chain((0..100).map(|n| format!("write /workspace/batch/f{n:03}.txt file {n}")))
        .collect();
    let args = json!({ "steps": hundred });
    let limits = Limits::for_class(SideEffect::Write);
    let mut samples = Vec::new();
    for _ in 0..iterations.clamp(5, 30) {
        std::fs::remove_dir_all(ws.path().join("batch")).ok();
        let entry = Entry::Function {
            name: "stage-steps".into(),
            args: args.clone(),
        };
        let out = sandbox
            .run(GuestCall::new(&testbed, entry, &writable, &limits))
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
        syncs,
        commit_100: Stats::of(samples),
    })
}
