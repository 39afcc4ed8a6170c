//! `skillbox.yaml`: what this host needs to run a skill's code.
//!
//! Kept out of SKILL.md so the skill stays valid for every other host. The
//! schema is strict (unknown keys are errors) because it is this host's own
//! format and a typo must not silently drop a limit or a grant. See
//! `docs/skillbox-yaml.md`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::files::{MAX_SKILL_FILE_BYTES, ReadError, SkillDir, checked_relative};
use super::frontmatter::Problem;
use crate::sandbox::{MAX_MEMORY_BYTES, MIB, NetRule, SideEffect, header_problem};

pub const MANIFEST_FILE: &str = "skillbox.yaml";

/// A `grants.network` entry asking for whichever hosts the user grants the
/// skill by name.
pub const ANY_HOST: &str = "*";

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    #[serde(default)]
    pub tools: Vec<ToolComponent>,
    #[serde(default)]
    pub scripts: Vec<Script>,
    #[serde(default)]
    pub grants: RequestedGrants,
    #[serde(default)]
    pub limits: ManifestLimits,
    #[serde(default)]
    pub python: PythonNeeds,
}

/// What the skill's Python scripts need beyond the standard library.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PythonNeeds {
    /// Pinned pure-Python requirements (`defusedxml==0.7.1`), installed
    /// once by `skillbox prepare`; a run never downloads.
    #[serde(default)]
    pub requires: Vec<String>,
}

/// A component whose exported functions become tools.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ToolComponent {
    /// Path relative to the skill folder, e.g. `tools/text.wasm`.
    pub component: String,
    /// The functions served as tools, by exported name. Omitted: every
    /// exported function, each warned about for lacking a description.
    #[serde(default)]
    pub functions: BTreeMap<String, ToolSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ToolSpec {
    /// When to use the tool and when not to.
    pub description: String,
    #[serde(default)]
    pub effect: Effect,
    /// Per-parameter descriptions, by parameter name.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// How to ask for less when a result is cut to the output budget, in
    /// the tool's own arguments ("a later `start` or a smaller `count`");
    /// the cut note quotes it.
    #[serde(default)]
    pub paging: Option<String>,
}

/// The side-effect class of a tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    #[default]
    Read,
    Write,
    Destructive,
}

impl From<Effect> for SideEffect {
    fn from(e: Effect) -> Self {
        match e {
            Effect::Read => SideEffect::Read,
            Effect::Write => SideEffect::Write,
            Effect::Destructive => SideEffect::Destructive,
        }
    }
}

/// A command component run with arguments and stdin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Script {
    pub component: String,
    /// Defaults to the component's file stem.
    #[serde(default)]
    pub name: Option<String>,
    /// One line: the arguments it takes and what it prints.
    pub usage: String,
}

impl Script {
    pub fn name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let file = self.component.rsplit('/').next().unwrap_or(&self.component);
            file.strip_suffix(".wasm").unwrap_or(file).to_string()
        })
    }
}

/// What the skill asks for. Only the user's policy turns a request into a
/// grant.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RequestedGrants {
    #[serde(default)]
    pub workspace: WorkspaceAccess,
    /// `host[:port]` entries (without a port: 80 and 443), or `*` for any
    /// host the user grants this skill by name (a generic fetcher).
    #[serde(default)]
    pub network: Vec<String>,
    /// Environment variable names.
    #[serde(default)]
    pub env: Vec<String>,
    /// Programs of the host's its scripts start (`soffice`, `pdftoppm`),
    /// by name. Only the user grants them.
    #[serde(default)]
    pub programs: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceAccess {
    #[default]
    None,
    Read,
    Write,
}

impl WorkspaceAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceAccess::None => "none",
            WorkspaceAccess::Read => "read",
            WorkspaceAccess::Write => "write",
        }
    }
}

impl std::str::FromStr for WorkspaceAccess {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(WorkspaceAccess::None),
            "read" => Ok(WorkspaceAccess::Read),
            "write" => Ok(WorkspaceAccess::Write),
            _ => Err(format!(
                "workspace access `{text}` is not one of read, write, none"
            )),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ManifestLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<usize>,
}

impl ManifestLimits {
    pub fn is_empty(&self) -> bool {
        *self == ManifestLimits::default()
    }

    /// These limits without those `other` sets.
    pub fn without(&self, other: &ManifestLimits) -> ManifestLimits {
        let keep = |mine: Option<u64>, theirs: Option<u64>| mine.filter(|_| theirs.is_none());
        ManifestLimits {
            timeout_ms: keep(self.timeout_ms, other.timeout_ms),
            fuel: keep(self.fuel, other.fuel),
            memory_mib: keep(self.memory_mib, other.memory_mib),
            output_bytes: self.output_bytes.filter(|_| other.output_bytes.is_none()),
        }
    }

