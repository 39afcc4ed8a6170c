//! `skillbox prepare`: a skill's pinned pure-Python requirements,
//! installed once into a read-only folder the Python runtime mounts at
//! `/packages`.
//!
//! No code of any package runs on the host, so pip never resolves
//! dependencies itself: it would read a wheel's `Requires-Dist` and fetch,
//! and build, whatever URL it names. Instead the closure is resolved here,
//! one level at a time: pip downloads each requirement alone (`--no-deps`)
//! as a wheel for any platform from the index, which checks the index's
//! hash; the host's Python reads each wheel's metadata as a zip file with
//! pip's own `packaging` (`wheel_deps.py`); a dependency given by URL is
//! refused. The resolved set is installed with `--no-index
//! --require-hashes` from the downloaded files, every installed file is
//! checked against its wheel's `RECORD` hash, and the folder replaces the
//! last one all at once. `prepared.json` records every distribution with
//! its wheel's hash, and a later `prepare` of the same requirements
//! installs those same bytes or refuses.

use std::collections::BTreeMap;
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

/// What the user asked `prepare` for beyond the skill's own requirement
/// lines, kept with what is prepared so the next run asks for it again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choices {
    /// Requirements the user added or pinned (`--with`), over all runs
    /// since the last `--replace`.
    pub added: Vec<String>,
    /// Projects the user left out (`--without`), as PEP 503 names.
    pub without: Vec<String>,
}

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
    /// Distributions with no pure-Python wheel that the full Python
    /// runtime has built in, as `name version`: the skill's Python runs in
    /// that runtime, which provides them.
    pub built_in: Vec<String>,
}

