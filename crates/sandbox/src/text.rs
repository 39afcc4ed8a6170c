//! Text from outside as it may be shown, and text cut to fit: one rule
//! for what a terminal or a model must not be handed raw.

/// Whether `c` changes how a terminal shows what follows it: a control
/// character, or a bidirectional embedding, override or isolate.
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `text` on one line as it may be printed: control and text-direction
/// characters shown as `?`.
pub fn printable_line(text: &str) -> String {
    text.chars()
        .map(|c| if unprintable(c) { '?' } else { c })
        .collect()
}

/// `text` as it may be printed over several lines: as
/// [`printable_line`], but newlines and tabs are kept.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if unprintable(c) && c != '\n' && c != '\t' {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// `text` on one line (runs of white space made one space), at most
/// `max` characters, with `…` where it was cut.
pub fn clip(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        None => flat,
        Some((cut, _)) => format!("{}…", &flat[..cut]),
    }
}

/// Cuts `text` to at most `max_bytes` at a character boundary, and then
/// appends `marker`, when it is longer.
pub fn cut(text: &mut String, max_bytes: usize, marker: &str) {
    if text.len() > max_bytes {
        let end = text.floor_char_boundary(max_bytes);
        text.truncate(end);
        text.push_str(marker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_outside_cannot_steer_a_terminal() {
        let hostile = "a\x1b[2Jb\u{202e}c\nd\te";
        assert_eq!(printable_line(hostile), "a?[2Jb?c?d?e");
        assert_eq!(printable(hostile), "a?[2Jb?c\nd\te");
    }

    #[test]
    fn cutting_keeps_whole_characters() {
        assert_eq!(clip("a  b\nc", 10), "a b c");
        assert_eq!(clip("ééé", 2), "éé…");
        let mut s = "ééé".to_string();
        cut(&mut s, 3, "…");
        assert_eq!(s, "é…");
        let mut short = "ab".to_string();
        cut(&mut short, 3, "…");
        assert_eq!(short, "ab");
    }
}