    /// Each limit by its name (`timeout_ms`, `fuel`, `memory_mib`,
    /// `output_bytes`), set or not.
    pub fn named(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("timeout_ms", self.timeout_ms),
            ("fuel", self.fuel),
            ("memory_mib", self.memory_mib),
            ("output_bytes", self.output_bytes.map(|b| b as u64)),
        ]
    }
}

impl Manifest {
    /// Every component path the manifest names, tools first.
    pub fn component_paths(&self) -> impl Iterator<Item = &str> {
        self.tools
            .iter()
            .map(|t| t.component.as_str())
            .chain(self.scripts.iter().map(|s| s.component.as_str()))
    }

    pub fn script(&self, name: &str) -> Option<&Script> {
        self.scripts.iter().find(|s| s.name() == name)
    }
}

/// Reads and checks `skillbox.yaml`, if the skill has one. Checks here are
/// the cheap ones: schema, paths, that each component exists and is a
/// component. Checks that need the component's types are in
/// [`super::tools`].
pub fn load(dir: &SkillDir) -> Result<Option<Manifest>, Vec<Problem>> {
    let Some((manifest, text)) = parse(dir)? else {
        return Ok(None);
    };
    let problems = check(&manifest, &text, dir);
    if problems.is_empty() {
        Ok(Some(manifest))
    } else {
        Err(problems)
    }
}

/// Reads and parses the manifest (and its text) without the checks that
/// need the skill's other files: `skillbox build` reads it before the
/// components it names exist.
pub fn parse(dir: &SkillDir) -> Result<Option<(Manifest, String)>, Vec<Problem>> {
    let bytes = match dir.read_bounded(MANIFEST_FILE, MAX_SKILL_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(ReadError::NotFound) => return Ok(None),
        Err(e) => {
            return Err(vec![problem(
                None,
                "manifest-read",
                format!("cannot read {MANIFEST_FILE}: {e}"),
            )]);
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| {
        vec![problem(
            None,
            "encoding",
            format!("{MANIFEST_FILE} is not valid UTF-8"),
        )]
    })?;
    let manifest = parse_text(&text)?;
    Ok(Some((manifest, text)))
}

/// Parses the manifest's text against the schema.
pub fn parse_text(text: &str) -> Result<Manifest, Vec<Problem>> {
    serde_norway::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        vec![problem(
            line,
            "manifest-schema",
            format!("{msg}; see docs/skillbox-yaml.md for the schema"),
        )]
    })
}

/// Limits that cannot be meant: zero, or (memory) beyond what the host can
/// hold at all. Arithmetic is checked, so a huge value is a finding, never
/// a wrap. Any other request is clamped to the user's ceilings when a call
/// runs (see `skill::policy`), and `skills check` reports the clamping.
fn limit_problems(
    limits: &ManifestLimits,
    line_of: &dyn Fn(&str) -> Option<usize>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut out_of_range = |key: &str, range: String| {
        problems.push(problem(
            line_of(key),
            "manifest-limit",
            format!("`{key}` must be between {range}; ask for what one call needs (the user's ceilings clamp it further)"),
        ));
    };
    if limits.timeout_ms == Some(0) {
        out_of_range("timeout-ms", format!("1 and {}", u64::MAX));
    }
    if limits.fuel == Some(0) {
        out_of_range("fuel", format!("1 and {}", u64::MAX));
    }
    if let Some(mib) = limits.memory_mib {
        let bytes = usize::try_from(mib).ok().and_then(|m| m.checked_mul(MIB));
        if mib == 0 || bytes.is_none_or(|b| b > MAX_MEMORY_BYTES) {
            out_of_range("memory-mib", format!("1 and {}", MAX_MEMORY_BYTES / MIB));
        }
    }
    if limits.output_bytes == Some(0) {
        out_of_range("output-bytes", format!("1 and {}", usize::MAX));
    }
    problems
}

fn problem(line: Option<usize>, rule: &'static str, message: String) -> Problem {
    Problem {
        line,
        rule,
        message,
    }
}

/// Distributions that ship only compiled code and that no Python runtime
/// of skillbox has: no wheel of theirs runs in the sandbox. (numpy, pandas,
/// lxml, Pillow and the other compiled packages of the full Python runtime
/// are not here: `prepare` leaves them to that runtime.)
const COMPILED_DISTRIBUTIONS: &[&str] = &[
    "opencv-python",
    "torch",
    "pydantic-core",
    "cryptography",
    "psycopg2",
    "psycopg2-binary",
    "grpcio",
    "orjson",
    "ujson",
];

/// What keeps `prepare` from installing a Python requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequirementProblem {
    /// Not `name==version` with plain characters.
    Unpinned,
    /// A distribution that is compiled code.
    Compiled,
}

