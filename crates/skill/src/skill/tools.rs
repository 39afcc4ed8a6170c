//! A skill's tools and scripts as this host serves them: the manifest's
//! descriptions joined to the component's own types. The types are read
//! from the components' bytes, or from their code when it is compiled
//! already, so resolving a skill never waits for a compiler; each
//! component compiles in the background ([`PendingComponent`]), and a
//! call waits only for its own.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::diagnostic::Diagnostic;
use super::files::{ReadError, read_to_limit};
use super::manifest::{Effect, MANIFEST_FILE, ToolComponent};
use super::model::Skill;
use crate::sandbox::stamp::FileStamp;
use crate::sandbox::{DigestMemo, MAX_COMPONENT_BYTES, PendingComponent, Sandbox};
use crate::schema::{ExportedFunction, output_schema};

/// MCP tool names must fit every major model API.
pub const MAX_TOOL_NAME: usize = 64;

/// One tool a skill serves, named `<skill>__<function>`.
#[derive(Debug, Clone)]
pub struct SkillTool {
    pub name: String,
    pub skill: String,
    /// Component path inside the skill folder.
    pub component_path: String,
    /// The exported function's tool-facing name.
    pub function: String,
    pub description: String,
    pub effect: Effect,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    /// The manifest's hint for asking for less (`paging:`).
    pub paging: Option<String>,
    /// The component, described and compiling (or compiled).
    pub component: Arc<PendingComponent>,
}

pub fn tool_name(skill: &str, function: &str) -> String {
    format!("{skill}__{function}")
}

/// Splits `skill__function`.
pub fn split_tool_name(name: &str) -> Option<(&str, &str)> {
    name.split_once("__")
}

