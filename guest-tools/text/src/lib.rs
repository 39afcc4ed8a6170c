//! Bounded reading and searching of large text files.
//!
//! Files are streamed line by line, so a multi-gigabyte log costs time but
//! not memory; every result is capped and says how to get the rest.
// The generated export shims take one argument per flattened parameter.
#![allow(clippy::too_many_arguments)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use guest_common::{bounded, clip, file_error, resolve};

wit_bindgen::generate!({ path: "../../wit/text", world: "text" });

/// Longest line text returned; longer lines are cut with a note.
const MAX_LINE_CHARS: usize = 1000;
const MAX_LINES: u32 = 500;
const MAX_MATCHES: u32 = 500;
const MAX_CONTEXT: u32 = 10;

struct Text;

impl Guest for Text {
    fn count_lines(path: String) -> Result<LineCount, String> {
        let mut reader = open(&path)?;
        let mut buf = vec![0u8; 64 * 1024];
        let (mut lines, mut bytes, mut last) = (0u64, 0u64, b'\n');
        loop {
            let n = reader.read(&mut buf).map_err(|e| file_error(&path, &e))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
            last = buf[n - 1];
        }
        if last != b'\n' {
            lines += 1; // a final line without a newline still counts
        }
        Ok(LineCount { path, lines, bytes })
    }

    fn read_lines(
        path: String,
        start: Option<u32>,
        count: Option<u32>,
    ) -> Result<LinesPage, String> {
        let start = start.unwrap_or(1).max(1);
        let count = bounded(count, 100, MAX_LINES);
        let mut lines = Vec::new();
        let mut total = 0u32;
        for_each_line(&path, |number, text| {
            total = number;
            if number >= start && number < start.saturating_add(count) {
                lines.push(line(number, text));
            }
        })?;
        let last_returned = lines
            .last()
            .map(|l| l.number)
            .unwrap_or(start.saturating_sub(1));
        let next_start = (last_returned < total && !lines.is_empty()).then_some(last_returned + 1);
        let note = if start > total {
            Some(format!(
                "the file has only {total} lines; start at 1 to {total}"
            ))
        } else {
            next_start.map(|next| {
                format!(
                    "showing lines {start}-{last_returned} of {total}; call again with start={next} for more"
                )
            })
        };
        Ok(LinesPage {
            path,
            lines,
            total_lines: total,
            next_start,
            note,
        })
    }

    fn grep(
        path: String,
        pattern: String,
        ignore_case: Option<bool>,
        max_matches: Option<u32>,
        context: Option<u32>,
    ) -> Result<GrepResult, String> {
        let regex = regex::RegexBuilder::new(&pattern)
            .case_insensitive(ignore_case.unwrap_or(false))
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("`pattern` is not a valid regular expression: {e}"))?;
        let max = bounded(max_matches, 50, MAX_MATCHES) as usize;
        let context = context.unwrap_or(0).min(MAX_CONTEXT) as usize;

        let mut matches: Vec<GrepMatch> = Vec::new();
        let mut before: VecDeque<Line> = VecDeque::with_capacity(context + 1);
        // Matches still collecting their trailing context: (index, lines left).
        let mut pending_after: Vec<(usize, usize)> = Vec::new();
        let mut total = 0u32;
        for_each_line(&path, |number, text| {
            for (idx, left) in pending_after.iter_mut() {
                if *left > 0 {
                    matches[*idx].after.push(line(number, text));
                    *left -= 1;
                }
            }
            pending_after.retain(|(_, left)| *left > 0);
            if regex.is_match(text) {
                total += 1;
                if matches.len() < max {
                    matches.push(GrepMatch {
                        line: number,
                        text: clip(text, MAX_LINE_CHARS),
                        before: before.iter().cloned().collect(),
                        after: Vec::new(),
                    });
                    if context > 0 {
                        pending_after.push((matches.len() - 1, context));
                    }
                }
            }
            if context > 0 {
                if before.len() == context {
                    before.pop_front();
                }
                before.push_back(line(number, text));
            }
        })?;
        let truncated = total as usize > matches.len();
        let note = truncated.then(|| {
            format!(
                "{total} lines match; showing the first {}. Narrow the pattern, or raise max-matches (up to {MAX_MATCHES})",
                matches.len()
            )
        });
        Ok(GrepResult {
            path,
            matches,
            total_matches: total,
            truncated,
            note,
        })
    }

    fn tail(path: String, lines: Option<u32>) -> Result<TailResult, String> {
        let keep = bounded(lines, 20, MAX_LINES) as usize;
        let mut ring: VecDeque<Line> = VecDeque::with_capacity(keep);
        let mut total = 0;
        for_each_line(&path, |number, text| {
            total = number;
            if ring.len() == keep {
                ring.pop_front();
            }
            ring.push_back(line(number, text));
        })?;
        Ok(TailResult {
            path,
            lines: ring.into(),
            total_lines: total,
        })
    }
}

fn open(path: &str) -> Result<BufReader<File>, String> {
    let file = File::open(resolve(path)).map_err(|e| file_error(path, &e))?;
    Ok(BufReader::with_capacity(64 * 1024, file))
}

/// Calls `f(line_number, text)` for every line, without its line ending.
/// Invalid UTF-8 is replaced rather than failing the whole file.
fn for_each_line(path: &str, mut f: impl FnMut(u32, &str)) -> Result<(), String> {
    let mut reader = open(path)?;
    let mut buf = Vec::new();
    let mut number = 0u32;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| file_error(path, &e))?;
        if n == 0 {
            return Ok(());
        }
        number = number.saturating_add(1);
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        f(number, &String::from_utf8_lossy(&buf));
    }
}

fn line(number: u32, text: &str) -> Line {
    Line {
        number,
        text: clip(text, MAX_LINE_CHARS),
    }
}

export!(Text);
