//! `skillbox prepare`: install a skill's pinned pure-Python requirements
//! once, so its scripts import them and no run ever downloads.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::flags::SourceFlags;
use super::{CliError, print_json};
use skillbox_skill::runtime;
use skillbox_skill::skill::Catalog;

#[derive(clap::Args, Debug)]
pub(super) struct PrepareArgs {
    /// The skill, by name (from the installed skills and --skills) or by
    /// its folder.
    #[arg(value_name = "SKILL", required_unless_present = "built_in")]
    skill: Option<String>,
    /// A pinned requirement besides those the skill declares (its
    /// skillbox.yaml `python.requires`, else its requirements.txt) and
    /// those prepared before; repeatable: --with defusedxml==0.7.1. A pin
    /// for a project the skill lists replaces the skill's line.
    #[arg(long = "with", value_name = "NAME==VERSION")]
    with: Vec<String>,
    /// Leave a project out, whatever the skill declares (a requirement its
    /// scripts do not import, or one with no wheel that runs here);
    /// repeatable, and kept for later runs until --replace or --with
    /// names it again.
    #[arg(long, value_name = "NAME", conflicts_with = "list")]
    without: Vec<String>,
    /// Prepare only what the skill declares and --with gives, dropping
    /// packages added by earlier runs.
    #[arg(long, conflicts_with = "list")]
    replace: bool,
    /// Show what is prepared for the skill, and change nothing.
    #[arg(long)]
    list: bool,
    /// Show the packages the full Python runtime has built in (compiled
    /// ones among them), which no skill needs to prepare, and change
    /// nothing.
    #[arg(long, conflicts_with_all = ["list", "with", "without", "replace"])]
    built_in: bool,
    #[command(flatten)]
    sources: SourceFlags,
    /// Print JSON on stdout instead of a summary.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(mut args: PrepareArgs) -> Result<ExitCode, CliError> {
    let Some(name) = args.skill.clone().filter(|_| !args.built_in) else {
        return built_in(args.json);
    };
    let folder = PathBuf::from(&name);
    let by_folder = folder.join("SKILL.md").is_file();
    if by_folder {
        args.sources.skills.push(folder.clone());
    }
    let catalog = Catalog::build(&args.sources.options());
    let wanted = if by_folder {
        std::fs::canonicalize(&folder).ok()
    } else {
        None
    };
    let skill = catalog
        .skills()
        .find(|s| match &wanted {
            Some(dir) => &s.dir == dir,
            None => s.name() == name,
        })
        .ok_or_else(|| {
            CliError::Usage(format!(
                "no skill `{name}`: name a loaded skill (see `skillbox skills list`) or a folder with a SKILL.md"
            ))
        })?;
    let dir = runtime::python::packages_dir(&skill.dir).ok_or_else(|| {
        CliError::Usage("no data folder: set SKILLBOX_DATA_DIR, XDG_DATA_HOME or HOME".into())
    })?;
    if args.list {
        return list(skill.name(), &dir, args.json);
    }
    let before = runtime::packages::prepared_choices(&dir);
    let choices = runtime::packages::Choices {
        added: runtime::packages::combined(&before.added, &[], &args.with, args.replace),
        without: left_out(&before.without, &args),
    };
    let without = &choices.without;
    let mut requirements = runtime::packages::combined(
        &before.added,
        &runtime::packages::declared_by(skill),
        &args.with,
        args.replace,
    );
    requirements.retain(|r| !without.contains(&runtime::packages::project_of(r)));
    if requirements.is_empty() {
        eprintln!(
            "prepare: `{}` declares no requirements and none were given (--with NAME==VERSION); its scripts use the standard library only",
            skill.name()
        );
    }
    let built_in = runtime::python_full::installed()
        .map(|full| full.distributions.clone())
        .unwrap_or_default();
    if !without.is_empty() {
        eprintln!("prepare: leaving out {}", without.join(", "));
    }
    let installed = runtime::packages::prepare(
        &dir,
        &requirements,
        &choices,
        &built_in,
        |step| eprintln!("prepare: {step}"),
        byte_compile,
    )
    .map_err(|e| CliError::Other(anyhow::anyhow!("prepare `{}`: {e}", skill.name())))?;
    if args.json {
        print_json(&json!({
            "skill": skill.name(),
            "requirements": installed.requirements,
            "distributions": installed.distributions,
            "files_checked": installed.files,
            "built_in": installed.built_in,
            "without": without,
        }));
    } else {
        eprintln!(
            "prepare: `{}` ready: {} ({} files checked against their wheels); its Python scripts import them from /packages",
            skill.name(),
            if installed.distributions.is_empty() {
                "no packages".to_string()
            } else {
                installed.distributions.join(", ")
            },
            installed.files
        );
        if !installed.built_in.is_empty() {
            eprintln!(
                "prepare: its Python runs in the full Python runtime, which has {} built in",
                installed.built_in.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Byte-compiles the packages folder `site` with the Python runtime, so
/// that runs import them without compiling them (`runtime/bytecode.rs`).
/// The runtime's own compile is cached, so the first script after this
/// starts at once.
fn byte_compile(site: &std::path::Path) -> Result<runtime::packages::Compiled, String> {
    let python = runtime::python::runtime_path()
        .ok_or("the Python runtime is not installed (scripts/install)")?;
    let sandbox = skillbox_sandbox::Sandbox::new().map_err(|e| e.to_string())?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(runtime::bytecode::compile_site(&sandbox, &python, site))
}

/// The projects left out: those left out before (unless --replace) and
/// those --without names now, less any --with names again; as PEP 503
/// names.
fn left_out(before: &[String], args: &PrepareArgs) -> Vec<String> {
    let before = if args.replace { &[][..] } else { before };
    let added: Vec<String> = args
        .with
        .iter()
        .map(|r| runtime::packages::project_of(r))
        .collect();
    let mut out: Vec<String> = before
        .iter()
        .chain(&args.without)
        .map(|name| runtime::packages::project_of(name))
        .filter(|name| !added.contains(name))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `prepare --built-in`: what the full Python runtime has, if installed.
fn built_in(json: bool) -> Result<ExitCode, CliError> {
    let full = runtime::python_full::installed();
    if json {
        print_json(&json!({
            "installed": full.is_some(),
            "python": full.as_ref().map(|f| f.python.clone()),
            "distributions": full.as_ref().map_or(json!({}), |f| json!(f.distributions)),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let Some(full) = full else {
        println!(
            "the full Python runtime is not installed: scripts that import compiled packages \
             (numpy, pandas, lxml, Pillow, ...) cannot run. Install it with scripts/install \
             (scripts/build-python-full in a source checkout)."
        );
        return Ok(ExitCode::SUCCESS);
    };
    println!(
        "the full Python runtime (Python {}) has built in, for any skill that imports them:",
        full.python
    );
    for (name, version) in &full.distributions {
        println!("  {name} {version}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `prepare --list`: what the last `prepare` installed for the skill.
fn list(skill: &str, dir: &std::path::Path, json: bool) -> Result<ExitCode, CliError> {
    let record = runtime::packages::prepared_record(dir);
    if json {
        print_json(&json!({
            "skill": skill,
            "prepared": record.is_some(),
            "requirements": record.as_ref().map_or(json!([]), |r| r["requirements"].clone()),
            "distributions": record.as_ref().map_or(json!([]), |r| r["distributions"].clone()),
            "built_in": record.as_ref().map_or(json!([]), |r| r["built_in"].clone()),
            "without": record.as_ref().map_or(json!([]), |r| r["without"].clone()),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let Some(record) = record else {
        println!("nothing is prepared for `{skill}`; its scripts use the standard library only");
        return Ok(ExitCode::SUCCESS);
    };
    let names = |key: &str| {
        record[key]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    println!(
        "`{skill}` has {}; asked for: {}",
        match names("distributions") {
            listed if listed.is_empty() => "no packages".to_string(),
            listed => listed,
        },
        match names("requirements") {
            listed if listed.is_empty() => "nothing".to_string(),
            listed => listed,
        }
    );
    Ok(ExitCode::SUCCESS)
}
