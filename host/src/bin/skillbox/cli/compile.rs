//! `skillbox compile`: fill the compiled-code cache ahead of time.
//!
//! A server compiles a component the first time a tool of it is listed or
//! called: hundreds of milliseconds for a small component, seconds for a
//! Python one. Images and CI jobs run this once, so the first call of
//! every tool loads native code from the cache instead.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::flags::SourceFlags;
use super::{CliError, print_json};
use skillbox::{CompileOutcome, Compiled, Skillbox};

#[derive(clap::Args, Debug)]
pub(super) struct CompileArgs {
    /// Skill folders to compile (each like --skills DIR), besides the
    /// installed skills.
    #[arg(value_name = "SKILLS_DIR")]
    dirs: Vec<PathBuf>,
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

pub(super) fn run(mut args: CompileArgs) -> Result<ExitCode, CliError> {
    args.sources.skills.append(&mut args.dirs);
    let cache = match args.cache {
        Some(dir) => dir,
        None => skillbox_sandbox::DiskCache::default_location()
            .map(|cache| cache.dir().to_path_buf())
            .ok_or_else(|| {
                CliError::Usage(
                    "no cache folder: pass --cache DIR, or set SKILLBOX_CACHE_DIR or HOME".into(),
                )
            })?,
    };
    let skillbox = args
        .sources
        .apply(Skillbox::builder())
        .cache_dir(cache)
        .build()?;
    eprintln!(
        "compile: the components of {} skills, on {} cores",
        skillbox.skills().len(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let results = skillbox.compile_all(|n, total, compiled| {
        eprintln!(
            "compile: [{n}/{total}] {}/{}: {} ({} ms)",
            compiled.skill,
            compiled.component,
            outcome_word(compiled),
            compiled.took.as_millis()
        );
    });
    let failed = results
        .iter()
        .filter(|r| matches!(r.outcome, CompileOutcome::Failed { .. }))
        .count();
    if args.json {
        let rows: Vec<_> = results
            .iter()
            .map(|r| {
                json!({
                    "skill": r.skill,
                    "component": r.component,
                    "outcome": outcome_word(r),
                    "error": match &r.outcome {
                        CompileOutcome::Failed { reason } => Some(reason.as_str()),
                        _ => None,
                    },
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
                outcome_word(r),
                r.took.as_secs_f64() * 1000.0
            );
            if let CompileOutcome::Failed { reason } = &r.outcome {
                println!("  {reason}");
            }
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn outcome_word(compiled: &Compiled) -> &'static str {
    match compiled.outcome {
        CompileOutcome::Compiled => "compiled",
        CompileOutcome::FromCache => "cached",
        _ => "failed",
    }
}
