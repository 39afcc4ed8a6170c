//! Flags several commands share: grants, limits and skill sources.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::sandbox::{Grants, Limits, MAX_MEMORY_BYTES, MIB, SideEffect, WorkspaceGrant};
use crate::skill::SourceOptions;
use crate::skill::policy::{LimitOverrides, UserPolicy};

/// Grants and limits for commands that run guest code.
#[derive(Args, Debug)]
pub struct SandboxFlags {
    /// Mount this folder at /workspace (read-only unless --allow-write).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Let the guest write to the workspace.
    #[arg(long, requires = "workspace")]
    pub allow_write: bool,
    /// Let skills that request this environment variable read it (repeatable).
    #[arg(long, value_name = "KEY")]
    pub allow_env: Vec<String>,
    /// Wall-clock limit in milliseconds (default: 10000 read, 30000 write, 60000 script).
    #[arg(long, value_name = "N")]
    pub timeout_ms: Option<u64>,
    /// CPU budget in fuel units, about one per instruction (default: 10^10).
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Memory cap in MiB (default: 64, at most 4096).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(MAX_MEMORY_BYTES / MIB) as u64))]
    pub memory_mib: Option<u64>,
    /// Cap on captured stdout, stderr and the result, each, in bytes (default: 1 MiB).
    #[arg(long, value_name = "N")]
    pub max_output_bytes: Option<usize>,
}

impl SandboxFlags {
    /// The user's policy, with the workspace checked to exist.
    pub fn policy(&self) -> Result<UserPolicy, CliError> {
        if let Some(dir) = &self.workspace
            && !dir.is_dir()
        {
            return Err(CliError::Usage(format!(
                "--workspace {}: not a folder; pass an existing directory",
                dir.display()
            )));
        }
        Ok(UserPolicy {
            workspace: self.workspace.clone(),
            allow_write: self.allow_write,
            allow_env: self.allow_env.clone(),
        })
    }

    /// Grants for a bare component: exactly what the flags say.
    pub fn bare_grants(&self) -> Result<Grants, CliError> {
        let policy = self.policy()?;
        let env = policy
            .allow_env
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
            .collect();
        Ok(Grants {
            workspace: policy.workspace.map(|host_dir| WorkspaceGrant {
                host_dir,
                writable: policy.allow_write,
            }),
            env,
            ..Grants::default()
        })
    }

    pub fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            timeout: self.timeout_ms.map(Duration::from_millis),
            fuel: self.fuel,
            memory_bytes: self.memory_mib.map(|m| m as usize * MIB),
            output_bytes: self.max_output_bytes,
        }
    }

    pub fn limits(&self, class: SideEffect) -> Limits {
        let mut limits = Limits::for_class(class);
        self.overrides().apply(&mut limits);
        limits
    }
}

/// Where skills are found.
#[derive(Args, Debug, Clone)]
pub struct SourceFlags {
    /// Also load the skills in this folder (repeatable; highest precedence).
    #[arg(long = "skills", value_name = "DIR")]
    pub skills: Vec<PathBuf>,
    /// Load the project's skills (./.agents/skills, ./.claude/skills).
    #[arg(long)]
    pub trust_project: bool,
}

impl SourceFlags {
    pub fn options(&self) -> SourceOptions {
        SourceOptions::from_environment(self.skills.clone(), self.trust_project)
    }
}