/// A skill's code, described: its tools, its scripts' components by
/// script name, and what in the manifest does not match the code.
#[derive(Debug, Default)]
pub struct Resolution {
    pub tools: Vec<SkillTool>,
    pub scripts: Vec<(String, Arc<PendingComponent>)>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Resolution {
    /// Every component the resolution holds, tools' and scripts', once.
    pub fn components(&self) -> Vec<Arc<PendingComponent>> {
        let mut out: Vec<Arc<PendingComponent>> = Vec::new();
        let all = self
            .tools
            .iter()
            .map(|t| &t.component)
            .chain(self.scripts.iter().map(|(_, c)| c));
        for component in all {
            if !out.iter().any(|c| Arc::ptr_eq(c, component)) {
                out.push(component.clone());
            }
        }
        out
    }
}

/// Describes a skill's tool and script components from their bytes
/// (starting each one's compile in the background) and derives its tools.
/// Diagnostics name what in the manifest does not match the code.
pub fn resolve(skill: &Skill, sandbox: &Arc<Sandbox>) -> Resolution {
    let mut resolution = Resolution::default();
    let Resolution {
        tools,
        scripts,
        diagnostics: diags,
    } = &mut resolution;
    let manifest_path = skill.dir.join(MANIFEST_FILE);
    let Some(manifest) = &skill.manifest else {
        return resolution;
    };
    for entry in &manifest.tools {
        match prepare(skill, &entry.component, sandbox) {
            Ok(component) => tools_of(skill, entry, component, &manifest_path, tools, diags),
            Err(message) => {
                diags.push(Diagnostic::error(&manifest_path, "component-load", message))
            }
        }
    }
    for script in &manifest.scripts {
        match prepare(skill, &script.component, sandbox) {
            Ok(component) if !component.exports.is_command => diags.push(Diagnostic::error(
                &manifest_path,
                "script-not-command",
                format!(
                    "script `{}` ({}) does not export wasi:cli/run; list it under `tools` instead",
                    script.name(),
                    script.component
                ),
            )),
            Ok(component) => scripts.push((script.name(), component)),
            Err(message) => {
                diags.push(Diagnostic::error(&manifest_path, "component-load", message))
            }
        }
    }
    resolution
}

/// A component's bytes from inside the skill folder, through the folder
/// handle pinned when the catalog was built, with their SHA-256, and only
/// if they are still the ones the catalog recorded: code changed under a
/// loaded skill does not run with that skill's grants until a reload
/// checks it again (nor does a change a stamp cannot see: the code
/// compiled from the recorded bytes runs while it is cached). These bytes
/// are hashed whatever the catalog took its digest from, because they are
/// what is described and compiled; a remembered digest they do not match
/// is forgotten, so the reload hashes the file.
fn checked_bytes(
    skill: &Skill,
    rel: &str,
    memo: Option<&DigestMemo>,
) -> Result<(Vec<u8>, String), String> {
    let unreadable = |e: ReadError| format!("component `{rel}`: {e}");
    let mut file = skill.files.open_regular(rel).map_err(unreadable)?;
    let bytes = read_to_limit(&mut file, MAX_COMPONENT_BYTES).map_err(unreadable)?;
    let hex = crate::sandbox::sha256_hex(&bytes);
    if skill
        .component_digest(rel)
        .and_then(|d| d.strip_prefix("sha256:"))
        != Some(hex.as_str())
    {
        if let (Some(memo), Some(stamp)) = (memo, FileStamp::settled_of(&file)) {
            memo.forget(&stamp);
            memo.save();
        }
        return Err(format!(
            "component `{rel}` changed since skill `{}` was loaded; it does not run until the \
             skill is reloaded and checked again",
            skill.name()
        ));
    }
    Ok((bytes, hex))
}

/// The component of a file that still holds the bytes the catalog
/// recorded, by its stamp, when this process or the compiled-code cache
/// has their code: the file is then neither read nor hashed. Its stamp
/// must be settled and one the digest memo remembers with the catalog's
/// digest, which any write to the file since would have changed. What
/// runs is the code compiled from bytes with that digest; a change a
/// stamp cannot see (through a shared mapping) is not run, as no change
/// is until a reload.
fn compiled_and_unchanged(
    skill: &Skill,
    rel: &str,
    sandbox: &Sandbox,
) -> Option<Arc<PendingComponent>> {
    let memo = sandbox.digest_memo()?;
    let digest = skill.component_digest(rel)?;
    let file = skill.files.open_regular(rel).ok()?;
    let stamp = FileStamp::settled_of(&file)?;
    if memo.digest_of(&stamp)? != digest {
        return None;
    }
    sandbox.prepare_cached(digest.strip_prefix("sha256:")?)
}

/// Describes a component of the skill and starts its compile.
pub fn prepare(
    skill: &Skill,
    rel: &str,
    sandbox: &Arc<Sandbox>,
) -> Result<Arc<PendingComponent>, String> {
    if let Some(ready) = compiled_and_unchanged(skill, rel, sandbox) {
        return Ok(ready);
    }
    let (bytes, hex) = checked_bytes(skill, rel, sandbox.digest_memo())?;
    sandbox
        .prepare_hashed(bytes, &hex)
        .map_err(|e| format!("component `{rel}`: {e}"))
}

fn tools_of(
    skill: &Skill,
    entry: &ToolComponent,
    component: Arc<PendingComponent>,
    manifest_path: &std::path::Path,
    tools: &mut Vec<SkillTool>,
    diags: &mut Vec<Diagnostic>,
) {
    let exports = &component.exports;
    let chosen: Vec<(&ExportedFunction, Option<&super::manifest::ToolSpec>)> = if entry
        .functions
        .is_empty()
    {
        exports.functions.iter().map(|f| (f, None)).collect()
    } else {
        let mut chosen = Vec::new();
        for (name, spec) in &entry.functions {
            match exports.function(name) {
                Some(f) => chosen.push((f, Some(spec))),
                None => {
                    let why = exports
                        .skipped
                        .iter()
                        .find(|s| &s.name == name)
                        .map(|s| format!("it is exported but cannot be a tool: {}", s.reason))
                        .unwrap_or_else(|| format!("it exports: {}", exports.names().join(", ")));
                    diags.push(Diagnostic::error(
                        manifest_path,
                        "tool-unknown-function",
                        format!(
                            "`{}` lists function `{name}`, which it does not serve; {why}",
                            entry.component
                        ),
                    ));
                }
            }
        }
        chosen
    };
    for (function, spec) in chosen {
        let name = tool_name(skill.name(), &function.name);
        if name.len() > MAX_TOOL_NAME {
            diags.push(Diagnostic::error(
                manifest_path,
                "tool-name-length",
                format!("tool name `{name}` is {} characters; the limit is {MAX_TOOL_NAME}. Shorten the skill or function name", name.len()),
            ));
            continue;
        }
        let mut input_schema = function.input_schema();
        if let Some(spec) = spec {
            let known: BTreeSet<&str> = function.params.iter().map(|(n, _)| n.as_str()).collect();
            for (param, text) in &spec.params {
                if !known.contains(param.as_str()) {
                    diags.push(Diagnostic::error(
                        manifest_path,
                        "tool-unknown-param",
                        format!(
                            "tool `{}` describes parameter `{param}`, which the function does not take; it takes: {}",
                            function.name,
                            known.iter().copied().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                } else if let Some(prop) = input_schema["properties"].get_mut(param.as_str()) {
                    prop["description"] = Value::from(text.as_str());
                }
            }
        } else {
            diags.push(Diagnostic::warning(
                manifest_path,
                "tool-description",
                format!(
                    "`{}` exports `{}` with no description; list it under `functions` with one that says when to use it and when not to",
                    entry.component, function.name
                ),
            ));
        }
        tools.push(SkillTool {
            name,
            skill: skill.name().to_string(),
            component_path: entry.component.clone(),
            function: function.name.clone(),
            description: spec
                .map(|s| s.description.trim().to_string())
                .unwrap_or_default(),
            // A function the manifest does not describe may do anything its
            // grants allow: treat it as writing, never as read-only.
            effect: spec.map_or(Effect::Write, |s| s.effect),
            input_schema,
            output_schema: function.result.as_ref().map(output_schema),
            paging: spec.and_then(|s| s.paging.clone()),
            component: component.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skill::frontmatter::Strictness;
    use crate::skill::model::{Known, load_with_digests};
    use crate::skill::source::{Source, SourceKind};
    use std::path::Path;

    /// A skill `name` under `root` whose one tool component holds `bytes`;
    /// returns its folder and the component's path.
    fn skill_with_component(
        root: &Path,
        name: &str,
        bytes: &[u8],
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("tools")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: A skill for a test of its component's digest.\n---\nBody.\n"),
        )
        .unwrap();
        std::fs::write(
            dir.join(MANIFEST_FILE),
            "tools:\n  - component: tools/t.wasm\n",
        )
        .unwrap();
        let component = dir.join("tools/t.wasm");
        std::fs::write(&component, bytes).unwrap();
        (dir, component)
    }

    fn loaded(root: &Path, dir: &Path, known: Known<'_>) -> Skill {
        let source = Source {
            kind: SourceKind::Explicit,
            root: root.to_path_buf(),
            trusted: true,
        };
        let (skill, diags) = load_with_digests(dir, &source, Strictness::Lenient, known);
        skill.unwrap_or_else(|| panic!("{diags:?}"))
    }

    /// Why `prepare` refused the skill's component, which it must.
    fn refusal(skill: &Skill, sandbox: &Arc<Sandbox>) -> String {
        match prepare(skill, "tools/t.wasm", sandbox) {
            Ok(_) => panic!("skill `{}`: its component was prepared", skill.name()),
            Err(why) => why,
        }
    }

    /// An installed skill takes its component's digest from the lock
    /// instead of hashing the file at load; the code read later must match
    /// the lock.
    #[test]
    fn a_locked_load_takes_the_lock_digest_and_the_code_must_match_it() {
        let root = tempfile::tempdir().unwrap();
        // A component's header, then bytes the test tells apart.
        let locked_bytes = b"\0asm\x0d\x00\x01\x00 the locked bytes";
        let other_bytes = b"\0asm\x0d\x00\x01\x00 other bytes";
        let (dir, component) = skill_with_component(root.path(), "locked", other_bytes);
        let locked = crate::digest::sha256(locked_bytes);
        let digests = [("tools/t.wasm".to_string(), locked.clone())].into();
        let known = Known {
            digests: &digests,
            ..Default::default()
        };
        let skill = loaded(root.path(), &dir, known);
        assert_eq!(
            skill.component_digest("tools/t.wasm"),
            Some(locked.as_str())
        );

        let sandbox = Arc::new(Sandbox::with_options(&Default::default(), None).unwrap());
        let why = refusal(&skill, &sandbox);
        assert!(
            why.contains("changed since skill `locked` was loaded"),
            "{why}"
        );
        std::fs::write(&component, locked_bytes).unwrap();
        let why = refusal(&skill, &sandbox);
        assert!(!why.contains("changed since"), "{why}");
    }

    /// A digest the memo remembers names the file the catalog loaded; the
    /// bytes read at first use are hashed again, so a memo that no longer
    /// fits them (a change a stamp cannot see) refuses the code rather
    /// than compile it under the remembered digest, and forgets the entry
    /// so that the next load hashes the file. (The bytes are read because
    /// no code for the remembered digest is compiled: see
    /// `an_unchanged_file_is_not_read_when_its_code_is_compiled`.)
    #[test]
    fn code_is_checked_against_a_remembered_digest_when_it_is_read() {
        let root = tempfile::tempdir().unwrap();
        let bytes = b"\0asm\x0d\x00\x01\x00 the bytes on disk";
        let (dir, component) = skill_with_component(root.path(), "remembered", bytes);
        let file = std::fs::File::open(&component).unwrap();
        let settle = std::time::Duration::from_secs(10);
        let Some(stamp) = crate::sandbox::stamp::wait_until_settled(&file, settle) else {
            return; // a file system whose stamps never settle
        };
        let cache = crate::sandbox::DiskCache::new(root.path().join("cache"));
        let sandbox = Arc::new(Sandbox::with_options(&Default::default(), Some(cache)).unwrap());
        let memo = sandbox.digest_memo().unwrap();
        let remembering = Known {
            memo: Some(memo),
            ..Default::default()
        };
        let right = crate::digest::sha256(bytes);

        // Hashed at the first load and remembered; the code matches.
        let skill = loaded(root.path(), &dir, remembering);
        assert_eq!(skill.component_digest("tools/t.wasm"), Some(right.as_str()));
        assert_eq!(memo.digest_of(&stamp), Some(right.clone()));
        let why = refusal(&skill, &sandbox);
        assert!(!why.contains("changed since"), "{why}");

        // A memo whose entry for this very stamp names other bytes.
        let other = crate::digest::sha256(b"other bytes");
        memo.remember(stamp, &other);
        let skill = loaded(root.path(), &dir, remembering);
        assert_eq!(skill.component_digest("tools/t.wasm"), Some(other.as_str()));
        let why = refusal(&skill, &sandbox);
        assert!(
            why.contains("changed since skill `remembered` was loaded"),
            "{why}"
        );
        // Forgotten: the reload hashes the file again.
        assert_eq!(memo.digest_of(&stamp), None);
        let skill = loaded(root.path(), &dir, remembering);
        assert_eq!(skill.component_digest("tools/t.wasm"), Some(right.as_str()));
    }

    /// A file whose settled stamp the memo remembers with the catalog's
    /// digest is neither read nor hashed when that digest's code is
    /// compiled already, in this process or in the compiled-code cache:
    /// the code is described from what was compiled. Any write to the file
    /// moves its stamp, and the bytes are read and checked again.
    #[test]
    fn an_unchanged_file_is_not_read_when_its_code_is_compiled() {
        let root = tempfile::tempdir().unwrap();
        // An empty component, compiled; the file on disk is no component,
        // so a read of it could not be described.
        let compiled = b"\0asm\x0d\x00\x01\x00";
        let on_disk = b"\0asm\x0d\x00\x01\x00 not what was compiled";
        let (dir, component) = skill_with_component(root.path(), "unread", on_disk);
        let file = std::fs::File::open(&component).unwrap();
        let settle = std::time::Duration::from_secs(10);
        let Some(stamp) = crate::sandbox::stamp::wait_until_settled(&file, settle) else {
            return; // a file system whose stamps never settle
        };
        let cache = || crate::sandbox::DiskCache::new(root.path().join("cache"));
        let compiling = Sandbox::with_options(&Default::default(), Some(cache())).unwrap();
        compiling.load_bytes(compiled).unwrap();
        let digest = crate::digest::sha256(compiled);

        // A new process: its memo (as if a change a stamp cannot see had
        // followed the hash) names the compiled bytes for this stamp.
        let sandbox = Arc::new(Sandbox::with_options(&Default::default(), Some(cache())).unwrap());
        let memo = sandbox.digest_memo().unwrap();
        memo.remember(stamp, &digest);
        let remembering = Known {
            memo: Some(memo),
            ..Default::default()
        };
        let skill = loaded(root.path(), &dir, remembering);
        let ready = prepare(&skill, "tools/t.wasm", &sandbox).unwrap();
        assert_eq!(ready.digest, digest);
        assert_eq!(sandbox.load_counts(), (1, 0), "loaded from the cache");

        // A lock that names other bytes is not overruled by the memo: the
        // file is read, and refused.
        let locked = [("tools/t.wasm".to_string(), crate::digest::sha256(b"locked"))].into();
        let installed = Known {
            digests: &locked,
            memo: Some(memo),
        };
        let skill_locked = loaded(root.path(), &dir, installed);
        let why = refusal(&skill_locked, &sandbox);
        assert!(
            why.contains("changed since skill `unread` was loaded"),
            "{why}"
        );

        // Written again, with the same bytes: read, and refused.
        std::fs::write(&component, on_disk).unwrap();
        let why = refusal(&skill, &sandbox);
        assert!(
            why.contains("changed since skill `unread` was loaded"),
            "{why}"
        );
    }
}
