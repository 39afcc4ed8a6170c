//! Compiling every skill's components ahead of time, so that no first call
//! waits for a compile (images, CI, a fleet's shared cache).

use std::time::{Duration, Instant};

use super::Skillbox;
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
        // The Python runtime, when a skill ships a Python script.
        let python = catalog
            .skills()
            .find(|skill| !skill.source_scripts().is_empty())
            .and_then(|_| crate::runtime::python::runtime_path());
        let total = jobs.len() + usize::from(python.is_some());
        let mut results: Vec<Compiled> = jobs
            .iter()
            .zip(pending)
            .enumerate()
            .map(|(n, ((skill, rel), pending))| {
                let done = pending.and_then(|p| p.compiled_blocking());
                let compiled = compiled(skill.name(), rel, done, started);
                progress(n + 1, total, &compiled);
                compiled
            })
            .collect();
        if let Some(path) = python {
            let done = self
                .host
                .sandbox
                .load_file(&path)
                .map_err(|e| e.to_string());
            let compiled = compiled(
                "(runtime)",
                crate::runtime::python::RUNTIME_FILE,
                done,
                started,
            );
            progress(total, total, &compiled);
            results.push(compiled);
        }
        results
    }
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
        took: done
            .as_ref()
            .map_or_else(|_| started.elapsed(), |c| c.load_time),
        outcome: match done {
            Ok(c) if c.origin == CompileOrigin::DiskCache => CompileOutcome::FromCache,
            Ok(_) => CompileOutcome::Compiled,
            Err(reason) => CompileOutcome::Failed { reason },
        },
    }
}
