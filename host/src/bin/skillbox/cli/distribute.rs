//! `publish`, `key new`, `add`, `sync`, `update` and `remove`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{CliError, print_json, runtime};
use skillbox_distribute::install::Recovery;
use skillbox_distribute::reference::SkillRef;
use skillbox_distribute::registry::RegistryOptions;
use skillbox_distribute::sign::{self, SigningKey, TrustedKeys};
use skillbox_distribute::{Plan, Settings, lifecycle, publish};
use skillbox_sandbox::Sandbox;
use skillbox_skill::skill::policy::UserGrants;

/// How to reach registries.
#[derive(Args, Debug, Clone)]
pub(super) struct RegistryFlags {
    /// A Docker-style config.json with `auths` for private registries
    /// (default: $DOCKER_CONFIG/config.json, else ~/.docker/config.json).
    #[arg(long, value_name = "FILE")]
    pub registry_auth_file: Option<PathBuf>,
    /// Reach this registry (HOST[:PORT]) over plain HTTP although it is not
    /// loopback (repeatable). Loopback registries always use HTTP.
    #[arg(long, value_name = "HOST")]
    pub insecure_registry: Vec<String>,
    /// Give up on a registry that does not answer for this long.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub registry_timeout_secs: u64,
}

impl RegistryFlags {
    fn options(&self) -> RegistryOptions {
        RegistryOptions {
            insecure: self.insecure_registry.clone(),
            auth_file: self.registry_auth_file.clone(),
            timeout: Duration::from_secs(self.registry_timeout_secs),
        }
    }
}

/// Which source folder a command installs into.
#[derive(Args, Debug, Clone)]
pub(super) struct TargetFlags {
    /// The project's .agents/skills (its lock is meant to be committed),
    /// instead of the user's ~/.skillbox/skills.
    #[arg(long)]
    pub project: bool,
}

impl TargetFlags {
    fn root(&self) -> Result<PathBuf, CliError> {
        if self.project {
            let cwd = std::env::current_dir().map_err(|e| CliError::Other(e.into()))?;
            Ok(cwd.join(".agents/skills"))
        } else {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".skillbox/skills"))
                .ok_or_else(|| {
                    CliError::Usage(
                        "HOME is not set; pass --project to install into this project".into(),
                    )
                })
        }
    }
}

