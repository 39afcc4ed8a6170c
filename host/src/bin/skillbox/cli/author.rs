//! `skillbox new skill` and `skillbox build`: flags in, library calls, a
//! summary out.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use super::CliError;
use skillbox_skill::author::{
    NativeCode, NewSkill, ToolLanguage, build, created_here, new_skill, tool_language,
};

#[derive(clap::Subcommand, Debug)]
pub(super) enum NewCommand {
    /// Create a skill folder: SKILL.md with the step structure, and with
    /// --tool a skillbox.yaml and a tool (tool/) with its WIT world and one
    /// function, which `skillbox build` builds.
    Skill {
        /// The skill's name (lowercase letters, digits, single hyphens).
        name: String,
        /// Add a tool written in this language.
        #[arg(long, value_enum)]
        tool: Option<Language>,
        /// Create it in this folder (default: the current folder).
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Language {
    Rust,
    Python,
    Js,
}

impl From<Language> for ToolLanguage {
    fn from(language: Language) -> Self {
        match language {
            Language::Rust => ToolLanguage::Rust,
            Language::Python => ToolLanguage::Python,
            Language::Js => ToolLanguage::JavaScript,
        }
    }
}

#[derive(clap::Args, Debug)]
pub(super) struct BuildArgs {
    /// The skill folder (default: the current folder).
    #[arg(value_name = "SKILL_DIR", default_value = ".")]
    dir: PathBuf,
    /// Build a Rust tool that `skillbox new` did not create on this
    /// machine: cargo runs its build scripts and procedural macros
    /// natively, as you. Without it, a terminal is asked, and anything else
    /// is refused.
    #[arg(long)]
    trust_build: bool,
}

pub(super) fn new(command: NewCommand) -> Result<ExitCode, CliError> {
    let NewCommand::Skill { name, tool, dir } = command;
    let created = new_skill(&NewSkill {
        name: name.clone(),
        parent: dir.clone(),
        tool: tool.map(Into::into),
    })
    .map_err(|e| CliError::Usage(e.to_string()))?;
    println!("created skill `{name}` in {}", created.display());
    println!("next:");
    println!(
        "  edit SKILL.md: say what the skill does and when to use it (skills check reports the template's text until then)"
    );
    if tool.is_some() {
        println!("  skillbox build {}", created.display());
    }
    println!("  skillbox skills check {}", created.display());
    if tool.is_some() {
        println!(
            "  skillbox call --skills {} {name}__greet --args '{{\"name\": \"Ada\"}}'",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn build_skill(args: BuildArgs) -> Result<ExitCode, CliError> {
    let language = tool_language(&args.dir).map_err(|e| CliError::Other(e.into()))?;
    let mut native_code = if args.trust_build {
        NativeCode::Trusted
    } else {
        NativeCode::CreatedHere
    };
    if language == ToolLanguage::Rust {
        eprintln!(
            "build: cargo runs this crate's build scripts and procedural macros natively, as you \
             (not in the sandbox); only the built component runs sandboxed"
        );
        if native_code == NativeCode::CreatedHere
            && !created_here(&args.dir)
            && std::io::stdin().is_terminal()
            && std::io::stderr().is_terminal()
            && ask_to_trust(&args.dir)
        {
            native_code = NativeCode::Trusted;
        }
    }
    eprintln!(
        "build: {} ({})",
        language.toolchain(),
        args.dir.join("tool").display()
    );
    let built =
        build(&args.dir, native_code, Stdio::inherit()).map_err(|e| CliError::Other(e.into()))?;
    for b in &built {
        println!("built {} ({} KiB)", b.component, b.bytes.div_ceil(1024));
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks the person at the terminal whether to build a folder `skillbox
/// new` did not create.
fn ask_to_trust(dir: &std::path::Path) -> bool {
    eprint!(
        "build: {} was not created by `skillbox new` here. Building it runs its build.rs and \
         the procedural macros of its dependencies as you, with your files and network. Have \
         you read tool/ and do you trust it? [y/N] ",
        dir.display()
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
}
