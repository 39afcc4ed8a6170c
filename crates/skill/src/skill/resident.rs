//! The resident catalog: the skill lines a model reads before it has
//! loaded anything (in `load_skill`'s description and in the agent's
//! system prompt), kept within a token budget.
//!
//! When every skill fits, each line carries the description (up to
//! [`DESCRIPTION_CHARS`]). When not, descriptions shrink to their first
//! sentence, then skills are listed in a stable order until the budget is
//! spent, and a last line says how many more exist and how to find them.
//! The order never depends on the request, so prompt caches hold:
//! explicit and project skills first, then user, then system, each
//! alphabetical.

use std::cmp::Reverse;
use std::sync::Arc;

use super::meta::cut_at_word;
use super::model::Skill;
use super::tokens;

/// Longest description shown in a catalog line.
pub const DESCRIPTION_CHARS: usize = 480;

/// The default budget: about 2 % of a 200k-token context.
pub const DEFAULT_BUDGET_TOKENS: usize = 4_000;

/// Bytes of prose per o200k token, at the least, for the estimate above.
const BYTES_PER_TOKEN_AT_LEAST: usize = 2;

/// The name of the search tool the overflow line points to.
pub const FIND_SKILLS: &str = "find_skills";

/// The resident catalog under one budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resident {
    /// The lines, in order, ending with the overflow line when skills were
    /// left out.
    pub lines: Vec<String>,
    /// Skills listed.
    pub listed: Vec<String>,
    /// Skills the model may use, listed or not.
    pub total: usize,
    /// Tokens of the lines, when they were counted (see [`Resident::tokens`]).
    counted: Option<usize>,
}

impl Resident {
    /// Whether every skill is listed (then `load_skill` can enumerate them).
    pub fn complete(&self) -> bool {
        self.listed.len() == self.total
    }

    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// Tokens of the lines (counted now if the budget did not need it).
    pub fn tokens(&self) -> usize {
        self.counted
            .unwrap_or_else(|| self.lines.iter().map(|l| tokens::count(l) + 1).sum())
    }
}

/// The catalog line of a skill, with its description cut to `max_chars`
/// (or to its first sentence with `first_sentence`).
pub fn line(skill: &Skill, first_sentence: bool) -> String {
    let description = skill.meta.description.trim();
    let description = if first_sentence {
        first_sentence_of(description)
    } else {
        description
    };
    format!(
        "- {}: {}",
        skill.name(),
        cut_at_word(description, DESCRIPTION_CHARS)
    )
}

/// The resident catalog of the skills a model may use, within `budget`
/// tokens.
pub fn build<'a>(model_visible: impl Iterator<Item = &'a Arc<Skill>>, budget: usize) -> Resident {
    let mut skills: Vec<&Arc<Skill>> = model_visible.collect();
    skills.sort_by(|a, b| (Reverse(a.source), a.name()).cmp(&(Reverse(b.source), b.name())));
    let total = skills.len();
    for first_sentence in [false, true] {
        let lines: Vec<String> = skills.iter().map(|s| line(s, first_sentence)).collect();
        // Loading the tokenizer costs more than 100 ms, so it is loaded
        // only when the catalog may not fit: o200k needs two bytes or more
        // per token for prose in any script (English about four), so lines
        // within twice the budget in bytes are taken to fit. Text built to
        // defeat this (rare characters that split into bytes) can overshoot
        // the budget by at most that factor of two.
        let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
        if bytes <= budget.saturating_mul(BYTES_PER_TOKEN_AT_LEAST) {
            return Resident {
                listed: skills.iter().map(|s| s.name().to_string()).collect(),
                lines,
                total,
                counted: None,
            };
        }
        let costs: Vec<usize> = lines.iter().map(|l| tokens::count(l) + 1).collect();
        let sum: usize = costs.iter().sum();
        if sum <= budget {
            return Resident {
                listed: skills.iter().map(|s| s.name().to_string()).collect(),
                lines,
                total,
                counted: Some(sum),
            };
        }
        if !first_sentence {
            continue;
        }
        // Not even short lines fit: list what fits, then say what is left.
        let overflow_cost = 40;
        let mut spent = 0;
        let mut kept = 0;
        while kept < lines.len() && spent + costs[kept] + overflow_cost <= budget {
            spent += costs[kept];
            kept += 1;
        }
        let mut lines: Vec<String> = lines.into_iter().take(kept).collect();
        let overflow = format!(
            "- … and {} more skills not listed here: call {FIND_SKILLS} {{\"query\": \"what the task needs\"}} to search all {total} by name and description; load_skill takes any skill's name.",
            total - kept
        );
        spent += tokens::count(&overflow) + 1;
        lines.push(overflow);
        return Resident {
            listed: skills
                .iter()
                .take(kept)
                .map(|s| s.name().to_string())
                .collect(),
            lines,
            total,
            counted: Some(spent),
        };
    }
    unreachable!("the second pass always returns")
}

/// The first sentence: up to the first `. ` (or the whole text).
fn first_sentence_of(text: &str) -> &str {
    match text.find(". ") {
        Some(end) => &text[..=end],
        None => text,
    }
}
