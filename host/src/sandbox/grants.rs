//! What a call may see of the host: explicit capabilities, nothing ambient.
//!
//! A [`Grants`] value is built by the host from the user's decision (command
//! line or policy), never from anything a guest or an agent sends.

use std::path::PathBuf;

/// Access to the user's workspace, mounted at `/workspace` in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceGrant {
    pub host_dir: PathBuf,
    pub writable: bool,
}

/// Everything a sandboxed call is allowed to touch.
///
/// The default grants nothing: no workspace, no skill folder, no network, no
/// environment. Each call also gets a private scratch folder at `/tmp`,
/// which is not a grant because it is created empty and deleted afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// The skill's own folder, mounted read-only at `/skill`.
    pub skill_dir: Option<PathBuf>,
    pub workspace: Option<WorkspaceGrant>,
    /// Environment variables given to the guest, by name and value.
    pub env: Vec<(String, String)>,
}

/// Guest paths of the mounts, stable across hosts so tools and skills can
/// name them in their instructions.
pub const SKILL_MOUNT: &str = "/skill";
pub const WORKSPACE_MOUNT: &str = "/workspace";
pub const SCRATCH_MOUNT: &str = "/tmp";

impl Grants {
    /// A one-line description of the grants in force, for banners, audit
    /// records and error messages. Never includes host paths.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("{SCRATCH_MOUNT} (scratch)")];
        if self.skill_dir.is_some() {
            parts.push(format!("{SKILL_MOUNT} (read-only)"));
        }
        match &self.workspace {
            Some(ws) if ws.writable => parts.push(format!("{WORKSPACE_MOUNT} (read-write)")),
            Some(_) => parts.push(format!("{WORKSPACE_MOUNT} (read-only)")),
            None => {}
        }
        if !self.env.is_empty() {
            let keys: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
            parts.push(format!("env {}", keys.join(",")));
        }
        parts.join(", ")
    }
}
