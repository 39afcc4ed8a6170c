//! `skillbox grant`: what the user gives one skill, kept in the user's
//! configuration (`grants.yaml`), not in the skill's folder, so an
//! installed skill's lock keeps holding.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::flags::SourceFlags;
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
    /// Take back: everything given to the skill, or only the hosts and
    /// keys named with --net and --env.
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
        CliError::Usage("no configuration folder: set HOME or XDG_CONFIG_HOME".into())
    })?;
    let fail = |e: skillbox_skill::skill::policy::GrantsError| CliError::Usage(e.to_string());
    let Some(skill) = args.skill.clone() else {
        return list(&UserGrants::load(&file).map_err(fail)?, args.json);
    };
    let given = args.given();
    given
        .check()
        .map_err(|why| CliError::Usage(format!("skillbox grant {skill}: {why}")))?;
    let grants = if args.revoke {
        UserGrants::edit(&file, |grants| {
            let Some(grant) = grants.skills.get_mut(&skill) else {
                return;
            };
            if given.network.is_empty() && given.env.is_empty() {
                *grant = SkillGrant::default();
            }
            grant.network.retain(|h| !given.network.contains(h));
            grant.env.retain(|k| !given.env.contains(k));
        })
        .map_err(fail)?
    } else if given.is_empty() {
        UserGrants::load(&file).map_err(fail)?
    } else {
        UserGrants::edit(&file, |grants| {
            grants
                .skills
                .entry(skill.clone())
                .or_default()
                .merge(&given)
        })
        .map_err(fail)?
    };
    let now = grants.skills.get(&skill).cloned().unwrap_or_default();
    if args.json {
        print_json(&json!({"skill": skill, "granted": now, "file": file}));
    } else if now.is_empty() {
        println!("{skill}: nothing granted beyond what its skillbox.yaml asks");
    } else {
        println!("{skill}: {}", now.phrases().join("; "));
    }
    let catalog = Catalog::build(&args.sources.options());
    if catalog.get(&skill).is_none() {
        eprintln!(
            "note: no skill named `{}` is found now; the grant applies when one is \
             (skills list shows the skills found)",
            text::printable_line(&skill)
        );
    }
    Ok(ExitCode::SUCCESS)
}

impl GrantArgs {
    /// What the flags give (or, with --revoke, name).
    fn given(&self) -> SkillGrant {
        let mut grant = SkillGrant::default();
        grant.workspace = self.workspace;
        grant.network = self.network.clone();
        grant.env = self.env.clone();
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