/// Whether `requirement` is one `prepare` can install: `name==version`
/// with plain characters (no URL, option or marker pip would act on), of
/// a distribution that is not compiled code.
pub fn python_requirement(requirement: &str) -> Result<(), RequirementProblem> {
    // A distribution name as PEP 508 spells it: letters and digits at both
    // ends, `.`, `_` and `-` inside. Anything else (`.x`, `./x`, `-r`) pip
    // would read as a path or an option.
    let is_name = |s: &str| {
        let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        ends(s.chars().next())
            && ends(s.chars().last())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    let with_extras = |s: &str| match s.split_once('[') {
        None => is_name(s),
        Some((name, extras)) => {
            is_name(name)
                && extras
                    .strip_suffix(']')
                    .is_some_and(|list| list.split(',').all(is_name))
        }
    };
    let is_version = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".+!-_".contains(c))
    };
    let (name, _) = requirement
        .split_once("==")
        .filter(|(name, version)| with_extras(name) && is_version(version))
        .ok_or(RequirementProblem::Unpinned)?;
    let base = name
        .split('[')
        .next()
        .unwrap_or(name)
        .to_ascii_lowercase()
        .replace('_', "-");
    if COMPILED_DISTRIBUTIONS.contains(&base.as_str()) {
        return Err(RequirementProblem::Compiled);
    }
    Ok(())
}

/// [`python_requirement`] as a finding's words.
fn python_requirement_problem(requirement: &str) -> Result<(), String> {
    python_requirement(requirement).map_err(|problem| match problem {
        RequirementProblem::Unpinned => format!(
            "python requirement `{requirement}` is not pinned; give an exact version \
             (`name==1.2.3`), so that every run gets the code that was checked"
        ),
        RequirementProblem::Compiled => format!(
            "python requirement `{requirement}` is compiled (C-extension) code with no \
             pure-Python wheel, and no Python runtime of skillbox has it built in"
        ),
    })
}

fn check(manifest: &Manifest, text: &str, dir: &SkillDir) -> Vec<Problem> {
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).map(|i| i + 1);
    let mut problems = Vec::new();
    for path in manifest.component_paths() {
        let line = line_of(path);
        if checked_relative(path).is_err() {
            problems.push(problem(line, "manifest-path", format!(
                "component `{path}` must be a path inside the skill folder (no `..`, not absolute)"
            )));
            continue;
        }
        match dir.read_bounded(path, crate::sandbox::MAX_COMPONENT_BYTES) {
            Ok(bytes) => {
                if let Some(why) = header_problem(&bytes) {
                    problems.push(problem(line, "manifest-not-component", format!("`{path}` {why}")));
                }
            }
            Err(ReadError::NotFound) => problems.push(problem(line, "manifest-component-missing", format!(
                "component `{path}` does not exist; build it (scripts/build-guests) or fix the path"
            ))),
            Err(e) => problems.push(problem(line, "manifest-path", format!("component `{path}`: {e}"))),
        }
    }
    for requirement in &manifest.python.requires {
        if let Err(why) = python_requirement_problem(requirement) {
            problems.push(problem(
                line_of(requirement),
                "manifest-python-requirement",
                why,
            ));
        }
    }
    let mut script_names = std::collections::BTreeSet::new();
    for script in &manifest.scripts {
        let name = script.name();
        if !script_names.insert(name.clone()) {
            problems.push(problem(
                line_of(&script.component),
                "manifest-duplicate",
                format!("two scripts are named `{name}`; give one a different `name`"),
            ));
        }
        if script.usage.trim().is_empty() {
            problems.push(problem(
                line_of(&script.component),
                "manifest-usage",
                format!("script `{name}` needs a one-line `usage`"),
            ));
        }
    }
    let mut function_names = std::collections::BTreeSet::new();
    for tool in &manifest.tools {
        for (name, spec) in &tool.functions {
            if !function_names.insert(name.clone()) {
                problems.push(problem(
                    line_of(name),
                    "manifest-duplicate",
                    format!(
                        "function `{name}` is listed by two components; tool names must be unique"
                    ),
                ));
            }
            if spec.description.trim().is_empty() {
                problems.push(problem(
                    line_of(name),
                    "tool-description",
                    format!(
                        "tool `{name}` needs a description saying when to use it and when not to"
                    ),
                ));
            }
        }
    }
    for entry in &manifest.grants.network {
        if entry != ANY_HOST && entry.parse::<NetRule>().is_err() {
            problems.push(problem(
                line_of(entry),
                "manifest-grant",
                format!(
                    "network grant `{entry}` must be `host[:port]` (like `api.example.com:443`) or `*`"
                ),
            ));
        }
    }
    for key in &manifest.grants.env {
        let valid = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && !key.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            problems.push(problem(line_of(key), "manifest-grant", format!(
                "environment key `{key}` must be an upper-case variable name like `GITHUB_TOKEN`"
            )));
        }
    }
    problems.extend(limit_problems(&manifest.limits, &line_of));
    problems
}
