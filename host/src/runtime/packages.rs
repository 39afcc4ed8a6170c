//! `skillbox prepare`: a skill's pinned pure-Python requirements,
//! installed once into a read-only folder the Python runtime mounts at
//! `/packages`. pip (the host's own) resolves and downloads wheels,
//! checking each against the index's hash, and is limited to wheels built
//! for any platform, so it runs no package code. Every installed file is
//! then checked against its wheel's `RECORD` hash before the folder
//! replaces the last one, all at once.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::skill::manifest::{RequirementProblem, python_requirement};
use base64::Engine as _;
use sha2::Digest;
use thiserror::Error;

/// The folder under a skill's packages folder that scripts import from.
pub const SITE: &str = "site";

/// The CPython the runtime is built from: wheels are chosen for it.
pub const PYTHON_VERSION: &str = "3.14";

/// A requirements file in the skill, looked for in this order.
const REQUIREMENTS_FILES: &[&str] = &["requirements.txt", "scripts/requirements.txt"];

/// What `prepare` installed.
#[derive(Debug)]
pub struct Installed {
    /// The requirements asked for.
    pub requirements: Vec<String>,
    /// Every distribution installed (requirements and what they need), as
    /// `name version`.
    pub distributions: Vec<String>,
    /// Files checked against their wheel's hashes.
    pub files: usize,
}

/// Why `prepare` installed nothing. The last folder, if any, is left as
/// it was.
#[derive(Debug, Error)]
pub enum PrepareError {
    #[error(
        "requirement `{0}` is not pinned; give an exact version (`name==1.2.3`), so that \
         every run gets the code that was checked."
    )]
    /// A requirement without an exact version.
    Unpinned(String),
    #[error(
        "`{0}` has no wheel that runs here: the sandbox runs only pure-Python packages \
         (wheels tagged py3-none-any), and the index has none for it (no such version, or \
         only compiled wheels or a source archive). Nothing was installed."
    )]
    /// A requirement with no pure-Python wheel.
    NotPure(String),
    #[error(
        "pip could not install the requirements ({0}). Nothing was installed; check the \
         names and versions, and that PyPI can be reached."
    )]
    /// pip failed otherwise: its last error line.
    Pip(String),
    #[error("pip is not available (`python3 -m pip`); install it, then run prepare again.")]
    /// The host has no pip.
    NoPip,
    #[error(
        "installed file `{file}` does not match its wheel's RECORD ({why}); nothing was \
         installed."
    )]
    /// An installed file its wheel does not vouch for.
    Record {
        /// The file, relative to the packages folder.
        file: String,
        /// What is wrong with it.
        why: String,
    },
    #[error("{0}")]
    /// The packages folder could not be written.
    Io(String),
}

