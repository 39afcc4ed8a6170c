//! Which skill folders `skillbox new` created on this machine.
//!
//! Building a Rust tool runs the crate's build scripts and procedural
//! macros natively, as the user, outside any sandbox. A folder `skillbox
//! new` made here holds only what the template wrote and what its author
//! added since; a downloaded one holds what a stranger wrote. The record is
//! kept in the user's state folder, keyed by the folder's canonical path,
//! so a skill cannot bring its own: a marker shipped inside a folder proves
//! nothing.

use std::path::{Path, PathBuf};

/// The record of a folder `skillbox new` created, if there is a state
/// folder to keep it in.
fn record_of(skill_dir: &Path) -> Option<PathBuf> {
    let canonical = std::fs::canonicalize(skill_dir).ok()?;
    let key = crate::sandbox::sha256_hex(canonical.as_os_str().as_encoded_bytes());
    Some(crate::dirs::state_dir()?.join("authored").join(key))
}

/// Notes that `skillbox new` created `skill_dir`. Best effort: without a
/// state folder, `skillbox build` asks before building, as it would for
/// any folder.
pub(super) fn remember_created(skill_dir: &Path) {
    if let Some(record) = record_of(skill_dir)
        && let Some(folder) = record.parent()
        && std::fs::create_dir_all(folder).is_ok()
    {
        let _ = std::fs::write(record, skill_dir.as_os_str().as_encoded_bytes());
    }
}

/// Whether `skillbox new` created `skill_dir` on this machine.
pub fn created_here(skill_dir: &Path) -> bool {
    record_of(skill_dir).is_some_and(|record| record.is_file())
}
