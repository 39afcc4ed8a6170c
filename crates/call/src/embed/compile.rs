//! Compiling every skill's components ahead of time, so that no first call
//! waits for a compile (images, CI, a fleet's shared cache).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Skillbox;
use crate::runtime::{python, python_full};
use crate::sandbox::CompileOrigin;

/// One component, compiled or found in the cache by
/// [`Skillbox::compile_all`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Compiled {
    /// The skill it belongs to.
    pub skill: String,
    /// Its path inside the skill folder.
    pub component: String,
    /// Where its code came from, or why it could not be loaded.
    pub outcome: CompileOutcome,
    /// How long it took.
    pub took: Duration,
}

/// What [`Skillbox::compile_all`] did with one component.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompileOutcome {
    /// Its compiled code was already in the compiled-code cache.
    FromCache,
    /// It was compiled now (and stored, if there is a cache).
    Compiled,
    /// It could not be loaded.
    Failed {
        /// Why, in words.
        reason: String,
    },
}

impl Skillbox {
    /// Compiles every component of every loaded skill, storing the code in
    /// the compiled-code cache, and calls `progress` after each with its
    /// position and the total. The components compile at once, on all
    /// cores (a component already compiling in the background is not
    /// compiled twice). Blocks: call it from a thread of its own or
    /// `spawn_blocking`, not on an async worker or the compiler's pool.
    pub fn compile_all(&self, progress: impl Fn(usize, usize, &Compiled) + Sync) -> Vec<Compiled> {
        let catalog = self.host.catalog();
        let jobs: Vec<_> = catalog
            .skills()
            .flat_map(|skill| {
                skill
                    .components
                    .iter()
                    .map(move |(rel, _)| (skill, rel.as_str()))
            })
            .collect();
        let started = Instant::now();
        let pending: Vec<_> = jobs
            .iter()
            .map(|(skill, rel)| crate::skill::tools::prepare(skill, rel, &self.host.sandbox))
            .collect();
        // The Python runtimes the skills' Python scripts run in.
        let runtimes = python_runtimes(&catalog);
        let total = jobs.len() + runtimes.len();
        let mut results: Vec<Compiled> = jobs
            .iter()
            .zip(pending)
            .enumerate()
            .map(|(n, ((skill, rel), pending))| {
                // A large tool's first compile is the quick one; the
                // cache is filled once its optimized code is ready.
                let done = pending
                    .and_then(|p| p.compiled_blocking())
                    .inspect(|loaded| loaded.wait_optimized());
                let compiled = compiled(skill.name(), rel, done, started);
                progress(n + 1, total, &compiled);
                compiled
            })
            .collect();
        for (name, path) in runtimes {
            let done = self
                .host
                .sandbox
                .load_file_optimized(&path)
                .map_err(|e| e.to_string());
            let compiled = compiled("(runtime)", name, done, started);
            progress(results.len() + 1, total, &compiled);
            results.push(compiled);
        }
        results
    }
}

/// The Python runtimes the catalog's Python scripts run in, by the name a
/// row shows and the component's path: the light one when any skill ships
/// a Python script, the full one (when installed) when a script needs a
/// module only it has.
fn python_runtimes(catalog: &crate::skill::Catalog) -> Vec<(&'static str, PathBuf)> {
    let with_scripts: Vec<_> = catalog
        .skills()
        .map(|skill| (skill, skill.source_scripts()))
        .filter(|(_, scripts)| !scripts.is_empty())
        .collect();
    if with_scripts.is_empty() {
        return Vec::new();
    }
    let mut runtimes: Vec<_> = python::runtime_path()
        .map(|path| (python::RUNTIME_FILE, path))
        .into_iter()
        .collect();
    if let Some(full) = python_full::installed() {
        let needs_full = with_scripts.iter().any(|(skill, scripts)| {
            let site = python::prepared_site(&skill.dir);
            // A shell script's launcher runs in the light runtime.
            scripts.iter().filter(|s| s.ends_with(".py")).any(|script| {
                let source = python_full::Source::Script(script.clone());
                !python_full::needed(&full, Some(skill), &source, site.as_deref()).is_empty()
            })
        });
        if needs_full {
            runtimes.push((python_full::RUNTIME_DIR, full.component()));
        }
    }
    runtimes
}

/// One component's row.
fn compiled(
    skill: &str,
    component: &str,
    done: crate::sandbox::Compiled,
    started: Instant,
) -> Compiled {
    Compiled {
        skill: skill.to_string(),
        component: component.to_string(),
        took: match &done {
            Ok(c) if c.origin != CompileOrigin::Quick => c.load_time,
            _ => started.elapsed(),
        },
        outcome: match done {
            Ok(c) if c.origin == CompileOrigin::DiskCache => CompileOutcome::FromCache,
            Ok(_) => CompileOutcome::Compiled,
            Err(reason) => CompileOutcome::Failed { reason },
        },
    }
}