/// Why `prepare` installed nothing. The last folder, if any, is left as
/// it was.
#[derive(Debug, Error)]
pub enum PrepareError {
    #[error(
        "requirement `{0}` is not pinned; give an exact version (`name==1.2.3`; a line of \
         the skill's own is pinned with `skillbox prepare SKILL --with name==1.2.3`), so \
         that every run gets the code that was checked, or leave it out with `--without \
         NAME` if the scripts you run do not import it."
    )]
    /// A requirement without an exact version.
    Unpinned(String),
    #[error(
        "`{0}` has no wheel that runs here: prepare installs only pure-Python packages \
         (wheels tagged py3-none-any), and the index has none for it (no such version, or \
         only compiled wheels or a source archive); compiled packages run only when the \
         full Python runtime has them built in (numpy, pandas, scipy, matplotlib, Pillow, \
         lxml, PyYAML, ...: see `skillbox prepare --built-in`), and it has not this one. \
         Nothing was installed; a requirement the scripts you run do not import can be left \
         out with `--without NAME`."
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
    #[error(
        "`{by}` needs `{requirement}`, a package given by URL, not by the index; prepare \
         installs only wheels the index serves, so that nothing is built or fetched from \
         elsewhere. Nothing was installed."
    )]
    /// A dependency that names a URL (`x @ https://…`, `file://…`).
    Url {
        /// The distribution that asks for it, `name version`.
        by: String,
        /// The requirement as its metadata writes it.
        requirement: String,
    },
    #[error(
        "`{by}` needs `{requirement}`, whose version is not a plain comparison (`===` \
         and versions that are not PEP 440 could name a path that pip would build); \
         prepare takes only plain requirements. Nothing was installed."
    )]
    /// A dependency whose version specifier is not plain PEP 440.
    Specifier {
        /// The distribution that asks for it, `name version`.
        by: String,
        /// The requirement as its metadata writes it.
        requirement: String,
    },
    #[error(
        "{name} {version} was chosen, but `{by}` needs `{name}{specifier}`; pin a version \
         that satisfies both with --with, or in the skill's requirements. Nothing was \
         installed."
    )]
    /// Two requirements that no single version satisfies here.
    Conflict {
        /// The distribution's name.
        name: String,
        /// The version chosen first.
        version: String,
        /// The distribution whose requirement it fails.
        by: String,
        /// That requirement's version specifier.
        specifier: String,
    },
    #[error(
        "the wheel of {name} {version} is not the one prepared before (its sha256 was \
         {expected}, now {actual}); the index serves other bytes under the same version. \
         Nothing was installed; remove the skill's packages folder to accept the new ones."
    )]
    /// A recorded distribution whose wheel changed since it was prepared.
    Changed {
        /// The distribution's name.
        name: String,
        /// Its version.
        version: String,
        /// The recorded sha256.
        expected: String,
        /// The sha256 of the wheel the index serves now.
        actual: String,
    },
    #[error(
        "`{by}` needs `{name}{specifier}`, but {name} is compiled code that only the full \
         Python runtime provides, and it has {name} {version} built in; compiled packages \
         cannot be installed at another version. If the scripts work with {version}, pin it \
         (`--with {name}=={version}`); if they do not import {name}, leave it out \
         (`--without {name}`). Nothing was installed."
    )]
    /// A requirement on a built-in compiled package that its version fails.
    BuiltInVersion {
        /// The distribution's name.
        name: String,
        /// The version built in.
        version: String,
        /// Who asked: `the skill`, or `name version`.
        by: String,
        /// The version specifier asked for.
        specifier: String,
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

/// The project a requirement names, as PEP 503 compares names (lowercase,
/// each run of `-`, `_` and `.` one `-`): `PyYAML==6.0.2` and `pyyaml`
/// name the same project.
pub fn project_of(requirement: &str) -> String {
    let name = requirement
        .split(|c: char| "=<>!~;[@ ".contains(c))
        .next()
        .unwrap_or("")
        .trim();
    let mut normalized = String::with_capacity(name.len());
    for c in name.chars() {
        if "-_.".contains(c) {
            if !normalized.ends_with('-') {
                normalized.push('-');
            }
        } else {
            normalized.push(c.to_ascii_lowercase());
        }
    }
    normalized
}

/// What one `prepare` installs: what the skill declares, then what the
/// user added in earlier runs (unless `replace`), then what the user adds
/// now with `--with`. A later line for a project replaces an earlier one,
/// so a user's pin settles a line the skill left unpinned, in this run and
/// the next, and adding a package keeps those added before.
pub fn combined(
    added_before: &[String],
    declared: &[String],
    with: &[String],
    replace: bool,
) -> Vec<String> {
    let before = if replace { &[][..] } else { added_before };
    let mut out: Vec<String> = Vec::new();
    for requirement in declared.iter().chain(before).chain(with) {
        let project = project_of(requirement);
        out.retain(|r| project_of(r) != project);
        out.push(requirement.clone());
    }
    out
}

/// The record the last `prepare` in `dir` wrote (requirements,
/// distributions, files checked), if any.
pub fn prepared_record(dir: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read(dir.join("current").join("prepared.json")).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Checks `requirement` before pip sees it (see [`python_requirement`]).
pub fn check_pinned(requirement: &str) -> Result<(), PrepareError> {
    python_requirement(requirement).map_err(|problem| match problem {
        RequirementProblem::Unpinned => PrepareError::Unpinned(requirement.to_string()),
        RequirementProblem::Compiled => PrepareError::NotPure(requirement.to_string()),
    })
}

/// One distribution of a prepared set: its wheel and that wheel's hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pinned {
    /// Its canonical name (PEP 503).
    pub name: String,
    pub version: String,
    /// The sha256 of its wheel, in hex.
    pub sha256: String,
}

/// Installs `requirements` into `dir/site`, replacing what was there only
/// once everything is installed and checked. `progress` hears each step.
/// `built_in` names the distributions the full Python runtime has built in
/// (canonical name to version; empty when it is not installed): a
/// requirement with no pure-Python wheel that is among them, or one on
/// them that pins no exact version (`pillow>=10`), is provided by that
/// runtime instead of installed. `choices` are recorded, so the next run
/// asks for the same. `byte_compile` compiles the checked packages folder
/// it is given before the seal (`bytecode.rs`); when it fails, the
/// packages are ready all the same, and runs compile what they import.
pub fn prepare(
    dir: &Path,
    requirements: &[String],
    choices: &Choices,
    built_in: &BTreeMap<String, String>,
    mut progress: impl FnMut(&str),
    byte_compile: impl FnOnce(&Path) -> Result<Compiled, String>,
) -> Result<Installed, PrepareError> {
    // An unpinned line on a package built into the full runtime is the
    // runtime's, if its version is one the line accepts.
    let runtimes = |r: &&String| !r.contains("==") && built_in.contains_key(&project_of(r));
    let (provided, to_install): (Vec<&String>, Vec<&String>) =
        requirements.iter().partition(runtimes);
    let provided: Vec<String> = provided
        .into_iter()
        .map(|r| {
            let name = project_of(r);
            let version = &built_in[&name];
            progress(&format!(
                "{r}: the full Python runtime has {name} {version} built in, and the skill's \
                 Python runs there"
            ));
            format!("{name} {version}")
        })
        .collect();
    let to_install: Vec<String> = to_install.into_iter().cloned().collect();
    for requirement in &to_install {
        check_pinned(requirement)?;
    }
    let asked_of_runtime: Vec<Want> = requirements
        .iter()
        .filter(runtimes)
        .map(|r| {
            let spec = r.split(';').next().unwrap_or_default();
            let after_name =
                spec.trim_start_matches(|c: char| c.is_alphanumeric() || "-_.".contains(c));
            let specifier = match after_name.split_once(']') {
                Some((_, rest)) if after_name.starts_with('[') => rest,
                _ => after_name,
            };
            Want {
                name: project_of(r),
                extras: Vec::new(),
                spec: spec.trim().to_string(),
                specifier: specifier.trim().to_string(),
                by: "the skill".into(),
            }
        })
        .collect();
    check_constraints(&asked_of_runtime, &BTreeMap::new(), built_in)?;
    fn io(what: &'static str) -> impl Fn(std::io::Error) -> PrepareError {
        move |e| PrepareError::Io(format!("{what}: {e}"))
    }
    std::fs::create_dir_all(dir).map_err(io("cannot create the packages folder"))?;
    let previous = previous(dir);
    let recorded = recorded_pins(previous.as_ref(), requirements);
    let staging = dir.join(format!(".staging-{}", std::process::id()));
    remove_tree(&staging);
    let site = staging.join(SITE);
    let wheels = staging.join("wheels");
    std::fs::create_dir_all(&site).map_err(io("cannot create the staging folder"))?;
    for folder in [&wheels, &staging.join(EMPTY)] {
        std::fs::create_dir_all(folder).map_err(io("cannot create the staging folder"))?;
    }
    let outcome = (|| {
        let (pinned, from_runtime) = if to_install.is_empty() {
            (Vec::new(), provided.clone())
        } else {
            progress(&format!("resolving {}", to_install.join(" ")));
            let (pinned, mut from_runtime) = match &recorded {
                Some(pins) => (download_recorded(&wheels, pins)?, recorded_built_in(dir)),
                None => resolve(&wheels, &to_install, built_in, &mut progress)?,
            };
            for name in &provided {
                if !from_runtime.contains(name) {
                    from_runtime.push(name.clone());
                }
            }
            from_runtime.sort();
            same_bytes_as_before(previous.as_ref(), &pinned)?;
            progress(&format!("installing {} wheels", pinned.len()));
            pip_install(&site, &wheels, &pinned)?;
            (pinned, from_runtime)
        };
        progress("checking every file against its wheel's RECORD");
        let (distributions, files) = verify(&site)?;
        remove_tree(&wheels);
        remove_tree(&staging.join(EMPTY));
        if files > 0 {
            progress("byte-compiling the packages with the Python runtime");
            match byte_compile(&site) {
                Ok(done) => progress(&format!(
                    "{} modules byte-compiled{}",
                    done.modules,
                    match done.skipped {
                        0 => String::new(),
                        n => format!(" ({n} whose source does not compile are left as they are)"),
                    }
                )),
                Err(why) => progress(&format!(
                    "the packages were not byte-compiled ({why}); scripts compile the modules \
                     they import at each run, which is slower"
                )),
            }
        }
        seal(&site);
        Ok((pinned, from_runtime, distributions, files))
    })();
    let (pinned, from_runtime, distributions, files) = match outcome {
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
        built_in: from_runtime,
    };
    let record = serde_json::json!({
        "requirements": installed.requirements,
        "distributions": installed.distributions,
        "pinned": pinned,
        "files": installed.files,
        "python": PYTHON_VERSION,
        "built_in": installed.built_in,
        "added": choices.added,
        "without": choices.without,
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

/// What byte-compiling a packages folder did (`bytecode.rs`): how many
/// modules were compiled, and how many were left to compile at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compiled {
    pub modules: usize,
    pub skipped: usize,
}

/// The distributions the full Python runtime provides for the packages
/// prepared in `dir`, as the last `prepare` recorded them.
fn recorded_built_in(dir: &Path) -> Vec<String> {
    prepared_record(dir)
        .and_then(|record| serde_json::from_value(record["built_in"].clone()).ok())
        .unwrap_or_default()
}

/// What the user chose beyond the skill's own lines, as the last
/// `prepare` in `dir` recorded it. A record from before choices were kept
/// counts all it prepared as added.
pub fn prepared_choices(dir: &Path) -> Choices {
    let Some(record) = prepared_record(dir) else {
        return Choices::default();
    };
    let list = |key: &str| serde_json::from_value(record[key].clone()).ok();
    Choices {
        added: list("added").unwrap_or_else(|| list("requirements").unwrap_or_default()),
        without: list("without").unwrap_or_default(),
    }
}

/// Whether the packages prepared in `site` (a folder [`site_of`] names)
/// need distributions only the full Python runtime has.
pub fn needs_built_in(site: &Path) -> bool {
    site.parent()
        .and_then(Path::parent)
        .is_some_and(|dir| !recorded_built_in(dir).is_empty())
}

/// The folder `prepare` fills: `dir/current/site`.
pub fn site_of(dir: &Path) -> PathBuf {
    dir.join("current").join(SITE)
}

/// What was prepared before: its requirements and the set they resolved
/// to, if the folder has a record of it.
fn previous(dir: &Path) -> Option<(Vec<String>, Vec<Pinned>)> {
    #[derive(serde::Deserialize)]
    struct Record {
        requirements: Vec<String>,
        #[serde(default)]
        pinned: Option<Vec<Pinned>>,
    }
    let text = std::fs::read(dir.join("current").join("prepared.json")).ok()?;
    let record: Record = serde_json::from_slice(&text).ok()?;
    Some((record.requirements, record.pinned?))
}

/// The set prepared before for the same requirements, if any.
fn recorded_pins(
    previous: Option<&(Vec<String>, Vec<Pinned>)>,
    requirements: &[String],
) -> Option<Vec<Pinned>> {
    let (asked, pinned) = previous?;
    let sorted = |list: &[String]| {
        let mut list = list.to_vec();
        list.sort();
        list
    };
    (sorted(asked) == sorted(requirements)).then(|| pinned.clone())
}

/// A distribution at a version prepared before must be the same wheel,
/// however the requirements that led to it are spelled now.
fn same_bytes_as_before(
    previous: Option<&(Vec<String>, Vec<Pinned>)>,
    pinned: &[Pinned],
) -> Result<(), PrepareError> {
    let Some((_, before)) = previous else {
        return Ok(());
    };
    for now in pinned {
        if let Some(then) = before
            .iter()
            .find(|p| p.name == now.name && p.version == now.version && p.sha256 != now.sha256)
        {
            return Err(PrepareError::Changed {
                name: now.name.clone(),
                version: now.version.clone(),
                expected: then.sha256.clone(),
                actual: now.sha256.clone(),
            });
        }
    }
    Ok(())
}

/// A requirement on the way to being resolved.
#[derive(Debug, Clone)]
struct Want {
    name: String,
    extras: Vec<String>,
    /// What pip is asked for: `name==1.0`, `name>=2,<3`.
    spec: String,
    /// The version specifier alone, to check against what is chosen.
    specifier: String,
    /// Who asked: `the skill`, or `name version`.
    by: String,
}

/// What the host's Python found in a downloaded wheel.
#[derive(Debug, serde::Deserialize)]
struct Dist {
    path: PathBuf,
    name: String,
    version: String,
    requires: Vec<Requirement>,
}

#[derive(Debug, serde::Deserialize)]
struct Requirement {
    name: String,
    extras: Vec<String>,
    /// Plain comparisons with PEP 440 versions, rebuilt by the helper;
    /// `None` when the metadata's specifier is anything else.
    specifier: Option<String>,
    url: Option<String>,
    text: String,
}

/// Whether `spec` can only be read by pip as a requirement on the index:
/// a canonical name and plain version comparisons, nothing pip could take
/// for a path (`/`), a URL or an option.
fn index_only(name: &str, specifier: &str) -> bool {
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    let spec_ok = specifier
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "=!<>~.,*+".contains(c))
        && !specifier.contains("===");
    name_ok && spec_ok
}

/// The pinned requirements and every distribution they need, as wheels
/// downloaded into `wheels`, one level of dependencies at a time. The
/// first version chosen for a name stays; a later requirement it does not
/// satisfy is a [`PrepareError::Conflict`].
///
/// A distribution with no pure-Python wheel that `built_in` has is left to
/// the full runtime: returned, as `name version`, beside the pins.
fn resolve(
    wheels: &Path,
    requirements: &[String],
    built_in: &BTreeMap<String, String>,
    progress: &mut impl FnMut(&str),
) -> Result<(Vec<Pinned>, Vec<String>), PrepareError> {
    let mut from_runtime: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: Vec<Want> = requirements
        .iter()
        .map(|r| {
            let (name, version) = r.split_once("==").unwrap_or((r, ""));
            let (base, extras) = match name.split_once('[') {
                Some((base, extras)) => (
                    base,
                    extras
                        .trim_end_matches(']')
                        .split(',')
                        .map(canonical_name)
                        .collect(),
                ),
                None => (name, Vec::new()),
            };
            Want {
                name: canonical_name(base),
                extras,
                spec: format!("{base}=={version}"),
                specifier: format!("=={version}"),
                by: "the skill".into(),
            }
        })
        .collect();
    // name -> (dist, the extras its dependencies were read for)
    let mut chosen: BTreeMap<String, (Dist, Vec<String>)> = Default::default();
    let mut constraints: Vec<Want> = Vec::new();
    while !queue.is_empty() {
        let mut fetch: Vec<Want> = Vec::new();
        let mut reread: Vec<(PathBuf, Vec<String>)> = Vec::new();
        for want in queue.drain(..) {
            constraints.push(want.clone());
            if let Some((dist, read_for)) = chosen.get_mut(&want.name) {
                let more: Vec<String> = want
                    .extras
                    .iter()
                    .filter(|e| !read_for.contains(e))
                    .cloned()
                    .collect();
                if !more.is_empty() {
                    read_for.extend(more);
                    reread.push((dist.path.clone(), read_for.clone()));
                }
            } else if let Some(earlier) = fetch.iter_mut().find(|w| w.name == want.name) {
                for extra in want.extras {
                    if !earlier.extras.contains(&extra) {
                        earlier.extras.push(extra);
                    }
                }
            } else {
                fetch.push(want);
            }
        }
        if !fetch.is_empty() {
            progress(&format!(
                "downloading {}",
                fetch
                    .iter()
                    .map(|w| w.spec.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        let mut inspect = reread;
        for want in &fetch {
            match pip_download(wheels, &want.name, &want.spec) {
                Ok(file) => inspect.push((file, want.extras.clone())),
                Err(PrepareError::NotPure(spec)) => {
                    let Some(version) = built_in.get(&want.name) else {
                        return Err(PrepareError::NotPure(spec));
                    };
                    if from_runtime
                        .insert(want.name.clone(), version.clone())
                        .is_none()
                    {
                        progress(&format!(
                            "{spec} has no pure-Python wheel; the full Python runtime has \
                             {} {version} built in, and the skill's Python runs there",
                            want.name
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        for dist in wheel_deps(&inspect)? {
            let by = format!("{} {}", dist.name, dist.version);
            for dep in &dist.requires {
                if dep.url.is_some() {
                    return Err(PrepareError::Url {
                        by,
                        requirement: dep.text.clone(),
                    });
                }
                let specifier = dep
                    .specifier
                    .clone()
                    .filter(|s| index_only(&dep.name, s))
                    .ok_or_else(|| PrepareError::Specifier {
                        by: by.clone(),
                        requirement: dep.text.clone(),
                    })?;
                queue.push(Want {
                    name: dep.name.clone(),
                    extras: dep.extras.iter().map(|e| canonical_name(e)).collect(),
                    spec: format!("{}{specifier}", dep.name),
                    specifier,
                    by: by.clone(),
                });
            }
            let extras = inspect
                .iter()
                .find(|(path, _)| *path == dist.path)
                .map(|(_, extras)| extras.clone())
                .unwrap_or_default();
            chosen.entry(dist.name.clone()).or_insert((dist, extras));
        }
    }
    check_constraints(&constraints, &chosen, &from_runtime)?;
    let pinned = chosen
        .into_values()
        .map(|(dist, _)| {
            Ok(Pinned {
                sha256: sha256_file(&dist.path)?,
                name: dist.name,
                version: dist.version,
            })
        })
        .collect::<Result<_, PrepareError>>()?;
    let from_runtime = from_runtime
        .into_iter()
        .map(|(name, version)| format!("{name} {version}"))
        .collect();
    Ok((pinned, from_runtime))
}

/// Every version chosen (by pip, or built into the full runtime: `built`)
/// satisfies every requirement on it.
fn check_constraints(
    constraints: &[Want],
    chosen: &BTreeMap<String, (Dist, Vec<String>)>,
    built: &BTreeMap<String, String>,
) -> Result<(), PrepareError> {
    let version_of = |name: &str| {
        chosen
            .get(name)
            .map(|(d, _)| d.version.as_str())
            .or_else(|| built.get(name).map(String::as_str))
    };
    let checked: Vec<(&Want, &str)> = constraints
        .iter()
        .filter(|w| !w.specifier.is_empty())
        .filter_map(|w| version_of(&w.name).map(|version| (w, version)))
        .collect();
    if checked.is_empty() {
        return Ok(());
    }
    let request = serde_json::json!({
        "mode": "check",
        "constraints": checked
            .iter()
            .map(|(w, version)| serde_json::json!({
                "name": w.name, "specifier": w.specifier, "version": version,
            }))
            .collect::<Vec<_>>(),
    });
    #[derive(serde::Deserialize)]
    struct Answer {
        unsatisfied: Vec<usize>,
    }
    let answer: Answer = run_helper(&request)?;
    let Some((want, version)) = answer.unsatisfied.first().and_then(|&i| checked.get(i)) else {
        return Ok(());
    };
    let (name, version, by, specifier) = (
        want.name.clone(),
        (*version).to_string(),
        want.by.clone(),
        want.specifier.clone(),
    );
    Err(if chosen.contains_key(&want.name) {
        PrepareError::Conflict {
            name,
            version,
            by,
            specifier,
        }
    } else {
        PrepareError::BuiltInVersion {
            name,
            version,
            by,
            specifier,
        }
    })
}

/// Downloads exactly the recorded set, and checks each wheel is the one
/// recorded.
fn download_recorded(wheels: &Path, pins: &[Pinned]) -> Result<Vec<Pinned>, PrepareError> {
    for pin in pins {
        let file = pip_download(wheels, &pin.name, &format!("{}=={}", pin.name, pin.version))?;
        let actual = sha256_file(&file)?;
        if actual != pin.sha256 {
            return Err(PrepareError::Changed {
                name: pin.name.clone(),
                version: pin.version.clone(),
                expected: pin.sha256.clone(),
                actual,
            });
        }
    }
    Ok(pins.to_vec())
}

/// A distribution name as PEP 503 compares them.
fn canonical_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if "-_.".contains(c) {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

fn sha256_file(path: &Path) -> Result<String, PrepareError> {
    let bytes =
        std::fs::read(path).map_err(|e| PrepareError::Io(format!("cannot read a wheel: {e}")))?;
    Ok(crate::digest::sha256_hex(&bytes))
}

/// pip, run with no input in the empty folder beside `wheels`: a
/// requirement's name that is also a folder in the working directory
/// would be built as a local project.
fn pip(wheels: &Path) -> Command {
    let mut command = Command::new("python3");
    command
        .args(["-m", "pip"])
        .current_dir(wheels.with_file_name(EMPTY))
        .stdin(std::process::Stdio::null());
    command
}

/// The empty folder pip runs in, beside the downloaded wheels.
const EMPTY: &str = "empty";

const WHEELS_ONLY: &[&str] = &[
    "--no-input",
    "--disable-pip-version-check",
    "--quiet",
    "--only-binary=:all:",
    "--platform",
    "any",
    "--implementation",
    "py",
    "--abi",
    "none",
    "--python-version",
    PYTHON_VERSION,
];

/// Downloads the wheel of one requirement, and nothing it depends on;
/// returns the wheel's path.
fn pip_download(wheels: &Path, name: &str, spec: &str) -> Result<PathBuf, PrepareError> {
    let before = wheel_files(wheels);
    let out = pip(wheels)
        .arg("download")
        .args(WHEELS_ONLY)
        .args(["--no-deps", "--dest"])
        .arg(wheels)
        .arg("--")
        .arg(spec)
        .output()
        .map_err(|_| PrepareError::NoPip)?;
    pip_failed(&out, spec)?;
    let added: Vec<PathBuf> = wheel_files(wheels)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    let named = |f: &PathBuf| {
        f.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('-').next())
            .is_some_and(|dist| canonical_name(dist) == name)
    };
    match added.into_iter().find(named) {
        Some(file) => Ok(file),
        // Already there: the same distribution, asked for again.
        None => wheel_files(wheels)
            .into_iter()
            .find(named)
            .ok_or_else(|| PrepareError::NotPure(spec.to_string())),
    }
}

fn wheel_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|items| {
            items
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "whl"))
                .collect()
        })
        .unwrap_or_default()
}

/// What the wheels at `paths` depend on in the sandbox, each read for its
/// extras.
fn wheel_deps(paths: &[(PathBuf, Vec<String>)]) -> Result<Vec<Dist>, PrepareError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let request = serde_json::json!({
        "mode": "deps",
        "wheels": paths
            .iter()
            .map(|(path, extras)| serde_json::json!({"path": path, "extras": extras}))
            .collect::<Vec<_>>(),
    });
    #[derive(serde::Deserialize)]
    struct Answer {
        dists: Vec<Dist>,
    }
    Ok(run_helper::<Answer>(&request)?.dists)
}

/// Runs `wheel_deps.py` with the host's Python on one request.
fn run_helper<T: serde::de::DeserializeOwned>(
    request: &serde_json::Value,
) -> Result<T, PrepareError> {
    let file = tempfile::NamedTempFile::new()
        .map_err(|e| PrepareError::Io(format!("cannot write the resolver's request: {e}")))?;
    std::fs::write(file.path(), request.to_string())
        .map_err(|e| PrepareError::Io(format!("cannot write the resolver's request: {e}")))?;
    let out = Command::new("python3")
        .args(["-I", "-c", include_str!("wheel_deps.py")])
        .arg(file.path())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|_| PrepareError::NoPip)?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let line = said
            .lines()
            .last()
            .unwrap_or("the host's Python failed")
            .trim();
        return Err(PrepareError::Pip(line.chars().take(300).collect()));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| PrepareError::Pip(format!("the resolver answered something unreadable: {e}")))
}

/// Installs exactly the downloaded wheels, each checked against its hash,
/// with nothing fetched and no dependency followed.
fn pip_install(site: &Path, wheels: &Path, pinned: &[Pinned]) -> Result<(), PrepareError> {
    let list = wheels.join("pinned.txt");
    let lines: String = pinned
        .iter()
        .map(|p| format!("{}=={} --hash=sha256:{}\n", p.name, p.version, p.sha256))
        .collect();
    std::fs::write(&list, lines)
        .map_err(|e| PrepareError::Io(format!("cannot write the pinned list: {e}")))?;
    let out = pip(wheels)
        .arg("install")
        .args(WHEELS_ONLY)
        .args([
            "--no-deps",
            "--no-index",
            "--require-hashes",
            "--no-compile",
        ])
        .arg("--find-links")
        .arg(wheels)
        .arg("--target")
        .arg(site)
        .arg("--requirement")
        .arg(&list)
        .output()
        .map_err(|_| PrepareError::NoPip)?;
    pip_failed(&out, "the prepared set")
}

/// The error a failed pip run means.
fn pip_failed(out: &std::process::Output, what: &str) -> Result<(), PrepareError> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named pip") {
        return Err(PrepareError::NoPip);
    }
    // "Could not find a version that satisfies the requirement X (from versions: …)"
    if stderr.contains("satisfies the requirement ") {
        return Err(PrepareError::NotPure(what.to_string()));
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
            let Some(expected) = hash else {
                // Only the RECORD itself (and its signatures) may go
                // without a hash: every other file is vouched for.
                let record_itself = file == record_path
                    || file == format!("{name}/RECORD.jws")
                    || file == format!("{name}/RECORD.p7s");
                if record_itself {
                    continue;
                }
                return Err(bad("its RECORD line has no hash"));
            };
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
    fn with_adds_to_what_was_prepared_and_a_later_pin_replaces_a_line() {
        let before = vec!["pypdf==5.1.0".to_string()];
        let declared = vec!["defusedxml".to_string(), "PyYAML==6.0.1".into()];
        let with = vec!["defusedxml==0.7.1".to_string(), "pyyaml==6.0.2".into()];
        assert_eq!(
            combined(&before, &declared, &with, false),
            ["pypdf==5.1.0", "defusedxml==0.7.1", "pyyaml==6.0.2"]
        );
        assert_eq!(
            combined(&before, &declared, &[], true),
            ["defusedxml", "PyYAML==6.0.1"]
        );
        assert_eq!(project_of("Zope.Interface_x==1"), "zope-interface-x");
        assert_eq!(project_of("a[extra]>=1; python_version>'3'"), "a");
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