/// What verifying a signature trusts.
#[derive(Args, Debug, Clone)]
pub(super) struct TrustFlags {
    /// Trust this minisign public key too (repeatable); the others are the
    /// *.pub files in ~/.config/skillbox/trusted-keys.
    #[arg(long, value_name = "FILE")]
    pub trust_key: Vec<PathBuf>,
    /// Install an unsigned artifact or a git source (the lock records it as
    /// unsigned). A wrong signature is refused regardless.
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Accept a signer other than the one the lock pinned.
    #[arg(long)]
    pub allow_signer_change: bool,
    /// Install without asking (for CI); a widening update is installed too.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub(super) struct PublishArgs {
    /// The skill folder.
    pub dir: PathBuf,
    /// oci://HOST[:PORT]/REPO:TAG
    pub reference: String,
    /// Sign with this minisign secret key (`skillbox key new`).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryFlags,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum KeyCommand {
    /// Write NAME.key (private, mode 0600) and NAME.pub: a minisign key
    /// pair, which Debian's `minisign` reads too.
    New {
        name: String,
        /// Where to write them (default: the current folder).
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
pub(super) struct AddArgs {
    /// oci://HOST[:PORT]/REPO:TAG, oci://HOST/REPO@sha256:DIGEST,
    /// git+URL[@COMMIT][#path=SUBDIR], or the path of a git repository on
    /// this machine (PATH[#path=SUBDIR]).
    pub reference: String,
    #[command(flatten)]
    pub target: TargetFlags,
    #[command(flatten)]
    pub trust: TrustFlags,
    #[command(flatten)]
    pub registry: RegistryFlags,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(super) struct SyncArgs {
    /// Only check: exit 1 and name each drifted file; change nothing.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub target: TargetFlags,
    #[command(flatten)]
    pub registry: RegistryFlags,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(super) struct UpdateArgs {
    /// The skill to update (default: every locked skill).
    pub name: Option<String>,
    #[command(flatten)]
    pub target: TargetFlags,
    #[command(flatten)]
    pub trust: TrustFlags,
    #[command(flatten)]
    pub registry: RegistryFlags,
}

#[derive(Args, Debug)]
pub(super) struct RemoveArgs {
    pub name: String,
    #[command(flatten)]
    pub target: TargetFlags,
}

fn usage(e: impl std::fmt::Display) -> CliError {
    CliError::Usage(e.to_string())
}

fn failed(e: impl Into<anyhow::Error>) -> CliError {
    CliError::Other(e.into())
}

pub(super) fn publish(args: PublishArgs) -> Result<ExitCode, CliError> {
    let SkillRef::Oci(at) = args.reference.parse::<SkillRef>().map_err(usage)? else {
        return Err(CliError::Usage(format!(
            "{}: publish pushes to an OCI registry; use oci://HOST[:PORT]/REPO:TAG",
            args.reference
        )));
    };
    if at.tag.is_none() {
        return Err(CliError::Usage(
            "publish needs a tag: oci://HOST/REPO:TAG".into(),
        ));
    }
    if !args.dir.join("SKILL.md").is_file() {
        return Err(CliError::Usage(format!(
            "{}: not a skill folder (no SKILL.md)",
            args.dir.display()
        )));
    }
    let key = args
        .key
        .as_deref()
        .map(SigningKey::read)
        .transpose()
        .map_err(usage)?;
    let dir = std::fs::canonicalize(&args.dir).map_err(failed)?;
    let sandbox = Arc::new(Sandbox::new()?);
    eprintln!(
        "skillbox: publishing {} to {at}",
        dir.file_name().unwrap_or_default().to_string_lossy()
    );
    let published = runtime()?
        .block_on(publish::publish(
            &dir,
            &at,
            key.as_ref(),
            &args.registry.options(),
            &sandbox,
        ))
        .map_err(failed)?;
    if args.json {
        print_json(&serde_json::to_value(&published).unwrap_or_default());
    } else {
        println!("{}", published.digest);
        eprintln!(
            "skillbox: pushed {} ({} files, {} bytes) as {}{}",
            published.name,
            published.files,
            published.bytes,
            published.pinned,
            published
                .signer
                .as_ref()
                .map_or(", unsigned".to_string(), |s| format!(
                    ", signed by {}",
                    s.label()
                ))
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn key(command: KeyCommand) -> Result<ExitCode, CliError> {
    let KeyCommand::New { name, dir } = command;
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(CliError::Usage(format!("`{name}` cannot name a key file")));
    }
    let (key, public, signer) = sign::new_key_pair(&dir, &name).map_err(usage)?;
    println!("{}", public.display());
    eprintln!(
        "skillbox: wrote {} (secret, mode 0600; keep it out of version control) and {}; key id {}",
        key.display(),
        public.display(),
        signer.key_id
    );
    eprintln!(
        "skillbox: users trust it with `--trust-key {}` or by copying it into ~/.config/skillbox/trusted-keys/",
        public.file_name().unwrap_or_default().to_string_lossy()
    );
    Ok(ExitCode::SUCCESS)
}

fn settings(
    target: &TargetFlags,
    trust: Option<&TrustFlags>,
    registry: &RegistryFlags,
) -> Result<Settings, CliError> {
    let trusted_dir = sign::trusted_keys_dir();
    let extra = trust.map(|t| t.trust_key.clone()).unwrap_or_default();
    let trusted = TrustedKeys::load(trusted_dir.as_deref(), &extra).map_err(usage)?;
    Ok(Settings {
        root: target.root()?,
        registry: registry.options(),
        trusted,
        allow_unsigned: trust.is_some_and(|t| t.allow_unsigned),
        allow_signer_change: trust.is_some_and(|t| t.allow_signer_change),
        grants: match UserGrants::default_path() {
            Some(file) => UserGrants::load(&file).map_err(super::flags::grants_error)?,
            None => UserGrants::default(),
        },
    })
}

fn report_recovery(recovered: &Recovery) {
    match recovered {
        Recovery::Nothing => {}
        Recovery::Finished(name) => {
            eprintln!("skillbox: finished an interrupted install of `{name}` (it had committed)")
        }
        Recovery::Discarded => eprintln!(
            "skillbox: removed an install journal that named folders outside the skills folder; nothing else was touched"
        ),
        Recovery::Undone(name) => eprintln!(
            "skillbox: undid an interrupted install of `{name}`; the folder and the lock are as they were before it"
        ),
    }
}

/// Prints what the plan installs and asks; `Ok(false)` when declined.
fn confirm(plan: &Plan, yes: bool, verb: &str) -> Result<bool, CliError> {
    let mut err = std::io::stderr().lock();
    let signer = plan
        .entry
        .signer
        .as_ref()
        .map_or("UNSIGNED".to_string(), |s| {
            format!("signed by {} ({})", s.label(), s.fingerprint)
        });
    let _ = writeln!(err, "{verb} `{}` from {}", plan.name, plan.entry.resolved);
    let _ = writeln!(
        err,
        "  {signer}; {} files, content {}",
        plan.entry.files.len(),
        plan.entry.content_digest
    );
    let _ = writeln!(err, "  it asks for:");
    for line in plan.permissions.lines() {
        let _ = writeln!(err, "    {line}");
    }
    for warning in &plan.warnings {
        let _ = writeln!(err, "  warning: {warning}");
    }
    // The same name from somewhere else is another skill in its place.
    if let Some(previous) = plan
        .previous
        .as_ref()
        .filter(|p| p.reference != plan.entry.reference)
    {
        let _ = writeln!(
            err,
            "  it replaces the installed `{}` from {}",
            plan.name, previous.reference
        );
    }
    if !plan.widened.is_empty() {
        let _ = writeln!(
            err,
            "  compared with the installed version it newly asks for:"
        );
        for line in &plan.widened {
            let _ = writeln!(err, "    + {line}");
        }
    }
    let asks_more = plan.previous.is_none() || !plan.widened.is_empty();
    if yes || !asks_more {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(format!(
            "not installed: {verb} needs a yes, and there is no terminal to ask on; review the above and run again with --yes"
        )));
    }
    let _ = write!(err, "{verb} it? [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(failed)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

pub(super) fn add(args: AddArgs) -> Result<ExitCode, CliError> {
    let reference = SkillRef::parse_or_local(&args.reference).map_err(usage)?;
    let settings = settings(&args.target, Some(&args.trust), &args.registry)?;
    let sandbox = Arc::new(Sandbox::new()?);
    eprintln!("skillbox: fetching {reference}");
    let plan = runtime()?
        .block_on(lifecycle::plan(&reference, &settings, &sandbox))
        .map_err(failed)?;
    report_recovery(&plan.recovered);
    if plan.is_unchanged() {
        eprintln!(
            "skillbox: `{}` is already installed at {}",
            plan.name, plan.entry.resolved
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !confirm(&plan, args.trust.yes, "install")? {
        eprintln!("skillbox: not installed");
        return Ok(ExitCode::from(1));
    }
    let (name, entry) = (plan.name.clone(), plan.entry.clone());
    plan.install().map_err(failed)?;
    if args.json {
        print_json(&json!({"name": name, "root": settings.root, "entry": entry}));
    } else {
        println!("{name}");
    }
    eprintln!(
        "skillbox: installed `{name}` into {}, pinned in its skillbox.lock",
        settings.root.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub(super) fn update(args: UpdateArgs) -> Result<ExitCode, CliError> {
    let settings = settings(&args.target, Some(&args.trust), &args.registry)?;
    let locked = skillbox_skill::skill::lock::LockFile::read(&settings.root).map_err(failed)?;
    let names: Vec<String> = match &args.name {
        Some(name) => vec![name.clone()],
        None => locked.skills.keys().cloned().collect(),
    };
    if names.is_empty() {
        eprintln!("skillbox: no locked skills in {}", settings.root.display());
        return Ok(ExitCode::SUCCESS);
    }
    let sandbox = Arc::new(Sandbox::new()?);
    let rt = runtime()?;
    let mut declined = false;
    for name in names {
        // One skill that cannot be updated does not hold back the others.
        let plan = match rt.block_on(lifecycle::plan_update(&name, &settings, &sandbox)) {
            Ok(plan) => plan,
            Err(e) => {
                eprintln!("error: `{name}` not updated: {e}");
                declined = true;
                continue;
            }
        };
        report_recovery(&plan.recovered);
        if plan.is_unchanged() {
            eprintln!("skillbox: `{name}` is up to date ({})", plan.entry.resolved);
            continue;
        }
        if !confirm(&plan, args.trust.yes, "update")? {
            eprintln!("skillbox: `{name}` not updated");
            declined = true;
            continue;
        }
        let resolved = plan.entry.resolved.clone();
        plan.install().map_err(failed)?;
        eprintln!("skillbox: updated `{name}` to {resolved}");
    }
    Ok(if declined {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

pub(super) fn sync(args: SyncArgs) -> Result<ExitCode, CliError> {
    let settings = settings(&args.target, None, &args.registry)?;
    let sandbox = Arc::new(Sandbox::new()?);
    let (recovered, items) = runtime()?
        .block_on(lifecycle::sync(&settings, !args.check, &sandbox))
        .map_err(failed)?;
    report_recovery(&recovered);
    if args.json {
        print_json(&json!({"root": settings.root, "skills": items}));
    } else if items.is_empty() {
        eprintln!("skillbox: no locked skills in {}", settings.root.display());
    } else {
        for item in &items {
            match &item.detail {
                Some(detail) => println!("{}\t{}\t{detail}", item.name, item.state),
                None => println!("{}\t{}", item.name, item.state),
            }
        }
    }
    let bad = items.iter().any(|i| !matches!(i.state, "ok" | "restored"));
    if bad && !args.check {
        eprintln!("skillbox: some skills could not be restored; see above");
    } else if bad {
        eprintln!(
            "skillbox: installed skills differ from the lock; run `skillbox sync` to restore them"
        );
    }
    Ok(if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

pub(super) fn remove(args: RemoveArgs) -> Result<ExitCode, CliError> {
    let root = args.target.root()?;
    let recovered = lifecycle::remove(&root, &args.name).map_err(usage)?;
    report_recovery(&recovered);
    eprintln!("skillbox: removed `{}` and its lock entry", args.name);
    // A grant bound to the folder just emptied would pass to whatever is
    // installed there next under that name: it goes with the skill.
    if let Some(file) = UserGrants::default_path() {
        let folder = std::fs::canonicalize(&root)
            .unwrap_or_else(|_| root.clone())
            .join(&args.name);
        let bound = |grants: &UserGrants| {
            grants
                .skills
                .get(&args.name)
                .is_some_and(|g| g.folder.as_ref() == Some(&folder))
        };
        if UserGrants::load(&file).is_ok_and(|g| bound(&g)) {
            UserGrants::edit(&file, |grants| {
                if bound(grants) {
                    grants.skills.remove(&args.name);
                }
            })
            .map_err(super::flags::grants_error)?;
            eprintln!("skillbox: and what you had granted `{}`", args.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}
