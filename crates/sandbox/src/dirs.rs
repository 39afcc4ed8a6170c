//! Where skillbox keeps per-user files, following the XDG conventions.

use std::path::{Path, PathBuf};

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

/// What the install put in place: `$override_var` (empty means none), else
/// `rel` next to the binary or up to four folders above it (a source
/// checkout's `target/<profile>/skillbox` finds the checkout's), else `rel`
/// in the data folder `scripts/install` fills; each candidate must pass
/// `found`.
pub fn installed(override_var: &str, rel: &str, found: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(override_var) {
        return (!path.is_empty()).then(|| PathBuf::from(path));
    }
    let beside_binary = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .take(4)
            .map(|dir| dir.join(rel))
            .find(|path| found(path))
    });
    beside_binary.or_else(|| {
        data_dir()
            .map(|dir| dir.join(rel))
            .filter(|path| found(path))
    })
}

/// The user's data folder: `$SKILLBOX_DATA_DIR`, `$XDG_DATA_HOME/skillbox`
/// or `~/.local/share/skillbox` (the bundled skills and runtimes
/// `scripts/install` copies, the Python packages `prepare` installs).
pub fn data_dir() -> Option<PathBuf> {
    user_dir("SKILLBOX_DATA_DIR", "XDG_DATA_HOME", ".local/share")
}

/// The user's configuration folder: `$SKILLBOX_CONFIG_DIR`,
/// `$XDG_CONFIG_HOME/skillbox` or `~/.config/skillbox` (the trusted keys).
pub fn config_dir() -> Option<PathBuf> {
    user_dir("SKILLBOX_CONFIG_DIR", "XDG_CONFIG_HOME", ".config")
}
