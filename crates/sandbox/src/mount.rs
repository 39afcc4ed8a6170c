//! The writable mounts a call has (`/tmp`, and `/workspace` when
//! granted), and what a quota on them counts.

use super::grants::{SCRATCH_MOUNT, WORKSPACE_MOUNT};

/// A writable mount with a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mount {
    Scratch,
    Workspace,
}

impl Mount {
    pub(super) fn from_guest_path(path: &str) -> Option<Self> {
        match path {
            SCRATCH_MOUNT => Some(Mount::Scratch),
            WORKSPACE_MOUNT => Some(Mount::Workspace),
            _ => None,
        }
    }

    pub fn guest_path(self) -> &'static str {
        match self {
            Mount::Scratch => SCRATCH_MOUNT,
            Mount::Workspace => WORKSPACE_MOUNT,
        }
    }
}

/// What a call went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the guest went over its {what} quota of {limit} on {}", mount.guest_path())]
pub(crate) struct QuotaExceeded {
    pub mount: Mount,
    pub what: QuotaKind,
    pub limit: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    Bytes,
    Entries,
}

impl std::fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaKind::Bytes => "bytes",
            QuotaKind::Entries => "entries",
        })
    }
}
