//! `skillbox grant`: what the user gives one skill, kept in the user's
//! configuration (`grants.yaml`), not in the skill's folder, so an
//! installed skill's lock keeps holding.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::flags::{SourceFlags, grants_error};
use super::{CliError, print_json};
use skillbox_sandbox::text;
use skillbox_skill::skill::Catalog;
use skillbox_skill::skill::manifest::WorkspaceAccess;
use skillbox_skill::skill::policy::{SkillGrant, UserGrants};

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("limits").multiple(true)
    .args(["timeout_ms", "fuel", "memory_mib", "output_bytes"])))]
pub(super) struct GrantArgs {
    /// The skill to give something to (or to show, with nothing else).
    #[arg(value_name = "SKILL", required_unless_present = "list")]
    skill: Option<String>,
    /// List what every skill was given.
    #[arg(long, conflicts_with = "skill")]
    list: bool,
    /// The skill's workspace access, whatever its skillbox.yaml asks:
    /// read, write, or none (never mounted).
    #[arg(long, value_name = "ACCESS")]
    workspace: Option<WorkspaceAccess>,
    /// A host it may reach over HTTP(S), HOST[:PORT] (without a port, 80
    /// and 443; repeatable).
    #[arg(long = "net", value_name = "HOST[:PORT]")]
    network: Vec<String>,
    /// An environment variable it gets from where skillbox runs
    /// (repeatable).
    #[arg(long, value_name = "KEY")]
    env: Vec<String>,
    /// A program of this host's its scripts may start (`pdftoppm`,
    /// `soffice`), by name; it runs in an OS sandbox with the call's
    /// workspace and limits (repeatable).
    #[arg(long = "program", value_name = "NAME")]
    programs: Vec<String>,
    /// Its wall-clock limit per call, in ms (not clamped by the ceilings).
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// Its CPU budget per call, in fuel units.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Its memory cap, in MiB.
    #[arg(long, value_name = "N")]
    memory_mib: Option<u64>,
    /// Its cap on stdout, stderr and the result, each, in bytes.
    #[arg(long, value_name = "N")]
    output_bytes: Option<usize>,
    /// Take back: everything given to the skill, or only the hosts, keys
    /// and programs named with --net, --env and --program (to change the
    /// workspace or a limit, grant it again).
    #[arg(long, conflicts_with_all = ["workspace", "limits", "list"])]
    revoke: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    sources: SourceFlags,
}

