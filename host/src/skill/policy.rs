//! From a skill's requests and the user's policy to the grants and limits
//! of one call. Only the user's policy can widen what a call gets.

use std::path::PathBuf;
use std::time::Duration;

use super::manifest::WorkspaceAccess;
use super::model::Skill;
use crate::sandbox::{Grants, Limits, MIB, SideEffect, WorkspaceGrant};

/// What the user allows, from the command line.
#[derive(Debug, Clone, Default)]
pub struct UserPolicy {
    pub workspace: Option<PathBuf>,
    pub allow_write: bool,
    /// Environment variables the user lets skills that request them read.
    pub allow_env: Vec<String>,
}

/// Limits the user set explicitly; they override the skill's own.
#[derive(Debug, Clone, Default)]
pub struct LimitOverrides {
    pub timeout: Option<Duration>,
    pub fuel: Option<u64>,
    pub memory_bytes: Option<usize>,
    pub output_bytes: Option<usize>,
}

/// The grants in force for a skill, and notes on requests not granted.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub grants: Grants,
    pub notes: Vec<String>,
}

pub fn grants(skill: &Skill, policy: &UserPolicy) -> Resolved {
    let mut notes = Vec::new();
    let requested = skill
        .manifest
        .as_ref()
        .map(|m| m.grants.clone())
        .unwrap_or_default();
    let workspace = match (requested.workspace, &policy.workspace) {
        (WorkspaceAccess::None, Some(_)) => {
            notes.push(format!(
                "skill `{}` does not request the workspace, so it is not mounted",
                skill.name()
            ));
            None
        }
        (_, None) => {
            if requested.workspace != WorkspaceAccess::None {
                notes.push(format!(
                    "skill `{}` requests the workspace; none was given (--workspace DIR)",
                    skill.name()
                ));
            }
            None
        }
        (access, Some(dir)) => {
            let writable = access == WorkspaceAccess::Write && policy.allow_write;
            if access == WorkspaceAccess::Write && !policy.allow_write {
                notes.push(format!(
                    "skill `{}` requests write access; the workspace is read-only without --allow-write",
                    skill.name()
                ));
            }
            Some(WorkspaceGrant {
                host_dir: dir.clone(),
                writable,
            })
        }
    };
    let mut env = Vec::new();
    for key in &requested.env {
        if !policy.allow_env.contains(key) {
            notes.push(format!(
                "environment variable {key} is requested but not allowed (--allow-env {key})"
            ));
        } else if let Ok(value) = std::env::var(key) {
            env.push((key.clone(), value));
        }
    }
    if !requested.network.is_empty() {
        notes.push(format!(
            "network access to {} is requested; this host grants no network, so the tools run offline",
            requested.network.join(", ")
        ));
    }
    Resolved {
        grants: Grants {
            skill_dir: Some(skill.dir.clone()),
            workspace,
            env,
        },
        notes,
    }
}

/// Limits for a call of `class`: the class defaults, then the skill's
/// manifest, then the user's overrides.
pub fn limits(skill: &Skill, class: SideEffect, overrides: &LimitOverrides) -> Limits {
    let mut limits = Limits::for_class(class);
    if let Some(m) = skill.manifest.as_ref().map(|m| &m.limits) {
        if let Some(ms) = m.timeout_ms {
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(fuel) = m.fuel {
            limits.fuel = fuel;
        }
        if let Some(mib) = m.memory_mib {
            limits.memory_bytes = mib as usize * MIB;
        }
        if let Some(bytes) = m.output_bytes {
            limits.output_bytes = bytes;
            limits.result_bytes = bytes;
        }
    }
    overrides.apply(&mut limits);
    limits
}

impl LimitOverrides {
    pub fn apply(&self, limits: &mut Limits) {
        if let Some(t) = self.timeout {
            limits.timeout = t;
        }
        if let Some(f) = self.fuel {
            limits.fuel = f;
        }
        if let Some(m) = self.memory_bytes {
            limits.memory_bytes = m;
        }
        if let Some(o) = self.output_bytes {
            limits.output_bytes = o;
            limits.result_bytes = o;
        }
    }
}
