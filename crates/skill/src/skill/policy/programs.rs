//! Host programs a skill's scripts may start: what a skill asks for
//! (`grants: {programs: [...]}` in skillbox.yaml), what the user gives
//! (`skillbox grant SKILL --program NAME`, `--allow-program SKILL:NAME`),
//! and where each granted name is found on this host.
//!
//! Nothing is granted by asking: a program runs only when the user named
//! it for the skill. A granted name is looked up in the system's own
//! folders, never in the user's `PATH` (which may hold `.` or a folder a
//! tool can write), and resolved to the absolute path that runs.

use std::path::{Path, PathBuf};

use crate::sandbox::HostProgram;

/// Where granted programs are looked for, in order.
const SYSTEM_BIN: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

/// Why `name` cannot name a program: it must be a plain file name.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'));
    if plain {
        Ok(())
    } else {
        Err(format!(
            "program `{name}` is not a program's name (like pdftoppm or soffice): give the \
             name alone, without a folder"
        ))
    }
}

/// The absolute path `name` runs as here, if it is installed.
pub fn resolve(name: &str) -> Option<PathBuf> {
    check_name(name).ok()?;
    SYSTEM_BIN.iter().find_map(|dir| {
        let candidate = Path::new(dir).join(name);
        let real = std::fs::canonicalize(&candidate).ok()?;
        let meta = std::fs::metadata(&real).ok()?;
        use std::os::unix::fs::PermissionsExt;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(real)
    })
}

/// The programs `skill` may start: those the user gave it. What it asks
/// for and was not given, and what was given but is not installed, become
/// notes.
pub(super) fn granted(
    skill: &str,
    requested: &[String],
    given: &[String],
    notes: &mut Vec<String>,
) -> Vec<HostProgram> {
    let mut out = Vec::new();
    for name in given {
        match resolve(name) {
            Some(path) => out.push(HostProgram {
                name: name.clone(),
                path,
            }),
            None => notes.push(format!(
                "program `{name}` is granted to skill `{skill}` but is not installed here (in \
                 /usr/local/bin, /usr/bin or /bin), so its scripts cannot start it"
            )),
        }
    }
    for name in requested.iter().filter(|n| !given.contains(n)) {
        notes.push(format!(
            "skill `{skill}` asks to start the program `{name}`; nothing is granted by asking. \
             The user can grant it with `skillbox grant {skill} --program {name}` (or \
             --allow-program {skill}:{name} for one run)"
        ));
    }
    out
}
