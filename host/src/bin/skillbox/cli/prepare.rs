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
    #[arg(value_name = "SKILL")]
    skill: String,
    /// A pinned requirement besides those the skill declares (its
    /// skillbox.yaml `python.requires`, else its requirements.txt);
    /// repeatable: --with defusedxml==0.7.1.
    #[arg(long = "with", value_name = "NAME==VERSION")]
    with: Vec<String>,
    #[command(flatten)]
    sources: SourceFlags,
    /// Print JSON on stdout instead of a summary.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(mut args: PrepareArgs) -> Result<ExitCode, CliError> {
    let folder = PathBuf::from(&args.skill);
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
            None => s.name() == args.skill,
        })
        .ok_or_else(|| {
            CliError::Usage(format!(
                "no skill `{}`: name a loaded skill (see `skillbox skills list`) or a folder with a SKILL.md",
                args.skill
            ))
        })?;
    let mut requirements = runtime::packages::declared_by(skill);
    requirements.extend(args.with.iter().cloned());
    requirements.dedup();
    let dir = runtime::python::packages_dir(&skill.dir).ok_or_else(|| {
        CliError::Usage("no data folder: set SKILLBOX_DATA_DIR, XDG_DATA_HOME or HOME".into())
    })?;
    if requirements.is_empty() {
        eprintln!(
            "prepare: `{}` declares no requirements and none were given (--with NAME==VERSION); its scripts use the standard library only",
            skill.name()
        );
    }
    let installed =
        runtime::packages::prepare(&dir, &requirements, |step| eprintln!("prepare: {step}"))
            .map_err(|e| CliError::Other(anyhow::anyhow!("prepare `{}`: {e}", skill.name())))?;
    if args.json {
        print_json(&json!({
            "skill": skill.name(),
            "requirements": installed.requirements,
            "distributions": installed.distributions,
            "files_checked": installed.files,
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
    }
    Ok(ExitCode::SUCCESS)
}
