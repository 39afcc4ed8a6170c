//! `skillbox compile`: fill the compiled-code cache ahead of time.
//!
//! A server compiles a component the first time a tool of it is listed or
//! called: hundreds of milliseconds for a small component, seconds for a
//! Python one. Images and CI jobs run this once, so the first call of
//! every tool loads native code from the cache instead.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde_json::json;

use super::flags::SourceFlags;
use super::{CliError, print_json};
use skillbox::unstable::sandbox::{CompileOrigin, DiskCache, EngineOptions, Sandbox};
use skillbox::unstable::skill::catalog::Catalog;
use skillbox::unstable::skill::model::Skill;

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    #[command(flatten)]
    sources: SourceFlags,
    /// The cache to fill (default: $SKILLBOX_CACHE_DIR/components, else
    /// the user's cache folder). Servers read it with the same setting.
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Print JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// One component's result.
struct Compiled {
    skill: String,
    component: String,
    outcome: Result<CompileOrigin, String>,
    took: Duration,
}

pub fn run(args: CompileArgs) -> Result<ExitCode, CliError> {
    let cache = match args.cache {
        Some(dir) => DiskCache::new(dir),
        None => DiskCache::default_location().ok_or_else(|| {
            CliError::Usage(
                "no cache folder: pass --cache DIR, or set SKILLBOX_CACHE_DIR or HOME".into(),
            )
        })?,
    };
    let catalog = Catalog::build(&args.sources.options());
    let sandbox =
        Sandbox::with_options(&EngineOptions::default(), Some(cache)).map_err(CliError::Other)?;
    let jobs: Vec<(&Arc<Skill>, &str)> = catalog
        .skills()
        .flat_map(|skill| {
            skill
                .components
                .iter()
                .map(move |(rel, _)| (skill, rel.as_str()))
        })
        .collect();
    eprintln!(
        "compile: {} components of {} skills, on {} cores",
        jobs.len(),
        catalog.skills().count(),
        rayon::current_num_threads()
    );
    let done = AtomicUsize::new(0);
    let results: Vec<Compiled> = jobs
        .par_iter()
        .map(|(skill, rel)| {
            let started = Instant::now();
            let outcome =
                skillbox::unstable::skill::tools::load(skill, rel, &sandbox).map(|c| c.origin);
            let compiled = Compiled {
                skill: skill.name().to_string(),
                component: rel.to_string(),
                outcome,
                took: started.elapsed(),
            };
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            eprintln!(
                "compile: [{n}/{}] {}/{}: {} ({} ms)",
                jobs.len(),
                compiled.skill,
                compiled.component,
                outcome_word(&compiled.outcome),
                compiled.took.as_millis()
            );
            compiled
        })
        .collect();
    let failed = results.iter().filter(|r| r.outcome.is_err()).count();
    if args.json {
        let rows: Vec<_> = results
            .iter()
            .map(|r| {
                json!({
                    "skill": r.skill,
                    "component": r.component,
                    "outcome": outcome_word(&r.outcome),
                    "error": r.outcome.as_ref().err(),
                    "ms": r.took.as_secs_f64() * 1000.0,
                })
            })
            .collect();
        print_json(&json!({ "components": rows, "failed": failed }));
    } else {
        println!(
            "{:<24} {:<32} {:<10} {:>8}",
            "skill", "component", "outcome", "ms"
        );
        for r in &results {
            println!(
                "{:<24} {:<32} {:<10} {:>8.1}",
                r.skill,
                r.component,
                outcome_word(&r.outcome),
                r.took.as_secs_f64() * 1000.0
            );
            if let Err(why) = &r.outcome {
                println!("  {why}");
            }
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn outcome_word(outcome: &Result<CompileOrigin, String>) -> &'static str {
    match outcome {
        Ok(CompileOrigin::Compiled) => "compiled",
        Ok(CompileOrigin::DiskCache) => "cached",
        Err(_) => "failed",
    }
}