pub(super) fn run(args: GrantArgs) -> Result<ExitCode, CliError> {
    let file = UserGrants::default_path().ok_or_else(|| {
        CliError::Usage(
            "no configuration folder to keep grants in: set HOME, XDG_CONFIG_HOME or \
             SKILLBOX_CONFIG_DIR"
                .into(),
        )
    })?;
    let Some(skill) = args.skill.clone() else {
        return list(&UserGrants::load(&file).map_err(grants_error)?, args.json);
    };
    let mut given = args.given();
    given
        .check()
        .map_err(|why| CliError::Usage(format!("skillbox grant {skill}: {why}")))?;
    let grants = if args.revoke {
        revoke(&file, &skill, &given)?
    } else if given.is_empty() {
        UserGrants::load(&file).map_err(grants_error)?
    } else {
        // A grant is for the skill found now, by its folder: another skill
        // that only shares the name never gets it.
        let catalog = Catalog::build(&args.sources.options());
        let found = catalog.get(&skill).ok_or_else(|| {
            CliError::Usage(format!(
                "no skill named `{}` is found; install it first (skillbox add), or name the \
                 folder it is in with --skills DIR (skillbox skills list shows the skills found)",
                text::printable_line(&skill)
            ))
        })?;
        given.folder = Some(found.dir.clone());
        let has_tools = found.manifest.as_ref().is_some_and(|m| !m.tools.is_empty());
        if !given.network.is_empty() && !has_tools && !has_python(&found.dir) {
            eprintln!(
                "note: `{skill}` has no WebAssembly tools and no Python scripts, so nothing of \
                 it can reach these hosts for now (code run_code runs as the skill can); the \
                 grant is kept"
            );
        }
        for name in &given.programs {
            if skillbox_skill::skill::policy::resolve_program(name).is_none() {
                eprintln!(
                    "note: `{name}` is not installed here (in /usr/local/bin, /usr/bin or /bin); \
                     the grant is kept, and the skill's scripts can start it once it is"
                );
            }
        }
        UserGrants::edit(&file, |grants| {
            let entry = grants.skills.entry(skill.clone()).or_default();
            if entry.folder != given.folder {
                // The same name in another folder: a new skill, a new grant.
                *entry = SkillGrant::default();
            }
            entry.merge(&given);
        })
        .map_err(grants_error)?
    };
    let now = grants.skills.get(&skill).cloned().unwrap_or_default();
    if args.json {
        print_json(&json!({"skill": skill, "granted": now}));
    } else if now.is_empty() {
        println!("{skill}: nothing granted beyond what its skillbox.yaml asks");
    } else {
        println!("{skill}: {}", now.phrases().join("; "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Takes back what `named` names of `skill`'s grant (all of it when it
/// names no host or key); refuses when there is nothing of it to take.
fn revoke(file: &std::path::Path, skill: &str, named: &SkillGrant) -> Result<UserGrants, CliError> {
    let current = UserGrants::load(file).map_err(grants_error)?;
    let Some(grant) = current.skills.get(skill) else {
        return Err(CliError::Usage(format!(
            "skillbox grant {skill} --revoke: nothing is granted to `{skill}` (skillbox grant \
             --list shows what is)"
        )));
    };
    let whole = named.network.is_empty() && named.env.is_empty() && named.programs.is_empty();
    if !whole && grant.clone().take_back(named) == 0 {
        return Err(CliError::Usage(format!(
            "skillbox grant {skill} --revoke: none of the hosts, keys or programs named is granted to \
             `{skill}`; it has: {}",
            grant.phrases().join("; ")
        )));
    }
    UserGrants::edit(file, |grants| {
        if whole {
            grants.skills.remove(skill);
        } else if let Some(grant) = grants.skills.get_mut(skill) {
            grant.take_back(named);
        }
    })
    .map_err(grants_error)
}

impl GrantArgs {
    /// What the flags give (or, with --revoke, name).
    fn given(&self) -> SkillGrant {
        let mut grant = SkillGrant::default();
        grant.workspace = self.workspace;
        grant.network = self.network.clone();
        grant.env = self.env.clone();
        grant.programs = self.programs.clone();
        grant.limits.timeout_ms = self.timeout_ms;
        grant.limits.fuel = self.fuel;
        grant.limits.memory_mib = self.memory_mib;
        grant.limits.output_bytes = self.output_bytes;
        grant
    }
}

fn list(grants: &UserGrants, as_json: bool) -> Result<ExitCode, CliError> {
    if as_json {
        print_json(&json!({"skills": grants.skills}));
        return Ok(ExitCode::SUCCESS);
    }
    if grants.skills.is_empty() {
        println!(
            "(nothing granted; give a skill something with `skillbox grant SKILL --workspace write`)"
        );
    }
    for (skill, grant) in &grants.skills {
        println!("{skill}: {}", grant.phrases().join("; "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a skill folder holds Python (a few levels down, where skills
/// keep their scripts), whose HTTP a network grant is for.
fn has_python(dir: &std::path::Path) -> bool {
    fn walk(dir: &std::path::Path, depth: u32) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|entry| {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => depth > 0 && walk(&path, depth - 1),
                Ok(kind) if kind.is_file() => path.extension().is_some_and(|e| e == "py"),
                _ => false,
            }
        })
    }
    walk(dir, 3)
}