/// The skill's declared requirements: `python.requires` in its manifest,
/// else a `requirements.txt` (comments and blank lines skipped).
pub fn declared(
    manifest_requires: &[String],
    read: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    if !manifest_requires.is_empty() {
        return manifest_requires.to_vec();
    }
    REQUIREMENTS_FILES
        .iter()
        .find_map(|file| read(file))
        .map(|text| {
            text.lines()
                .map(|line| line.split('#').next().unwrap_or("").trim().to_string())
                .filter(|line| !line.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The requirements `skill` declares for its Python scripts.
pub fn declared_by(skill: &crate::skill::Skill) -> Vec<String> {
    let manifest = skill
        .manifest
        .as_ref()
        .map(|m| m.python.requires.clone())
        .unwrap_or_default();
    declared(&manifest, |file| {
        let bytes = skill.read_served(file, 256 * 1024).ok()?;
        String::from_utf8(bytes).ok()
    })
}

/// Checks `requirement` before pip sees it (see [`python_requirement`]).
pub fn check_pinned(requirement: &str) -> Result<(), PrepareError> {
    python_requirement(requirement).map_err(|problem| match problem {
        RequirementProblem::Unpinned => PrepareError::Unpinned(requirement.to_string()),
        RequirementProblem::Compiled => PrepareError::NotPure(requirement.to_string()),
    })
}

/// Installs `requirements` into `dir/site`, replacing what was there only
/// once everything is installed and checked. `progress` hears each step.
pub fn prepare(
    dir: &Path,
    requirements: &[String],
    mut progress: impl FnMut(&str),
) -> Result<Installed, PrepareError> {
    for requirement in requirements {
        check_pinned(requirement)?;
    }
    fn io(what: &'static str) -> impl Fn(std::io::Error) -> PrepareError {
        move |e| PrepareError::Io(format!("{what}: {e}"))
    }
    std::fs::create_dir_all(dir).map_err(io("cannot create the packages folder"))?;
    let staging = dir.join(format!(".staging-{}", std::process::id()));
    remove_tree(&staging);
    let site = staging.join(SITE);
    std::fs::create_dir_all(&site).map_err(io("cannot create the staging folder"))?;
    let outcome = (|| {
        if !requirements.is_empty() {
            progress(&format!("pip: {}", requirements.join(" ")));
            pip_install(&site, requirements)?;
        }
        progress("checking every file against its wheel's RECORD");
        let (distributions, files) = verify(&site)?;
        seal(&site);
        Ok((distributions, files))
    })();
    let (distributions, files) = match outcome {
        Ok(done) => done,
        Err(e) => {
            remove_tree(&staging);
            return Err(e);
        }
    };
    let installed = Installed {
        requirements: requirements.to_vec(),
        distributions,
        files,
    };
    let record = serde_json::json!({
        "requirements": installed.requirements,
        "distributions": installed.distributions,
        "files": installed.files,
        "python": PYTHON_VERSION,
    });
    std::fs::write(staging.join("prepared.json"), format!("{record:#}\n"))
        .map_err(io("cannot write prepared.json"))?;
    // The new folder takes the old one's place in one rename; the old one
    // goes afterwards.
    let current = dir.join("current");
    let old = dir.join(format!(".old-{}", std::process::id()));
    if current.exists() {
        std::fs::rename(&current, &old).map_err(io("cannot move the last packages aside"))?;
    }
    std::fs::rename(&staging, &current).map_err(io("cannot put the packages in place"))?;
    remove_tree(&old);
    Ok(installed)
}

/// The folder `prepare` fills: `dir/current/site`.
pub fn site_of(dir: &Path) -> PathBuf {
    dir.join("current").join(SITE)
}

fn pip_install(site: &Path, requirements: &[String]) -> Result<(), PrepareError> {
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--quiet",
        ])
        .args([
            "--only-binary=:all:",
            "--platform",
            "any",
            "--implementation",
            "py",
        ])
        .args([
            "--abi",
            "none",
            "--python-version",
            PYTHON_VERSION,
            "--no-compile",
        ])
        .arg("--target")
        .arg(site)
        .arg("--")
        .args(requirements)
        // An empty folder: nothing there that pip could take for a
        // requirement's source.
        .current_dir(site)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|_| PrepareError::NoPip)?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named pip") {
        return Err(PrepareError::NoPip);
    }
    // "Could not find a version that satisfies the requirement X (from versions: …)"
    if let Some(at) = stderr.find("satisfies the requirement ") {
        let rest = &stderr[at + "satisfies the requirement ".len()..];
        let name = rest.split([' ', '\n']).next().unwrap_or(rest);
        return Err(PrepareError::NotPure(name.to_string()));
    }
    let last = stderr
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("ERROR"))
        .unwrap_or("pip failed")
        .trim();
    Err(PrepareError::Pip(last.chars().take(300).collect()))
}

