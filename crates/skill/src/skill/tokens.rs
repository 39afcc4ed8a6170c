//! Token costs of skills, counted with a real tokenizer (o200k_base) when
//! the `tokens` feature is on, else estimated.

/// Bodies above this many tokens are flagged: they crowd the context
/// window on every activation.
pub const BODY_TOKEN_WARNING: usize = 5000;
/// Descriptions shorter than this rarely say when to use a skill.
pub const MIN_DESCRIPTION_CHARS: usize = 40;

#[cfg(feature = "tokens")]
fn bpe() -> &'static tiktoken_rs::CoreBPE {
    static BPE: std::sync::OnceLock<tiktoken_rs::CoreBPE> = std::sync::OnceLock::new();
    BPE.get_or_init(|| {
        tiktoken_rs::o200k_base().expect("the o200k_base tables ship with tiktoken-rs")
    })
}

/// Tokens in `text` under o200k_base.
#[cfg(feature = "tokens")]
pub fn count(text: &str) -> usize {
    bpe().encode_ordinary(text).len()
}

/// Tokens in `text`, estimated at four bytes each (rounded up): English
/// prose under o200k_base averages a little over four, so budgets kept
/// with the estimate stay within the real count's reach.
#[cfg(not(feature = "tokens"))]
pub fn count(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Why a description may not help a model choose the skill, if it may not.
pub fn description_problem(description: &str) -> Option<String> {
    let d = description.trim();
    let lower = d.to_lowercase();
    if d.chars().count() < MIN_DESCRIPTION_CHARS {
        return Some(format!(
            "the description is very short ({} chars); say what the skill does and when to use it",
            d.chars().count()
        ));
    }
    const VAGUE: [&str; 6] = [
        "helps with",
        "various",
        "stuff",
        "things",
        "utility",
        "misc",
    ];
    let says_when = ["use when", "use for", "use it", "when ", "for "]
        .iter()
        .any(|w| lower.contains(w));
    if let Some(word) = VAGUE.iter().find(|w| lower.contains(*w))
        && !says_when
    {
        return Some(format!(
            "the description is vague (\"{word}\") and never says when to use the skill; name concrete inputs and triggers"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_tokens() {
        assert_eq!(count(""), 0);
        assert!(count("hello world") >= 2);
        assert!(count(&"word ".repeat(1000)) >= 1000);
    }

    #[test]
    fn flags_short_and_vague_descriptions() {
        assert!(description_problem("Logs.").is_some());
        assert!(
            description_problem("A utility that helps with various things around the house.")
                .is_some()
        );
        assert!(description_problem("Search and summarize large application logs; use when a user asks about errors in a log file.").is_none());
    }
}
