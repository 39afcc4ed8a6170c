//! Compiling every skill's components ahead of time, so that no first call
//! waits for a compile (images, CI, a fleet's shared cache).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

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
    /// Compiles every component of every loaded skill on all cores,
    /// storing the code in the compiled-code cache, and calls `progress`
    /// after each with its position and the total. Blocks: call it from a
    /// thread of its own or `spawn_blocking`, not on an async worker.
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
        let done = AtomicUsize::new(0);
        jobs.par_iter()
            .map(|(skill, rel)| {
                let started = Instant::now();
                let loaded = crate::skill::tools::load(skill, rel, &self.host.sandbox);
                let compiled = Compiled {
                    skill: skill.name().to_string(),
                    component: rel.to_string(),
                    outcome: match loaded {
                        Ok(c) if c.origin == CompileOrigin::DiskCache => CompileOutcome::FromCache,
                        Ok(_) => CompileOutcome::Compiled,
                        Err(reason) => CompileOutcome::Failed { reason },
                    },
                    took: started.elapsed(),
                };
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(n, jobs.len(), &compiled);
                compiled
            })
            .collect()
    }
}
