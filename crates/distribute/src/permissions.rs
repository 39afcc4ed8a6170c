//! What a skill asks to be allowed, as `add` shows it before installing
//! and `update` compares it across versions.
//!
//! Only the user's policy turns a request into a grant, but a request is
//! what a user weighs when deciding to install: a new version that asks
//! for the network or for write access deserves a second look.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::skill::Skill;
use crate::skill::manifest::{Effect, ManifestLimits, WorkspaceAccess};
use crate::skill::policy::SkillGrant;

/// Everything one version of a skill asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Permissions {
    /// Whether the model may invoke the skill (no
    /// `disable-model-invocation`).
    pub model_invocation: bool,
    /// `component:function` (or `component:*` for every export) and its
    /// effect.
    pub tools: BTreeMap<String, Effect>,
    pub scripts: BTreeSet<String>,
    pub workspace: WorkspaceAccess,
    pub network: BTreeSet<String>,
    pub env: BTreeSet<String>,
    /// Programs of the host's its scripts start: those its manifest asks
    /// for and those its scripts name (`skill/programs.rs`). Each runs only
    /// when the user grants it.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub programs: BTreeSet<String>,
    /// Limits the manifest raises, by name (`timeout_ms`, `fuel`,
    /// `memory_mib`, `output_bytes`).
    pub limits: BTreeMap<String, u64>,
    /// What the user gave the skill beyond its asks (`skillbox grant`),
    /// already counted in the fields above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub granted: Option<SkillGrant>,
}

impl Permissions {
    /// What `skill` asks for, as it will really be granted: every file it
    /// can run (by the one rule of [`Skill::script_names`]), and the
    /// workspace access its code gets, which for a skill without a
    /// manifest is read-only ([`crate::skill::policy::requested`]).
    pub fn of(skill: &Skill) -> Permissions {
        let mut permissions = Permissions {
            model_invocation: skill.model_invocable(),
            scripts: skill.script_names().into_iter().collect(),
            ..Permissions::default()
        };
        if let Some(manifest) = &skill.manifest {
            for tool in &manifest.tools {
                // Undescribed functions may do anything the grants allow;
                // the host serves them as writing (skill/tools.rs).
                if tool.functions.is_empty() {
                    permissions
                        .tools
                        .insert(format!("{}:*", tool.component), Effect::Write);
                }
                for (function, spec) in &tool.functions {
                    permissions
                        .tools
                        .insert(format!("{}:{function}", tool.component), spec.effect);
                }
            }
            permissions.raise_limits(&manifest.limits);
        }
        let requested = crate::skill::policy::requested(skill);
        let runs_code = !permissions.tools.is_empty() || !permissions.scripts.is_empty();
        if runs_code {
            permissions.workspace = requested.workspace;
            permissions.network = requested.network.iter().cloned().collect();
            permissions.env = requested.env.iter().cloned().collect();
            permissions.programs = requested.programs.iter().cloned().collect();
            permissions.programs.extend(skill.programs_named());
        }
        permissions
    }

    /// What the skill will really get once the user's own grant is
    /// counted: its workspace access replaced, hosts, keys and limits
    /// added. Compared across versions, a new version that asks for what
    /// the user already gave asks for nothing more.
    pub fn with_grant(mut self, grant: Option<&SkillGrant>) -> Permissions {
        let Some(grant) = grant.filter(|g| !g.is_empty()) else {
            return self;
        };
        if let Some(access) = grant.workspace {
            self.workspace = access;
        }
        self.network.extend(grant.network.iter().cloned());
        self.env.extend(grant.env.iter().cloned());
        self.programs.extend(grant.programs.iter().cloned());
        self.raise_limits(&grant.limits);
        self.granted = Some(grant.clone());
        self
    }

    /// Records each limit `limits` sets.
    fn raise_limits(&mut self, limits: &ManifestLimits) {
        for (name, value) in limits.named() {
            if let Some(value) = value {
                self.limits.insert(name.into(), value);
            }
        }
    }

