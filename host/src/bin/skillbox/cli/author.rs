//! `skillbox new skill` and `skillbox build`: flags in, library calls, a
//! summary out.

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use super::CliError;
use skillbox::unstable::author::{NewSkill, build, new_skill};

#[derive(clap::Subcommand, Debug)]
pub enum NewCommand {
    /// Create a skill folder that passes `skills check`: SKILL.md with the
    /// step structure, and with --tool rust a skillbox.yaml and a Rust tool
    /// crate (tool/) with its WIT world and one function.
    Skill {
        /// The skill's name (lowercase letters, digits, single hyphens).
        name: String,
        /// Add a tool written in this language.
        #[arg(long, value_enum)]
        tool: Option<ToolLanguage>,
        /// Create it in this folder (default: the current folder).
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ToolLanguage {
    Rust,
}

#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// The skill folder (default: the current folder).
    #[arg(value_name = "SKILL_DIR", default_value = ".")]
    dir: PathBuf,
}

pub fn new(command: NewCommand) -> Result<ExitCode, CliError> {
    let NewCommand::Skill { name, tool, dir } = command;
    let rust_tool = matches!(tool, Some(ToolLanguage::Rust));
    let created = new_skill(&NewSkill {
        name: name.clone(),
        parent: dir.clone(),
        rust_tool,
    })
    .map_err(|e| CliError::Usage(e.to_string()))?;
    println!("created skill `{name}` in {}", created.display());
    println!("next:");
    if rust_tool {
        println!("  skillbox build {}", created.display());
    }
    println!("  skillbox skills check {}", created.display());
    if rust_tool {
        println!(
            "  skillbox call --skills {} {name}__greet --args '{{\"name\": \"Ada\"}}'",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn build_skill(args: BuildArgs) -> Result<ExitCode, CliError> {
    eprintln!(
        "build: cargo build --release --target wasm32-wasip2 ({})",
        args.dir
            .join(skillbox::unstable::author::TOOL_CRATE)
            .display()
    );
    let built = build(&args.dir, Stdio::inherit()).map_err(|e| CliError::Other(e.into()))?;
    for b in &built {
        println!("built {} ({} KiB)", b.component, b.bytes.div_ceil(1024));
    }
    Ok(ExitCode::SUCCESS)
}
