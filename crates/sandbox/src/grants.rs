//! What a call may see of the host: explicit capabilities, nothing ambient.
//!
//! A [`Grants`] value is built by the host from the user's decision (command
//! line or policy), never from anything a guest or an agent sends.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;

use super::egress::NetRule;

/// A folder opened once and kept open: every call that mounts it gets this
/// very folder, whatever its path names later. Renaming the folder, or
/// swapping a symlink in at its path, does not change what a call sees.
#[derive(Clone)]
pub struct PinnedDir {
    dir: Arc<Dir>,
    /// Device and inode, read once: a handle's folder never changes.
    identity: Option<(u64, u64)>,
    /// Where it was opened, for a program of the host's.
    opened_at: PathBuf,
}

impl PinnedDir {
    pub fn new(dir: Arc<Dir>, opened_at: PathBuf) -> Self {
        use cap_std::fs::MetadataExt;
        let identity = dir.dir_metadata().ok().map(|m| (m.dev(), m.ino()));
        PinnedDir {
            dir,
            identity,
            opened_at,
        }
    }

    /// The same pinned folder, known by the path `opened_at`.
    pub fn known_at(&self, opened_at: &Path) -> PinnedDir {
        PinnedDir {
            opened_at: opened_at.to_path_buf(),
            ..self.clone()
        }
    }

    /// Opens and pins the folder at `path`.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let dir = Dir::open_ambient_dir(path, cap_std::ambient_authority())?;
        Ok(PinnedDir::new(Arc::new(dir), path.to_path_buf()))
    }

    /// A new open description of the pinned folder, for one call's
    /// preopen, with the flags wasmtime-wasi gives a folder it opens
    /// itself (`O_PATH` on Linux; without it elsewhere).
    /// `openat(handle, ".")` reaches the very folder the handle holds,
    /// whatever its path names now, without walking a path: opened anew
    /// through `/proc/self/fd/N`, it was a sixth of a sandboxed call.
    pub fn reopen(&self) -> std::io::Result<std::fs::File> {
        use rustix::fs::{Mode, OFlags};
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let handle_only = OFlags::PATH;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let handle_only = OFlags::empty();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | handle_only;
        let fd = rustix::fs::openat(&*self.dir, c".", flags, Mode::empty())?;
        Ok(std::fs::File::from(fd))
    }

    /// The path it was opened at, for a program of the host's, which
    /// cannot be handed the open folder itself.
    pub fn opened_at(&self) -> &Path {
        &self.opened_at
    }

    /// The open folder itself.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Device and inode of the pinned folder.
    pub fn identity(&self) -> Option<(u64, u64)> {
        self.identity
    }

    /// Whether `path` still leads to the pinned folder.
    pub fn still_at(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(now) = std::fs::metadata(path) else {
            return false;
        };
        now.is_dir() && self.identity() == Some((now.dev(), now.ino()))
    }
}

impl std::fmt::Debug for PinnedDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedDir")
            .field("identity", &self.identity())
            .finish_non_exhaustive()
    }
}

impl PartialEq for PinnedDir {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for PinnedDir {}

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
    pub skill_dir: Option<PinnedDir>,
    pub workspace: Option<WorkspaceGrant>,
    /// Environment variables given to the guest, by name and value.
    pub env: Vec<(String, String)>,
    /// Hosts the guest may reach over `wasi:http`.
    pub network: Vec<NetRule>,
    /// The skill the call belongs to, so refusals can name the flag that
    /// would grant what was refused.
    pub skill_name: Option<String>,
    /// Python packages the user prepared for the skill, mounted read-only
    /// at `/packages` for its Python scripts.
    pub packages: Option<PathBuf>,
    /// The interpreter's own files (the full Python runtime's standard
    /// library and its packages' data), each mounted read-only where the
    /// interpreter looks for them. Chosen by the host with the runtime,
    /// never by a skill or a guest.
    pub runtime_files: Vec<RuntimeFiles>,
    /// Whether the guest may ask the host to start programs (the Python
    /// runtimes' `subprocess`), and which host programs it may start, each
    /// in the OS sandbox (`sandbox/program`). `None` for components: they
    /// get no way to ask.
    pub programs: Option<Vec<HostProgram>>,
}

/// A program of the host's that a call may start, by the name scripts use
/// and the absolute path it was resolved to when granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProgram {
    pub name: String,
    pub path: PathBuf,
}

/// A folder of the runtime a call runs in, mounted read-only at `guest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeFiles {
    pub guest: String,
    pub host: PathBuf,
}

/// Guest paths of the mounts, stable across hosts so tools and skills can
/// name them in their instructions.
pub const SKILL_MOUNT: &str = "/skill";
pub(crate) const WORKSPACE_MOUNT: &str = "/workspace";
pub(crate) const SCRATCH_MOUNT: &str = "/tmp";
pub(crate) const PACKAGES_MOUNT: &str = "/packages";
/// Where a guest that may start programs asks for them (`sandbox/program`).
pub(crate) const DOOR_MOUNT: &str = "/run/skillbox";

impl Grants {
    /// The names of the environment variables given, without their values.
    pub fn env_keys(&self) -> Vec<&str> {
        self.env.iter().map(|(key, _)| key.as_str()).collect()
    }

    /// A one-line description of the grants in force, for banners, audit
    /// records and error messages. Never includes host paths.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("{SCRATCH_MOUNT} (scratch)")];
        if self.skill_dir.is_some() {
            parts.push(format!("{SKILL_MOUNT} (read-only)"));
        }
        if self.packages.is_some() {
            parts.push(format!("{PACKAGES_MOUNT} (read-only)"));
        }
        match &self.workspace {
            Some(ws) if ws.writable => parts.push(format!("{WORKSPACE_MOUNT} (read-write)")),
            Some(_) => parts.push(format!("{WORKSPACE_MOUNT} (read-only)")),
            None => {}
        }
        if !self.network.is_empty() {
            let hosts: Vec<String> = self.network.iter().map(ToString::to_string).collect();
            parts.push(format!("net {}", hosts.join(",")));
        }
        if !self.env.is_empty() {
            let keys: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
            parts.push(format!("env {}", keys.join(",")));
        }
        if let Some(programs) = self.programs.as_ref().filter(|p| !p.is_empty()) {
            let names: Vec<&str> = programs.iter().map(|p| p.name.as_str()).collect();
            parts.push(format!("programs {}", names.join(",")));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reopened_folder_is_the_pinned_one_whatever_its_path_names_now() {
        let root = tempfile::tempdir().unwrap();
        let granted = root.path().join("granted");
        std::fs::create_dir(&granted).unwrap();
        std::fs::write(granted.join("mine"), "").unwrap();
        let pinned = PinnedDir::open(&granted).unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("theirs"), "").unwrap();
        std::fs::rename(&granted, root.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &granted).unwrap();

        let reopened = Dir::from_std_file(pinned.reopen().unwrap());
        let names: Vec<String> = reopened
            .entries()
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["mine"]);
    }
}
