//! Before anything runs: resolve the skill and its tool or script, check
//! the invocation policy and that the folder is the one loaded, load the
//! component, and work out the grants.

use std::sync::Arc;

use super::error::CallError;
use super::host::Host;
use super::request::{Access, Caller, Target};
use crate::runtime::python_full::{self, FullRuntime};
use crate::runtime::{self, ScriptKind, packages, python, shell};
use crate::sandbox::{PendingComponent, SandboxError, SideEffect};
use crate::skill::policy;
use crate::skill::tools::SkillTool;
use crate::skill::{Effect, Skill};

/// What was resolved before anything runs.
pub(super) struct Prepared {
    /// The skill whose code runs; `None` for a component file the user
    /// named.
    pub skill: Option<Arc<Skill>>,
    pub tool: Option<SkillTool>,
    /// Described; its code may still be compiling (the pipeline waits).
    pub component: Arc<PendingComponent>,
    pub component_path: String,
    pub effect: Option<Effect>,
    pub class: SideEffect,
    pub runs: Runs,
    /// The full Python runtime, when the Python that runs needs a module
    /// only it has; `None` runs the light one (or no Python at all).
    pub full_python: Option<Arc<FullRuntime>>,
}

/// What runs a script: its own component, or an interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Runs {
    Component,
    /// The Python runtime, on this file of the skill.
    Python {
        script: String,
    },
    /// The Python runtime, on code given with the call (`run_code`).
    PythonCode,
    /// A shell the user granted, on this file of the skill, started by
    /// the Python runtime (`runtime/shell.rs`).
    Shell {
        script: String,
        shell: String,
        options: Vec<String>,
    },
}

impl Runs {
    /// Whether the Python runtime runs (and so may start programs).
    fn is_python(&self) -> bool {
        matches!(
            self,
            Runs::Python { .. } | Runs::PythonCode | Runs::Shell { .. }
        )
    }
}

impl Host {
    /// The grants a prepared call runs with.
    pub(super) fn grants_of(&self, prepared: &Prepared) -> policy::Resolved {
        let mut resolved = match &prepared.skill {
            None => policy::bare_grants(&self.options.policy),
            Some(skill) => {
                let mut resolved = policy::grants(skill, &self.options.policy, prepared.effect);
                if prepared.runs.is_python() {
                    resolved.grants.packages = python::prepared_site(&skill.dir);
                }
                resolved
            }
        };
        if let Some(full) = &prepared.full_python {
            resolved.grants.runtime_files = full.files();
        }
        // Only the Python runtimes can ask for programs (their
        // `subprocess`); code without a skill asks and is refused.
        let python = prepared.runs.is_python();
        resolved.grants.programs = match resolved.grants.programs.take() {
            Some(programs) if python => Some(programs),
            None if python => Some(Vec::new()),
            _ => None,
        };
        if prepared.runs == Runs::PythonCode {
            self.narrow_for_code(&mut resolved, prepared.skill.is_some());
        }
        self.read_only_workspace(&mut resolved);
        resolved
    }

    /// Code given with the call is the model's, not the skill's: it never
    /// gets the secrets the user gave a skill (`--allow-env`), which are
    /// for the code the user installed; it gets no network without a skill
    /// (whatever the user granted the component files they name), and none
    /// on a read-only server, where a request could change the world just
    /// as a write could.
    fn narrow_for_code(&self, resolved: &mut policy::Resolved, as_skill: bool) {
        if !resolved.grants.env.is_empty() {
            let keys = resolved.grants.env_keys();
            resolved.notes.push(format!(
                "run_code does not pass environment variables ({}): they are given to the \
                 skill's own scripts, not to code written for the call. Run the skill's \
                 script that needs them with run_script.",
                keys.join(", ")
            ));
            resolved.grants.env.clear();
        }
        if !resolved.grants.network.is_empty() && (!as_skill || self.options.read_only) {
            if as_skill {
                resolved.notes.push(
                    "run_code has no network on a read-only server; the user can serve \
                     without --read-only to let the skill's code reach its hosts."
                        .into(),
                );
            }
            resolved.grants.network.clear();
        }
        let programs = resolved.grants.programs.as_mut();
        if let Some(programs) = programs.filter(|p| !p.is_empty() && self.options.read_only) {
            resolved.notes.push(
                "run_code starts no programs on a read-only server; the user can serve without \
                 --read-only to let the skill's code start the programs granted to it."
                    .into(),
            );
            programs.clear();
        }
    }

    /// A read-only server's calls never write the workspace.
    fn read_only_workspace(&self, resolved: &mut policy::Resolved) {
        if self.options.read_only
            && let Some(workspace) = &mut resolved.grants.workspace
        {
            workspace.writable = false;
        }
    }

