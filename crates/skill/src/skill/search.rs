//! Finding skills by what they do: BM25 over each skill's name,
//! description and headings, for catalogs too large to list.
//!
//! BM25 is the standard relevance measure of text search (Lucene, SQLite
//! FTS5): rare words count more than common ones, repeated words count
//! with diminishing returns, and long documents do not win by length. The
//! name counts three times (a skill called `pdf-forms` is about PDF
//! forms); headings once, like the description. This is a small module
//! rather than a crate because the corpus is small (thousands of short
//! documents, built once per catalog) and the scoring fits on a page.

use std::collections::HashMap;

use super::model::Skill;

const K1: f64 = 1.2;
const B: f64 = 0.75;
const NAME_WEIGHT: f64 = 3.0;

/// Words too common to tell skills apart.
const STOPWORDS: [&str; 16] = [
    "a", "an", "and", "the", "or", "of", "to", "for", "in", "on", "with", "use", "when", "is",
    "it", "this",
];

/// An index over a catalog's skills.
#[derive(Debug, Default)]
pub struct Index {
    docs: Vec<Doc>,
    /// Documents containing each term.
    df: HashMap<String, usize>,
    avg_len: f64,
}

#[derive(Debug)]
struct Doc {
    name: String,
    terms: HashMap<String, f64>,
    len: f64,
}

/// A match, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub name: String,
    pub score: f64,
}

/// What is indexed of one skill.
pub struct Entry<'a> {
    pub name: &'a str,
    pub title: Option<&'a str>,
    pub description: &'a str,
    /// The Markdown body, whose headings are indexed.
    pub body: &'a str,
}

impl<'a> Entry<'a> {
    pub fn of(skill: &'a Skill) -> Self {
        Entry {
            name: skill.name(),
            title: skill.meta.title.as_deref(),
            description: &skill.meta.description,
            body: &skill.body,
        }
    }
}

impl Index {
    pub fn build<'a>(entries: impl IntoIterator<Item = Entry<'a>>) -> Index {
        let mut index = Index::default();
        for entry in entries {
            let mut terms: HashMap<String, f64> = HashMap::new();
            let mut add = |text: &str, weight: f64| {
                for term in tokenize(text) {
                    *terms.entry(term).or_default() += weight;
                }
            };
            add(entry.name, NAME_WEIGHT);
            add(entry.title.unwrap_or_default(), 1.0);
            add(entry.description, 1.0);
            for heading in entry.body.lines().filter(|l| l.starts_with('#')) {
                add(heading.trim_start_matches('#'), 1.0);
            }
            for term in terms.keys() {
                *index.df.entry(term.clone()).or_default() += 1;
            }
            let len = terms.values().sum();
            index.docs.push(Doc {
                name: entry.name.to_string(),
                terms,
                len,
            });
        }
        index.avg_len = if index.docs.is_empty() {
            1.0
        } else {
            index.docs.iter().map(|d| d.len).sum::<f64>() / index.docs.len() as f64
        };
        index
    }

    /// The best `limit` skills for `query`, best first; ties by name.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let terms = tokenize(query);
        let n = self.docs.len() as f64;
        let mut hits: Vec<Hit> = self
            .docs
            .iter()
            .filter_map(|doc| {
                let score: f64 = terms
                    .iter()
                    .filter_map(|t| {
                        let tf = *doc.terms.get(t)?;
                        let df = self.df[t] as f64;
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        let norm = K1 * (1.0 - B + B * doc.len / self.avg_len.max(1.0));
                        Some(idf * tf * (K1 + 1.0) / (tf + norm))
                    })
                    .sum();
                (score > 0.0).then(|| Hit {
                    name: doc.name.clone(),
                    score,
                })
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.name.cmp(&b.name)));
        hits.truncate(limit);
        hits
    }
}

/// Lowercase words of letters and digits, without stopwords, with a plain
/// plural `s` removed (so `logs` finds `log`).
fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| match w.strip_suffix('s') {
            Some(stem) if stem.len() >= 3 && !stem.ends_with('s') => stem.to_string(),
            _ => w,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Entry, Index, tokenize};

    fn entry<'a>(name: &'a str, description: &'a str, body: &'a str) -> Entry<'a> {
        Entry {
            name,
            title: None,
            description,
            body,
        }
    }

    #[test]
    fn rare_words_and_names_rank_first() {
        let index = Index::build([
            entry("log-inspect", "Find errors in application logs.", "# Steps"),
            entry(
                "pdf-forms",
                "Fill PDF forms and extract fields.",
                "# Filling forms",
            ),
            entry(
                "release-check",
                "Check a release for errors before tagging.",
                "",
            ),
            entry(
                "notes",
                "Summarize meeting notes into decisions.",
                "# Errors to avoid",
            ),
        ]);
        let names =
            |q: &str| -> Vec<String> { index.search(q, 3).into_iter().map(|h| h.name).collect() };
        assert_eq!(names("fill pdf")[0], "pdf-forms");
        assert_eq!(names("application logs")[0], "log-inspect");
        assert_eq!(names("release tagging")[0], "release-check");
        assert!(names("kubernetes").is_empty());
        assert_eq!(
            index.search("errors", 10).len(),
            3,
            "every skill naming errors"
        );
    }

    #[test]
    fn words_are_normalised() {
        assert_eq!(
            tokenize("Inspect the LOGS of pdf-forms, and class"),
            ["inspect", "log", "pdf", "form", "class"]
        );
    }
}
