//! One line of the benchmark's report: a figure, and its target if the
//! performance model sets one.

use serde_json::{Value, json};

use super::{Stats, human, micros};

pub(super) struct Row {
    name: &'static str,
    median: String,
    p90: String,
    n: Option<usize>,
    stats: Option<Stats>,
    target: Option<(&'static str, bool)>,
}

impl Row {
    /// A measured duration: median and p90 of `stats`.
    pub(super) fn timed(name: &'static str, stats: &Stats) -> Row {
        Row {
            name,
            median: human(stats.median),
            p90: human(stats.p90),
            n: Some(stats.n),
            stats: Some(*stats),
            target: None,
        }
    }

    /// A single figure (a ratio, a rate, a size).
    pub(super) fn figure(name: &'static str, value: String) -> Row {
        Row {
            name,
            median: value,
            p90: String::new(),
            n: None,
            stats: None,
            target: None,
        }
    }

    /// The target this figure is held to, and whether it is met.
    pub(super) fn target(mut self, text: &'static str, met: bool) -> Row {
        self.target = Some((text, met));
        self
    }

    /// The JSON key: the name in snake case.
    pub(super) fn key(&self) -> String {
        let mut key = String::new();
        for word in self.name.split(|c: char| !c.is_ascii_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            if !key.is_empty() {
                key.push('_');
            }
            key.push_str(&word.to_ascii_lowercase());
        }
        key
    }

    pub(super) fn json(&self) -> Value {
        let mut row = match &self.stats {
            Some(s) => json!({ "median_us": micros(s.median), "p90_us": micros(s.p90), "n": s.n }),
            None => json!({ "value": self.median }),
        };
        if let Some((text, met)) = self.target {
            row["target"] = json!(text);
            row["met"] = json!(met);
        }
        row
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.n.map(|n| n.to_string()).unwrap_or_default();
        let target = match self.target {
            Some((text, true)) => format!("{text}  met"),
            Some((text, false)) => format!("{text}  MISSED"),
            None => String::new(),
        };
        write!(
            f,
            "{:<48} {:>12} {:>12} {:>6}  {}",
            self.name, self.median, self.p90, n, target
        )
    }
}
