//! The trace: one JSON line per event with `--trace`, live progress on
//! stderr, and the human table at the end.
//!
//! The file's first line names its format and version (docs/agent.md
//! documents both). Each model reply is recorded whole, and each tool
//! result as the model read it, so `skillbox agent --replay` can feed the
//! replies back and compare the results.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use super::conversation::ToolCall;
use super::provider::{ModelResponse, TokenUsage};

/// The name in every trace's first line.
pub(crate) const FORMAT: &str = "skillbox-agent-trace";
/// The version of the events' fields. A change that a reader of the old
/// fields would misread raises it.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// One tool call as the model read its result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolRecord {
    /// The step of the run.
    pub step: usize,
    /// The tool.
    pub name: String,
    /// Its arguments, as the model wrote them.
    pub arguments: String,
    /// Its result, as the model read it.
    pub result: String,
    /// Whether the call failed.
    pub is_error: bool,
}

/// One row of the summary table.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct StepRow {
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
    /// Every tool call's result, in order, for a replay to compare.
    pub(crate) tool_results: Vec<ToolRecord>,
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
        let mut trace = Trace {
            file,
            started: Instant::now(),
            rows: Vec::new(),
            tool_results: Vec::new(),
            progress,
        };
        trace.event(
            "trace",
            json!({"format": FORMAT, "version": FORMAT_VERSION, "skillbox": env!("CARGO_PKG_VERSION")}),
        );
        Ok(trace)
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

    /// Every tool call of the run with its result, in order.
    pub fn tool_results(&self) -> &[ToolRecord] {
        &self.tool_results
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

/// A model reply as the trace records it, whole.
pub(crate) fn reply_record(response: &ModelResponse) -> Value {
    json!({
        "text": response.text,
        "tool_calls": response.tool_calls.iter()
            .map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments}))
            .collect::<Vec<_>>(),
        "usage": response.usage,
        "stop_reason": response.stop_reason,
    })
}

/// A recorded reply read back; `None` when the record is not one.
pub(crate) fn reply_from_record(record: &Value) -> Option<ModelResponse> {
    let calls = record["tool_calls"].as_array()?;
    let mut tool_calls = Vec::with_capacity(calls.len());
    for call in calls {
        tool_calls.push(ToolCall {
            id: call["id"].as_str()?.to_string(),
            name: call["name"].as_str()?.to_string(),
            arguments: call["arguments"].as_str()?.to_string(),
        });
    }
    let count = |key: &str| record["usage"][key].as_u64().unwrap_or(0);
    let mut response = ModelResponse::calling(tool_calls).with_usage(
        TokenUsage::new(count("input"), count("output"))
            .with_cache(count("cache_read"), count("cache_write")),
    );
    response.text = record["text"].as_str().map(String::from);
    response.stop_reason = record["stop_reason"].as_str().map(String::from);
    Some(response)
}

pub(crate) use crate::text::clip;
