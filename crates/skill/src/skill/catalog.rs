//! The catalog: an immutable snapshot of every loaded skill, its source and
//! digests, every diagnostic, and a name index.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::diagnostic::Diagnostic;
use super::discover;
use super::frontmatter::Strictness;
use super::lock::{self, LockEntry, LockFile, Provenance};
use super::model::{self, Skill};
use super::resident::{self, Resident};
use super::search;
use super::source::{Source, SourceOptions};
use crate::sandbox::DigestMemo;

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    skills: BTreeMap<String, Arc<Skill>>,
    diagnostics: Vec<Diagnostic>,
    /// Skill folders found in untrusted sources and not loaded.
    untrusted: Vec<PathBuf>,
    /// Built on first use, once per catalog.
    search: OnceLock<Arc<search::Index>>,
    resident: OnceLock<(usize, Arc<Resident>)>,
}

impl Catalog {
    /// Discovers and loads every source. Deterministic: the same folders
    /// give the same catalog whatever order they were created in.
    pub fn build(options: &SourceOptions) -> Catalog {
        Catalog::build_remembering(options, None)
    }

    /// [`Catalog::build`], taking the digests of files whose stamps `memo`
    /// remembers instead of hashing them, and saving what it hashed.
    pub fn build_remembering(options: &SourceOptions, memo: Option<&DigestMemo>) -> Catalog {
        let mut catalog = Catalog::load_sources(&options.sources(), &options.limits, memo);
        if let Some(memo) = memo {
            memo.save();
        }
        catalog.skills.retain(|name, _| options.exposes(name));
        for name in &options.only {
            if !catalog.skills.contains_key(name) {
                catalog.diagnostics.push(Diagnostic::warning(
                    PathBuf::from(name),
                    "skill-filter",
                    format!("--skill {name}: no skill of that name was found"),
                ));
            }
        }
        catalog
    }

    /// The catalog of `sources`, searched within the default limits.
    pub fn from_sources(sources: &[Source]) -> Catalog {
        Catalog::from_sources_within(sources, &discover::Limits::default())
    }

    pub fn from_sources_within(sources: &[Source], limits: &discover::Limits) -> Catalog {
        Catalog::load_sources(sources, limits, None)
    }

    fn load_sources(
        sources: &[Source],
        limits: &discover::Limits,
        memo: Option<&DigestMemo>,
    ) -> Catalog {
        let mut catalog = Catalog::default();
        let mut candidates: BTreeMap<String, Vec<Skill>> = BTreeMap::new();
        let mut found = Vec::new();
        for source in sources {
            let (dirs, diags) = discover::skill_dirs(&source.root, limits);
            catalog.diagnostics.extend(diags);
            let locks = Locks::of(&source.root, &mut catalog.diagnostics);
            for dir in dirs {
                if !source.trusted {
                    catalog.diagnostics.push(Diagnostic::warning(
                        &dir,
                        "untrusted-source",
                        format!(
                            "project skill not loaded: {} skills run only with --trust-project",
                            source.kind.as_str()
                        ),
                    ));
                    catalog.untrusted.push(dir);
                    continue;
                }
                match locks.admit(&source.root, &dir) {
                    Admission::Refused(diagnostic) => catalog.diagnostics.push(diagnostic),
                    Admission::Locked(entry) => found.push((dir, source, Some(entry))),
                    Admission::Unlocked => found.push((dir, source, None)),
                }
            }
        }
        // Reading and hashing each skill's files is independent work; the
        // results are taken in discovery order, so precedence is unchanged.
        use rayon::prelude::*;
        let loaded: Vec<_> = found
            .par_iter()
            .map(|(dir, source, locked)| match locked {
                None => {
                    let known = model::Known {
                        memo,
                        ..Default::default()
                    };
                    model::load_with_digests(dir, source, Strictness::Lenient, known)
                }
                Some(entry) => load_locked(dir, source, entry, memo),
            })
            .collect();
        for (skill, diags) in loaded {
            catalog.diagnostics.extend(diags);
            if let Some(skill) = skill {
                candidates
                    .entry(skill.name().to_string())
                    .or_default()
                    .push(skill);
            }
        }
        for (name, skills) in candidates {
            catalog.choose(name, skills);
        }
        catalog.diagnostics.sort();
        catalog.diagnostics.dedup();
        catalog
    }

