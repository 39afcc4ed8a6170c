//! Long-term memory figures: `memory_search` over a scope of 10,000
//! entries (the default cap is 1,000, so this is ten times a full scope),
//! for a typical query and for one every entry matches, and one
//! `memory_save`, which syncs to disk before it returns.

use std::time::Instant;

use super::Stats;
use skillbox::agent::memory::{Limits, MemoryStore, NewEntry, Scope};

pub(super) struct MemoryFigures {
    /// A query of three words, over 10,000 entries.
    pub search_10k: Stats,
    /// A query every entry matches.
    pub search_all: Stats,
    pub save: Stats,
}

const ENTRIES: usize = 10_000;

/// Distinct words in the corpus. Facts share some words often and most
/// rarely, as real notes do: each word is drawn with a skew towards the
/// first ones.
const VOCABULARY: u64 = 5_000;
const SYLLABLES: [&str; 10] = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su"];

/// Word `n` of the vocabulary: its decimal digits as syllables.
fn word(n: u64) -> String {
    n.to_string()
        .bytes()
        .map(|d| SYLLABLES[(d - b'0') as usize])
        .collect()
}

/// A fact of 12 words (and one word every fact has, for the worst case),
/// from a fixed pseudo-random sequence.
fn fact(i: usize) -> NewEntry {
    let mut state = (i as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let words: Vec<String> = (0..12)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (state >> 33) as f64 / (1u64 << 31) as f64;
            word((r * r * VOCABULARY as f64) as u64)
        })
        .collect();
    NewEntry {
        text: format!("note {} {i}", words.join(" ")),
        tags: vec![word(i as u64 % 50)],
        ttl_days: None,
        run_id: format!("run-bench{:04}", i / 100),
        step: (i % 20) as u64,
    }
}

pub(super) fn run(iterations: usize) -> anyhow::Result<MemoryFigures> {
    eprintln!("bench: memory: {ENTRIES} entries, then searches and saves…");
    let dir = tempfile::tempdir()?;
    let limits = Limits {
        entries: ENTRIES + iterations + 1,
        scope_bytes: 64 << 20,
        ..Limits::default()
    };
    let store = MemoryStore::open_with(&dir.path().join("memory.sqlite"), limits)?;
    let scope = Scope::new("bench")?;
    store.import(&scope, (0..ENTRIES).map(fact))?;

    // Three words of middling frequency, as a model's query would be; and
    // a word every entry has, the worst case, where all 10,000 are ranked.
    let typical: Vec<String> = (0..8)
        .map(|k| {
            format!(
                "{} {} {}",
                word(40 + k),
                word(300 + k * 7),
                word(1200 + k * 31)
            )
        })
        .collect();
    let search = |queries: &[String]| -> anyhow::Result<Stats> {
        let mut samples = Vec::with_capacity(iterations);
        for round in 0..=iterations {
            let query = &queries[round % queries.len()];
            let start = Instant::now();
            let found = store.search(&scope, query, 5)?;
            if round > 0 {
                samples.push(start.elapsed());
            }
            anyhow::ensure!(
                !found.is_empty(),
                "the bench corpus has no match for {query:?}"
            );
        }
        Ok(Stats::of(samples))
    };
    let search_10k = search(&typical)?;
    let search_all = search(&["note".to_string()])?;
    let mut saves = Vec::new();
    for i in 0..iterations.min(100) {
        let start = Instant::now();
        store.save(&scope, fact(ENTRIES + i))?;
        saves.push(start.elapsed());
    }
    Ok(MemoryFigures {
        search_10k,
        search_all,
        save: Stats::of(saves),
    })
}
