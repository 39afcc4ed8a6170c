//! The Python runtime: where its component is installed, how a script's
//! command line is laid out for it, and where a skill's prepared
//! packages live.

use std::path::{Path, PathBuf};

use crate::sandbox::SKILL_MOUNT;

/// The runtime's file name, in a `runtimes/` folder.
pub const RUNTIME_FILE: &str = "python.wasm";

/// The Python runtime's component: `$SKILLBOX_PYTHON_RUNTIME` (empty turns
/// Python off), else `runtimes/python.wasm` next to the binary or above it
/// (a source checkout's `target/<profile>/skillbox` finds
/// `target/runtimes/`), else in the data folder `scripts/install` fills.
pub fn runtime_path() -> Option<PathBuf> {
    crate::dirs::installed(
        "SKILLBOX_PYTHON_RUNTIME",
        &format!("runtimes/{RUNTIME_FILE}"),
        Path::is_file,
    )
}

/// The runtime's argv for `script` (relative to the skill folder).
pub fn argv(script: &str, args: Vec<String>) -> Vec<String> {
    let mut argv = vec!["python".to_string(), format!("{SKILL_MOUNT}/{script}")];
    argv.extend(args);
    argv
}

/// The runtime's argv for `code` given with the call (`run_code`), as
/// `python -c CODE ARGS` runs it.
pub fn code_argv(code: String, args: Vec<String>) -> Vec<String> {
    let mut argv = vec!["python".to_string(), "-c".to_string(), code];
    argv.extend(args);
    argv
}

/// Where `skillbox prepare` puts the packages of the skill in `skill_dir`:
/// in the user's data folder, not the cache, because they cannot be made
/// again without a network. One folder per skill folder.
pub fn packages_dir(skill_dir: &Path) -> Option<PathBuf> {
    let key = crate::sandbox::sha256_hex(skill_dir.as_os_str().as_encoded_bytes());
    crate::dirs::data_dir().map(|dir| dir.join("python").join(&key[..16]))
}

/// The prepared `site` folder the runtime mounts at `/packages`, if the
/// user prepared this skill.
pub fn prepared_site(skill_dir: &Path) -> Option<PathBuf> {
    packages_dir(skill_dir)
        .map(|dir| super::packages::site_of(&dir))
        .filter(|site| site.is_dir())
}
