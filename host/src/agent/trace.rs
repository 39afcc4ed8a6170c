//! The trace: one JSON line per event with `--trace`, live progress on
//! stderr, and the human table at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

/// One row of the summary table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepRow {
    pub step: usize,
    pub action: String,
    pub input: String,
    pub result: String,
    pub ms: f64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// Of `tokens_in`, those read from the provider's prompt cache.
    pub tokens_cached: u64,
}

/// The record of a run: one row per step, and optionally a JSON-lines
/// file and progress lines on stderr.
pub struct Trace {
    file: Option<BufWriter<File>>,
    started: Instant,
    pub(crate) rows: Vec<StepRow>,
    /// Live progress on stderr.
    progress: bool,
}

impl Trace {
    pub(crate) fn open(path: Option<&Path>, progress: bool) -> std::io::Result<Self> {
        // Traces carry prompts and tool results: private to the user.
        let file = path
            .map(|p| {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(p)
            })
            .transpose()?
            .map(BufWriter::new);
        Ok(Trace {
            file,
            started: Instant::now(),
            rows: Vec::new(),
            progress,
        })
    }

    /// Appends `{"t": seconds, "event": kind, …fields}`.
    pub(crate) fn event(&mut self, kind: &str, fields: Value) {
        let Some(file) = &mut self.file else { return };
        let mut line = json!({"t": (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0, "event": kind});
        if let (Some(obj), Value::Object(extra)) = (line.as_object_mut(), fields) {
            obj.extend(extra);
        }
        let _ = writeln!(file, "{line}");
        let _ = file.flush();
    }

    pub(crate) fn row(&mut self, row: StepRow) {
        if self.progress {
            eprintln!(
                "[step {}] {} {} → {} ({:.0} ms)",
                row.step,
                row.action,
                clip(&row.input, 60),
                clip(&row.result, 60),
                row.ms
            );
        }
        self.rows.push(row);
    }

    pub(crate) fn warn(&mut self, message: &str) {
        if self.progress {
            eprintln!("warning: {message}");
        }
        self.event("warning", json!({"message": message}));
    }

    /// The table a person reads at the end, with totals.
    pub fn table(&self) -> String {
        let header = [
            "step", "action", "input", "result", "ms", "tok in", "cached", "tok out",
        ];
        let mut rows: Vec<[String; 8]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.step.to_string(),
                    clip(&r.action, 28),
                    clip(&r.input, 36),
                    clip(&r.result, 36),
                    format!("{:.0}", r.ms),
                    r.tokens_in.to_string(),
                    r.tokens_cached.to_string(),
                    r.tokens_out.to_string(),
                ]
            })
            .collect();
        let total =
            |field: fn(&StepRow) -> u64| self.rows.iter().map(field).sum::<u64>().to_string();
        rows.push([
            "total".into(),
            format!("{} actions", self.rows.len()),
            String::new(),
            String::new(),
            format!("{:.0}", self.rows.iter().fold(0.0, |sum, r| sum + r.ms)),
            total(|r| r.tokens_in),
            total(|r| r.tokens_cached),
            total(|r| r.tokens_out),
        ]);
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let mut out = line(&header.map(String::from));
        out.push('\n');
        for row in &rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }
}

/// `text` on one line, at most `max` characters.
pub fn clip(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        None => flat,
        Some((cut, _)) => format!("{}…", &flat[..cut]),
    }
}