    /// Keeps the highest-precedence skill of a name (the first found, among
    /// equals) and warns about each one it shadows, naming the winner.
    fn choose(&mut self, name: String, mut skills: Vec<Skill>) {
        let best = (0..skills.len())
            .rev()
            .max_by_key(|&i| skills[i].source)
            .expect("at least one candidate");
        let winner = skills.swap_remove(best);
        for loser in &skills {
            self.diagnostics.push(Diagnostic::warning(
                &loser.dir,
                "name-collision",
                format!(
                    "skill `{name}` here ({}) is shadowed by {} ({}); precedence is explicit > project > user > system",
                    loser.source.as_str(),
                    winner.dir.display(),
                    winner.source.as_str()
                ),
            ));
        }
        self.skills.insert(name, Arc::new(winner));
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Skill>> {
        self.skills.get(name)
    }

    /// Every skill, sorted by name.
    pub fn skills(&self) -> impl Iterator<Item = &Arc<Skill>> {
        self.skills.values()
    }

    /// Skills the model may be offered (not `disable-model-invocation`).
    pub fn model_visible(&self) -> impl Iterator<Item = &Arc<Skill>> {
        self.skills().filter(|s| s.model_invocable())
    }

    /// Skills a user may invoke by name (not `user-invocable: false`).
    pub fn user_visible(&self) -> impl Iterator<Item = &Arc<Skill>> {
        self.skills().filter(|s| s.user_invocable())
    }

    /// The search index over the skills the model may use.
    pub fn search_index(&self) -> Arc<search::Index> {
        self.search
            .get_or_init(|| {
                Arc::new(search::Index::build(
                    self.model_visible().map(|s| search::Entry::of(s)),
                ))
            })
            .clone()
    }

    /// The resident catalog within `budget` tokens (kept for the first
    /// budget asked, which is the server's).
    pub fn resident(&self, budget: usize) -> Arc<Resident> {
        let (cached_budget, resident) = self.resident.get_or_init(|| {
            (
                budget,
                Arc::new(resident::build(self.model_visible(), budget)),
            )
        });
        if *cached_budget == budget {
            resident.clone()
        } else {
            Arc::new(resident::build(self.model_visible(), budget))
        }
    }

    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    pub fn untrusted(&self) -> &[PathBuf] {
        &self.untrusted
    }

    pub fn len(&self) -> usize {
        self.skills.len()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

/// The lock of one source folder, as the catalog applies it.
enum Locks {
    /// No lock, or one that is read.
    Read {
        lock: LockFile,
        /// The skill an interrupted install left pending.
        pending: Option<String>,
    },
    /// A lock that cannot be read: nothing in the source is trusted to be
    /// what was installed, so nothing in it loads.
    Broken,
}

enum Admission {
    Unlocked,
    Locked(Arc<LockEntry>),
    Refused(Diagnostic),
}

impl Locks {
    fn of(root: &std::path::Path, diagnostics: &mut Vec<Diagnostic>) -> Locks {
        match LockFile::read(root) {
            Ok(lock) => Locks::Read {
                lock,
                pending: lock::pending_install(root),
            },
            Err(e) => {
                diagnostics.push(Diagnostic::error(
                    root.join(lock::LOCK_FILE),
                    "lock-unreadable",
                    format!("{e}; no skill in this folder is loaded until it is fixed"),
                ));
                Locks::Broken
            }
        }
    }

    /// Whether the skill folder `dir` found in the source at `root` loads,
    /// and against which lock entry.
    fn admit(&self, root: &std::path::Path, dir: &std::path::Path) -> Admission {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let directly_below = dir.parent() == Some(root);
        match self {
            Locks::Broken => Admission::Refused(Diagnostic::error(
                dir,
                "lock-unreadable",
                format!(
                    "skill `{name}` not loaded: its folder's {} cannot be read",
                    lock::LOCK_FILE
                ),
            )),
            Locks::Read { pending, .. } if directly_below && pending.as_deref() == Some(&name) => {
                Admission::Refused(Diagnostic::error(
                    dir,
                    "install-interrupted",
                    format!(
                        "skill `{name}` not loaded: an install of it was interrupted; run `skillbox sync` to finish or undo it"
                    ),
                ))
            }
            Locks::Read { lock, .. } if directly_below => match lock.skills.get(&name) {
                Some(entry) => Admission::Locked(Arc::new(entry.clone())),
                None => Admission::Unlocked,
            },
            Locks::Read { .. } => Admission::Unlocked,
        }
    }
}

/// Loads an installed skill only if its folder holds exactly the files its
/// lock entry names.
fn load_locked(
    dir: &std::path::Path,
    source: &Source,
    entry: &LockEntry,
    memo: Option<&DigestMemo>,
) -> (Option<Skill>, Vec<Diagnostic>) {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    if let Err(why) = lock::verify_signature(entry) {
        return (
            None,
            vec![Diagnostic::error(
                dir,
                "locked-skill-signature",
                format!(
                    "installed skill `{name}` is not loaded: {why}. The lock was edited; restore {} from version control, or run `skillbox remove {name}` and add it again",
                    lock::LOCK_FILE
                ),
            )],
        );
    }
    match lock::remembered_drift(entry, dir, memo) {
        Ok(drift) if drift.is_clean() => {
            let known = model::Known {
                digests: &entry.files,
                memo,
            };
            let (skill, diagnostics) =
                model::load_with_digests(dir, source, Strictness::Lenient, known);
            let skill = skill.map(|mut skill| {
                skill.provenance = Some(Arc::new(Provenance::of(entry)));
                skill
            });
            (skill, diagnostics)
        }
        Ok(drift) => (
            None,
            vec![Diagnostic::error(
                dir,
                "locked-skill-changed",
                format!(
                    "installed skill `{name}` no longer matches {}: {}; it is not loaded. Run `skillbox sync` to restore it from {}, or `skillbox remove {name}`",
                    lock::LOCK_FILE,
                    drift.describe(),
                    entry.resolved
                ),
            )],
        ),
        Err(e) => (
            None,
            vec![Diagnostic::error(
                dir,
                "locked-skill-unreadable",
                format!(
                    "installed skill `{name}` cannot be checked against {}: {e}",
                    lock::LOCK_FILE
                ),
            )],
        ),
    }
}
