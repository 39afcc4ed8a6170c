//! Where skillbox keeps per-user files, following the XDG conventions.

use std::path::PathBuf;

/// `$override_var` if set, else `$xdg_var/skillbox`, else
/// `~/<home_fallback>/skillbox`.
pub fn user_dir(override_var: &str, xdg_var: &str, home_fallback: &str) -> Option<PathBuf> {
    std::env::var_os(override_var)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(xdg_var).map(|d| PathBuf::from(d).join("skillbox")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(home_fallback).join("skillbox"))
        })
}

/// The user's cache folder: `$SKILLBOX_CACHE_DIR`, `$XDG_CACHE_HOME/skillbox`
/// or `~/.cache/skillbox`. Compiled code (`components/`) and tool builds
/// (`build/`) live below it.
pub fn cache_dir() -> Option<PathBuf> {
    user_dir("SKILLBOX_CACHE_DIR", "XDG_CACHE_HOME", ".cache")
}

/// The user's state folder: `$SKILLBOX_STATE_DIR`,
/// `$XDG_STATE_HOME/skillbox` or `~/.local/state/skillbox` (the audit log,
/// the folders `skillbox new` created).
pub fn state_dir() -> Option<PathBuf> {
    user_dir("SKILLBOX_STATE_DIR", "XDG_STATE_HOME", ".local/state")
}
