//! The catalog: an immutable snapshot of every loaded skill, its source and
//! digests, every diagnostic, and a name index.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::diagnostic::Diagnostic;
use super::discover;
use super::frontmatter::Strictness;
use super::model::{self, Skill};
use super::resident::{self, Resident};
use super::search;
use super::source::{Source, SourceOptions};

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
        let mut catalog = Catalog::from_sources_within(&options.sources(), &options.limits);
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
        let mut catalog = Catalog::default();
        let mut candidates: BTreeMap<String, Vec<Skill>> = BTreeMap::new();
        let mut found = Vec::new();
        for source in sources {
            let (dirs, diags) = discover::skill_dirs(&source.root, limits);
            catalog.diagnostics.extend(diags);
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
                found.push((dir, source));
            }
        }
        // Reading and hashing each skill's files is independent work; the
        // results are taken in discovery order, so precedence is unchanged.
        use rayon::prelude::*;
        let loaded: Vec<_> = found
            .par_iter()
            .map(|(dir, source)| model::load(dir, source, Strictness::Lenient))
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