/// Checks every installed file against the `RECORD` of the wheel that
/// brought it, and that no file came from anywhere else. Returns the
/// distributions and the number of files checked.
fn verify(site: &Path) -> Result<(Vec<String>, usize), PrepareError> {
    let mut listed = std::collections::BTreeSet::new();
    let mut distributions = Vec::new();
    let mut checked = 0;
    let entries = std::fs::read_dir(site).map_err(|e| PrepareError::Io(e.to_string()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(dist) = name.strip_suffix(".dist-info") else {
            continue;
        };
        distributions.push(dist.replacen('-', " ", 1));
        let record_path = format!("{name}/RECORD");
        let record =
            std::fs::read_to_string(site.join(&record_path)).map_err(|_| PrepareError::Record {
                file: record_path.clone(),
                why: "missing".into(),
            })?;
        listed.insert(record_path.clone());
        for line in record.lines().filter(|l| !l.trim().is_empty()) {
            let (file, hash) = record_line(line).ok_or_else(|| PrepareError::Record {
                file: record_path.clone(),
                why: format!("unreadable line `{line}`"),
            })?;
            let bad = |why: &str| PrepareError::Record {
                file: file.clone(),
                why: why.into(),
            };
            let inside = !file.starts_with('/')
                && !file.split('/').any(|part| part == ".." || part.is_empty());
            if !inside {
                // pip lists console scripts as `../../bin/x` and, with
                // --target, writes them to `bin/x` (rewritten, so not the
                // wheel's bytes); they are never imported.
                if let Some(script) = file.strip_prefix("../../bin/") {
                    listed.insert(format!("bin/{script}"));
                    continue;
                }
                return Err(bad("a path outside the packages folder"));
            }
            listed.insert(file.clone());
            let Some(expected) = hash else { continue };
            let Some(expected) = expected.strip_prefix("sha256=") else {
                return Err(bad("a hash that is not sha256"));
            };
            let bytes = std::fs::read(site.join(&file)).map_err(|_| bad("missing"))?;
            let actual = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(&bytes));
            if actual != expected {
                return Err(bad("its sha256 differs"));
            }
            checked += 1;
        }
    }
    for file in all_files(site, site) {
        if !listed.contains(&file) && !file.split('/').any(|p| p == "__pycache__") {
            return Err(PrepareError::Record {
                file,
                why: "no wheel lists it".into(),
            });
        }
    }
    distributions.sort();
    Ok((distributions, checked))
}

/// `path,sha256=…,size` (the path may be quoted, as CSV).
fn record_line(line: &str) -> Option<(String, Option<String>)> {
    let (path, rest) = if let Some(quoted) = line.strip_prefix('"') {
        let end = quoted.find("\",")?;
        (quoted[..end].replace("\"\"", "\""), &quoted[end + 2..])
    } else {
        let (path, rest) = line.split_once(',')?;
        (path.to_string(), rest)
    };
    let hash = rest.split(',').next().filter(|h| !h.is_empty());
    Some((path, hash.map(String::from)))
}

fn all_files(root: &Path, dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            out.extend(all_files(root, &path));
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    out
}

/// Makes the folder read-only, so nothing changes it by accident.
fn seal(dir: &Path) {
    set_writable(dir, false);
}

fn remove_tree(dir: &Path) {
    if dir.exists() {
        set_writable(dir, true);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(unix)]
fn set_writable(path: &Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_symlink() {
        return;
    }
    let dir = meta.is_dir();
    if dir && writable {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
    }
    if dir && let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            set_writable(&entry.path(), writable);
        }
    }
    let mode = match (dir, writable) {
        (true, true) => 0o755,
        (true, false) => 0o555,
        (false, true) => 0o644,
        (false, false) => 0o444,
    };
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

#[cfg(not(unix))]
fn set_writable(_path: &Path, _writable: bool) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_plain_pins_are_accepted() {
        assert!(check_pinned("defusedxml==0.7.1").is_ok());
        assert!(check_pinned("python-dateutil==2.9.0.post0").is_ok());
        for bad in [
            ".evil==1",
            "./evil==1",
            "evil.==1",
            "-r==1",
            "x==.1",
            "x[../a]==1",
            "defusedxml",
            "defusedxml>=0.7",
            "x==1; os_name=='nt'",
            "--index-url==http://evil",
            "x @ https://evil/x.whl",
            "==1",
        ] {
            assert!(check_pinned(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn record_lines_are_read_as_csv() {
        assert_eq!(
            record_line("a/b.py,sha256=abc,12"),
            Some(("a/b.py".into(), Some("sha256=abc".into())))
        );
        assert_eq!(
            record_line("\"a,b.py\",sha256=x,1"),
            Some(("a,b.py".into(), Some("sha256=x".into())))
        );
        assert_eq!(
            record_line("x.dist-info/RECORD,,"),
            Some(("x.dist-info/RECORD".into(), None))
        );
    }

    #[test]
    fn requirements_come_from_the_manifest_else_a_file() {
        let file = |name: &str| {
            (name == "requirements.txt").then(|| "# pinned\ndefusedxml==0.7.1  # xml\n\n".into())
        };
        assert_eq!(declared(&[], file), vec!["defusedxml==0.7.1"]);
        assert_eq!(declared(&["a==1".into()], file), vec!["a==1"]);
        assert!(declared(&[], |_| None).is_empty());
    }
}