    /// Resolve, invocation policy, folder check and component load.
    pub(super) async fn prepare(
        self: &Arc<Self>,
        caller: &Caller,
        target: &Target,
    ) -> Result<Prepared, CallError> {
        match target {
            Target::ComponentTool { path, .. } => {
                // Its class follows what it may really do: write limits
                // for a workspace it may write.
                let writes = self.options.policy.workspace.is_some()
                    && self.options.policy.allow_write
                    && !self.options.read_only;
                let class = if writes {
                    SideEffect::Write
                } else {
                    SideEffect::Read
                };
                return self.prepare_component(caller, path, class).await;
            }
            Target::ComponentScript { path, .. } => {
                return self
                    .prepare_component(caller, path, SideEffect::Script)
                    .await;
            }
            Target::Code {
                skill: None, code, ..
            } => return self.prepare_code(None, code).await,
            Target::Tool { .. } | Target::Script { .. } | Target::Code { .. } => {}
        }
        let catalog = self.catalog();
        let skill_name = target.skill();
        let skill = match catalog.get(skill_name) {
            Some(skill) => skill.clone(),
            None => {
                let available = catalog
                    .model_visible()
                    .map(|s| s.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(match target {
                    Target::Tool { name, .. } if skill_name.is_empty() => CallError::UnknownTool {
                        name: name.clone(),
                        why: format!(
                            "skill tools are named <skill>__<function>, and this name has no `__` \
                             (loaded skills: {available})."
                        ),
                    },
                    Target::Tool { name, .. } => CallError::UnknownTool {
                        name: name.clone(),
                        why: format!(
                            "there is no skill `{skill_name}` (loaded skills: {available}). \
                             Skill tools are named <skill>__<function>."
                        ),
                    },
                    _ => CallError::NoSuchSkill {
                        name: skill_name.to_string(),
                        available,
                    },
                });
            }
        };
        allowed(caller, &skill)?;
        if !skill.is_in_place() {
            tracing::warn!(
                "skill `{}`: its folder was moved or replaced since it was loaded; refusing calls until it is reloaded",
                skill.name()
            );
            return Err(CallError::Moved {
                skill: skill.name().to_string(),
            });
        }
        match target {
            Target::Tool { name, .. } => {
                let skill_tools = self.tools_of_blocking(&skill).await;
                let Some(tool) = skill_tools.iter().find(|t| &t.name == name).cloned() else {
                    let names: Vec<&str> = skill_tools.iter().map(|t| t.name.as_str()).collect();
                    let problems = self.problems_of(skill.name());
                    if !problems.is_empty() {
                        return Err(CallError::Unavailable {
                            name: name.clone(),
                            why: format!(
                                "skill `{}` cannot serve all of its tools: {}.",
                                skill.name(),
                                problems.join("; ")
                            ),
                        });
                    }
                    return Err(CallError::UnknownTool {
                        name: name.clone(),
                        why: format!(
                            "skill `{}` has no such tool; its tools: {}.",
                            skill.name(),
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    });
                };
                if !self.serves(&tool) {
                    return Err(CallError::ReadOnly { what: tool.name });
                }
                Ok(Prepared {
                    component: tool.component.clone(),
                    component_path: tool.component_path.clone(),
                    effect: Some(tool.effect),
                    class: tool.effect.into(),
                    tool: Some(tool),
                    skill: Some(skill),
                    runs: Runs::Component,
                    full_python: None,
                })
            }
            Target::ComponentTool { .. } | Target::ComponentScript { .. } => {
                unreachable!("component files are prepared above")
            }
            Target::Code { code, .. } => self.prepare_code(Some(skill), code).await,
            Target::Script { script, .. } => {
                if self.options.read_only {
                    return Err(CallError::ReadOnly {
                        what: format!("run_script {}/{script}", skill.name()),
                    });
                }
                let Some(spec) = skill
                    .manifest
                    .as_ref()
                    .and_then(|m| m.script(script))
                    .cloned()
                else {
                    if let Some(source) = self.source_script(&skill, script).await? {
                        return Ok(source);
                    }
                    return Err(CallError::NoSuchScript {
                        skill: skill.name().to_string(),
                        script: script.clone(),
                        available: listed(&skill.script_names()),
                    });
                };
                let (host, loader_skill, name) = (self.clone(), skill.clone(), script.clone());
                let component =
                    tokio::task::spawn_blocking(move || host.script_of(&loader_skill, &name))
                        .await
                        .map_err(|_| SandboxError::Host("the loader stopped".into()))?
                        .ok_or_else(|| CallError::Unavailable {
                            name: format!("{}/{script}", skill.name()),
                            why: format!(
                                "its component could not be loaded: {}",
                                self.problems_of(skill.name()).join("; ")
                            ),
                        })?;
                Ok(Prepared {
                    skill: Some(skill),
                    tool: None,
                    component,
                    component_path: spec.component,
                    effect: None,
                    class: SideEffect::Script,
                    runs: Runs::Component,
                    full_python: None,
                })
            }
        }
    }

    /// A component file the user named, as a one-tool skill of its own:
    /// only the user may name a file of the host.
    async fn prepare_component(
        self: &Arc<Self>,
        caller: &Caller,
        path: &std::path::Path,
        class: SideEffect,
    ) -> Result<Prepared, CallError> {
        if !matches!(caller.access, Access::User) {
            return Err(CallError::UnknownTool {
                name: path.display().to_string(),
                why: "a component file can be named only by the user at the command line; a \
                      model calls skill tools (<skill>__<function>)."
                    .into(),
            });
        }
        let (sandbox, file) = (self.sandbox.clone(), path.to_path_buf());
        let loaded = tokio::task::spawn_blocking(move || sandbox.load_file(&file))
            .await
            .map_err(|_| SandboxError::Host("the loader stopped".into()))??;
        Ok(Prepared {
            skill: None,
            tool: None,
            component: Arc::new(PendingComponent::ready(loaded)),
            component_path: path.display().to_string(),
            effect: None,
            class,
            runs: Runs::Component,
            full_python: None,
        })
    }

    /// A script the skill ships as source (`scripts/x.py`), run by its
    /// interpreter; `None` when the skill has no such file.
    async fn source_script(
        self: &Arc<Self>,
        skill: &Arc<Skill>,
        script: &str,
    ) -> Result<Option<Prepared>, CallError> {
        let rel = script.trim_start_matches("./");
        // `python -m scripts.x` names a module, which may be a package.
        let package_main = rel
            .strip_suffix(".py")
            .map(|stem| format!("{stem}/__main__.py"));
        let Some(rel) = [Some(rel.to_string()), package_main]
            .into_iter()
            .flatten()
            .find(|candidate| skill.serves_file(candidate))
        else {
            return Ok(None);
        };
        let cannot = |why: String| CallError::CannotRun {
            script: format!("{}/{rel}", skill.name()),
            why,
        };
        if !skill.runs_script(&rel) {
            return Err(cannot(format!(
                "`{rel}` is a file of the skill, not one of its scripts: only files under \
                 scripts/ run, not those whose names start with `_` (modules the scripts \
                 import), and not through a symbolic link. The skill's scripts are: {}",
                listed(&skill.script_names())
            )));
        }
        match runtime::kind_of(&rel) {
            ScriptKind::Unsupported(language) => Err(cannot(language.reason(&rel))),
            ScriptKind::Shell => {
                let runs = self.shell_for(skill, &rel).map_err(cannot)?;
                let component = self.python_runtime(None).await.map_err(cannot)?;
                Ok(Some(Prepared {
                    skill: Some(skill.clone()),
                    tool: None,
                    component,
                    component_path: rel,
                    effect: None,
                    class: SideEffect::Script,
                    runs,
                    full_python: None,
                }))
            }
            ScriptKind::Python => {
                let full_python = full_python_for(
                    Some(skill.clone()),
                    python_full::Source::Script(rel.clone()),
                )
                .await;
                let component = self
                    .python_runtime(full_python.as_deref())
                    .await
                    .map_err(cannot)?;
                Ok(Some(Prepared {
                    skill: Some(skill.clone()),
                    tool: None,
                    component,
                    component_path: rel.clone(),
                    effect: None,
                    class: SideEffect::Script,
                    runs: Runs::Python { script: rel },
                    full_python,
                }))
            }
        }
    }
}

impl Host {
    /// How the skill's shell script `rel` runs: with the shell it asks for
    /// when the user granted the skill that shell; or why it cannot.
    fn shell_for(&self, skill: &Skill, rel: &str) -> Result<Runs, String> {
        let name = skill.name();
        let asked = skill.shell_of(rel).map_err(|program| {
            format!(
                "`{rel}` is a shell script whose first line (`#!`) asks for `{program}`, which \
                 is not a shell; skillbox runs shell scripts with sh, bash or zsh."
            )
        })?;
        let granted = policy::grants(skill, &self.options.policy, None)
            .grants
            .programs
            .unwrap_or_default();
        let shell = shell::granted_shell(&asked.shell, |shell| {
            granted.iter().any(|program| program.name == shell)
        })
        .ok_or_else(|| {
            let wanted = &asked.shell;
            format!(
                "`{rel}` is a shell script for `{wanted}`, and the sandbox has no shell of its \
                 own: it runs with the host's `{wanted}` once the user grants it to the skill \
                 (`skillbox grant {name} --program {wanted}`, or --allow-program \
                 {name}:{wanted}). The shell then runs in the OS sandbox with this call's \
                 workspace (its writes staged), a private /tmp, no network and the call's \
                 limits, and so does every program the script starts. Until then, do its \
                 steps with the skill's tools or Python."
            )
        })?;
        Ok(Runs::Shell {
            script: rel.to_string(),
            shell,
            options: asked.options,
        })
    }

    /// Code to run with `run_code`: as `skill`'s own code, or the host's.
    async fn prepare_code(
        self: &Arc<Self>,
        skill: Option<Arc<Skill>>,
        code: &str,
    ) -> Result<Prepared, CallError> {
        if code.len() > MAX_CODE_BYTES {
            return Err(CallError::CannotRunCode {
                why: format!(
                    "it is {} bytes, and run_code takes at most {} KiB. Write a long program \
                     to a file in the workspace in smaller parts, or ship it as a script of a \
                     skill.",
                    code.len(),
                    MAX_CODE_BYTES / 1024
                ),
            });
        }
        let full_python =
            full_python_for(skill.clone(), python_full::Source::Code(code.to_string())).await;
        let component = self
            .python_runtime(full_python.as_deref())
            .await
            .map_err(|why| CallError::CannotRunCode { why })?;
        Ok(Prepared {
            skill,
            tool: None,
            component,
            component_path: CODE_PATH.to_string(),
            effect: None,
            class: SideEffect::Script,
            runs: Runs::PythonCode,
            full_python,
        })
    }

    /// The Python runtime, loaded (the full one when given); or why it
    /// cannot run, for a model and a person.
    async fn python_runtime(
        &self,
        full: Option<&FullRuntime>,
    ) -> Result<Arc<PendingComponent>, String> {
        let Some(path) = full
            .map(FullRuntime::component)
            .or_else(python::runtime_path)
        else {
            return Err(
                "Python runs in skillbox's Python runtime, which is not installed here. \
                 The user can install it with scripts/install (or scripts/build-runtimes in a \
                 source checkout), or name the file with SKILLBOX_PYTHON_RUNTIME."
                    .into(),
            );
        };
        let sandbox = self.sandbox.clone();
        let loaded = tokio::task::spawn_blocking(move || sandbox.load_file(&path))
            .await
            .map_err(|_| "the loader stopped".to_string())?
            .map_err(|_| {
                let (which, script) = match full {
                    Some(_) => ("full Python runtime", "scripts/build-python-full"),
                    None => ("Python runtime", "scripts/build-runtimes"),
                };
                format!(
                    "skillbox's {which} is installed but could not be loaded (it is damaged, \
                     or not a runtime of this version). The user can install it again with \
                     scripts/install ({script} in a source checkout)."
                )
            })?;
        Ok(Arc::new(PendingComponent::ready(loaded)))
    }
}

/// The full Python runtime, when it is installed and `source` needs a
/// module only it has (read off the async runtime: the first call reads
/// the skill's Python files).
async fn full_python_for(
    skill: Option<Arc<Skill>>,
    source: python_full::Source,
) -> Option<Arc<FullRuntime>> {
    let runtime = python_full::installed()?;
    tokio::task::spawn_blocking(move || {
        let site = skill.as_deref().and_then(|s| python::prepared_site(&s.dir));
        let needs_full = site.as_deref().is_some_and(packages::needs_built_in)
            || !python_full::needed(&runtime, skill.as_deref(), &source, site.as_deref())
                .is_empty();
        needs_full.then_some(runtime)
    })
    .await
    .ok()
    .flatten()
}

/// The most code `run_code` takes: far more than a model writes in one
/// call, far less than would make its argv a burden.
pub(super) const MAX_CODE_BYTES: usize = 256 * 1024;

/// The component path the audit names for code runs.
const CODE_PATH: &str = "<code>";

/// Script names for an error: `a, b`, or `none`.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The invocation policy, checked at call time.
fn allowed(caller: &Caller, skill: &Skill) -> Result<(), CallError> {
    let Access::Model {
        require_loaded,
        loaded,
        user_invoked,
    } = &caller.access
    else {
        return Ok(());
    };
    let name = skill.name();
    if !skill.model_invocable() && !user_invoked.contains(name) {
        return Err(CallError::UserOnly {
            skill: name.to_string(),
        });
    }
    if *require_loaded && !loaded.contains(name) && !user_invoked.contains(name) {
        return Err(CallError::NotLoaded {
            skill: name.to_string(),
        });
    }
    Ok(())
}