    /// One line per thing asked for, for a person to read.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![if self.model_invocation {
            "invocation: the model and the user".to_string()
        } else {
            "invocation: the user only (disable-model-invocation)".to_string()
        }];
        if self.tools.is_empty() {
            lines.push("tools: none".into());
        }
        for (tool, effect) in &self.tools {
            lines.push(format!("tool {tool} ({})", effect_name(*effect)));
        }
        for script in &self.scripts {
            lines.push(format!("script {script}"));
        }
        lines.push(format!("workspace: {}", self.workspace.as_str()));
        lines.push(match self.network.is_empty() {
            true => "network: none".into(),
            false => format!("network: {}", join(&self.network)),
        });
        lines.push(match self.env.is_empty() {
            true => "environment: none".into(),
            false => format!("environment: {}", join(&self.env)),
        });
        if !self.programs.is_empty() {
            lines.push(format!(
                "programs: {} (each runs only when you grant it: skillbox grant SKILL --program NAME)",
                join(&self.programs)
            ));
        }
        for (name, value) in &self.limits {
            lines.push(format!("limit {name}: {value}"));
        }
        if let Some(granted) = &self.granted {
            lines.push(format!(
                "of which granted by you (skillbox grant): {}",
                granted.phrases().join("; ")
            ));
        }
        lines
    }

    /// What `new` may do that `self` may not: new tools, effects that grew,
    /// scripts, workspace access, network hosts, environment keys and
    /// higher limits. Empty when `new` asks for nothing more.
    pub fn widened_by(&self, new: &Permissions) -> Vec<String> {
        let mut wider = Vec::new();
        if new.model_invocation && !self.model_invocation {
            wider.push(
                "invocation: the user only -> the model too (disable-model-invocation removed)"
                    .to_string(),
            );
        }
        for (tool, effect) in &new.tools {
            match self.tools.get(tool) {
                None => wider.push(format!("new tool {tool} ({})", effect_name(*effect))),
                Some(old) if rank(*effect) > rank(*old) => wider.push(format!(
                    "tool {tool}: {} -> {}",
                    effect_name(*old),
                    effect_name(*effect)
                )),
                Some(_) => {}
            }
        }
        for script in new.scripts.difference(&self.scripts) {
            wider.push(format!("new script {script}"));
        }
        if workspace_rank(new.workspace) > workspace_rank(self.workspace) {
            wider.push(format!(
                "workspace: {} -> {}",
                self.workspace.as_str(),
                new.workspace.as_str()
            ));
        }
        for host in new.network.difference(&self.network) {
            wider.push(format!("new network host {host}"));
        }
        for key in new.env.difference(&self.env) {
            wider.push(format!("new environment key {key}"));
        }
        for program in new.programs.difference(&self.programs) {
            wider.push(format!("new program {program}"));
        }
        for (name, value) in &new.limits {
            match self.limits.get(name) {
                Some(old) if old >= value => {}
                Some(old) => wider.push(format!("limit {name}: {old} -> {value}")),
                None => wider.push(format!("limit {name}: default -> {value}")),
            }
        }
        wider
    }
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn rank(effect: Effect) -> u8 {
    match effect {
        Effect::Read => 0,
        Effect::Write => 1,
        Effect::Destructive => 2,
    }
}

fn effect_name(effect: Effect) -> &'static str {
    match effect {
        Effect::Read => "read",
        Effect::Write => "write",
        Effect::Destructive => "destructive",
    }
}

fn workspace_rank(access: WorkspaceAccess) -> u8 {
    match access {
        WorkspaceAccess::None => 0,
        WorkspaceAccess::Read => 1,
        WorkspaceAccess::Write => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_grows_is_a_widening() {
        let mut old = Permissions::default();
        old.tools.insert("tools/t.wasm:a".into(), Effect::Write);
        old.network.insert("api.example".into());
        old.limits.insert("fuel".into(), 10);
        let mut new = old.clone();
        assert!(old.widened_by(&new).is_empty());
        new.model_invocation = true;
        new.tools
            .insert("tools/t.wasm:a".into(), Effect::Destructive);
        new.tools.insert("tools/t.wasm:b".into(), Effect::Read);
        new.workspace = WorkspaceAccess::Write;
        new.network.insert("evil.example".into());
        new.env.insert("TOKEN".into());
        new.programs.insert("soffice".into());
        new.limits.insert("fuel".into(), 20);
        new.limits.insert("memory_mib".into(), 256);
        assert_eq!(
            old.widened_by(&new),
            [
                "invocation: the user only -> the model too (disable-model-invocation removed)",
                "tool tools/t.wasm:a: write -> destructive",
                "new tool tools/t.wasm:b (read)",
                "workspace: none -> write",
                "new network host evil.example",
                "new environment key TOKEN",
                "new program soffice",
                "limit fuel: 10 -> 20",
                "limit memory_mib: default -> 256",
            ]
        );
        // Narrowing is never a widening.
        assert!(new.widened_by(&old).is_empty());
    }

    /// A version that asks for what the user already gave asks for
    /// nothing more; the grant is shown for what it is.
    #[test]
    fn what_the_user_granted_is_not_a_widening() {
        let mut old = Permissions::default();
        old.scripts.insert("scripts/comment.py".into());
        old.workspace = WorkspaceAccess::Read;
        let mut new = old.clone();
        new.workspace = WorkspaceAccess::Write;
        new.network.insert("api.example.com:443".into());
        assert_eq!(
            old.widened_by(&new),
            [
                "workspace: read -> write",
                "new network host api.example.com:443"
            ]
        );
        let mut grant = SkillGrant::default();
        grant.workspace = Some(WorkspaceAccess::Write);
        let (old, new) = (old.with_grant(Some(&grant)), new.with_grant(Some(&grant)));
        assert_eq!(
            old.widened_by(&new),
            ["new network host api.example.com:443"]
        );
        assert!(
            old.lines()
                .contains(&"of which granted by you (skillbox grant): workspace write".to_string()),
            "{:?}",
            old.lines()
        );
        assert!(old.lines().contains(&"workspace: write".to_string()));
    }
}
