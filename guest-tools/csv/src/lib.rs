//! Per-column CSV summaries: inferred type, nulls, distinct values,
//! min/max/mean, over a bounded number of rows.
// The generated export shims take one argument per flattened parameter.
#![allow(clippy::too_many_arguments)]

use std::collections::HashSet;

use guest_common::{bounded, file_error, resolve};

wit_bindgen::generate!({ path: "../../wit/csv", world: "csv" });

const MAX_ROWS: u32 = 1_000_000;
/// Distinct values remembered per column before counting stops.
const DISTINCT_CAP: usize = 10_000;
const MAX_COLUMNS: usize = 200;

struct Csv;

#[derive(Default)]
struct Column {
    name: String,
    nulls: u64,
    distinct: HashSet<String>,
    distinct_capped: bool,
    ints: u64,
    floats: u64,
    bools: u64,
    texts: u64,
    sum: f64,
    min_num: Option<f64>,
    max_num: Option<f64>,
    min_text: Option<String>,
    max_text: Option<String>,
}

impl Column {
    fn add(&mut self, raw: &str) {
        let value = raw.trim();
        if value.is_empty()
            || matches!(
                value.to_ascii_lowercase().as_str(),
                "null" | "na" | "n/a" | "nan" | "-"
            )
        {
            self.nulls += 1;
            return;
        }
        if self.distinct.len() < DISTINCT_CAP {
            self.distinct.insert(value.to_string());
        } else if !self.distinct.contains(value) {
            self.distinct_capped = true;
        }
        if value.parse::<i64>().is_ok() {
            self.ints += 1;
            self.number(value.parse::<f64>().unwrap_or(0.0));
        } else if let Ok(f) = value.parse::<f64>() {
            self.floats += 1;
            self.number(f);
        } else if matches!(
            value.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no"
        ) {
            self.bools += 1;
        } else {
            self.texts += 1;
        }
        if self.min_text.as_deref().is_none_or(|m| value < m) {
            self.min_text = Some(value.to_string());
        }
        if self.max_text.as_deref().is_none_or(|m| value > m) {
            self.max_text = Some(value.to_string());
        }
    }

    fn number(&mut self, f: f64) {
        self.sum += f;
        self.min_num = Some(self.min_num.map_or(f, |m| m.min(f)));
        self.max_num = Some(self.max_num.map_or(f, |m| m.max(f)));
    }

    fn summary(self) -> ColumnSummary {
        let values = self.ints + self.floats + self.bools + self.texts;
        let numeric = self.ints + self.floats;
        let inferred = if values == 0 {
            ColumnType::Empty
        } else if self.ints == values {
            ColumnType::Integer
        } else if numeric == values {
            ColumnType::Float
        } else if self.bools == values {
            ColumnType::Boolean
        } else {
            ColumnType::Text
        };
        let is_numeric = matches!(inferred, ColumnType::Integer | ColumnType::Float);
        let (min, max) = if is_numeric {
            (self.min_num.map(fmt_num), self.max_num.map(fmt_num))
        } else {
            (self.min_text, self.max_text)
        };
        ColumnSummary {
            name: self.name,
            inferred_type: inferred,
            nulls: self.nulls,
            distinct: self.distinct.len() as u64,
            distinct_capped: self.distinct_capped,
            min,
            max,
            mean: is_numeric.then(|| self.sum / numeric as f64),
        }
    }
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

impl Guest for Csv {
    fn summarize(
        path: String,
        delimiter: Option<char>,
        max_rows: Option<u32>,
    ) -> Result<Summary, String> {
        let delimiter = match delimiter {
            None => b',',
            Some(c) if c.is_ascii() => c as u8,
            Some(c) => return Err(format!("`delimiter` must be an ASCII character; got {c:?}")),
        };
        let max_rows = bounded(max_rows, 100_000, MAX_ROWS) as u64;
        let file = std::fs::File::open(resolve(&path)).map_err(|e| file_error(&path, &e))?;
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .flexible(true)
            .from_reader(std::io::BufReader::new(file));
        let headers = reader
            .headers()
            .map_err(|e| format!("cannot read the header row of `{path}`: {e}"))?
            .clone();
        if headers.len() > MAX_COLUMNS {
            return Err(format!(
                "`{path}` has {} columns; at most {MAX_COLUMNS} are summarized. Is the delimiter right?",
                headers.len()
            ));
        }
        let mut columns: Vec<Column> = headers
            .iter()
            .map(|h| Column {
                name: h.to_string(),
                ..Column::default()
            })
            .collect();
        let (mut rows, mut truncated, mut ragged) = (0u64, false, 0u64);
        let mut record = csv::StringRecord::new();
        loop {
            match reader.read_record(&mut record) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => return Err(format!("`{path}` is not valid CSV after row {rows}: {e}")),
            }
            if rows == max_rows {
                truncated = true;
                break;
            }
            rows += 1;
            if record.len() != columns.len() {
                ragged += 1;
            }
            for (column, field) in columns.iter_mut().zip(record.iter()) {
                column.add(field);
            }
        }
        let mut notes = Vec::new();
        if truncated {
            notes.push(format!("scanned the first {max_rows} rows only; raise max-rows (up to {MAX_ROWS}) to scan more"));
        }
        if ragged > 0 {
            notes.push(format!(
                "{ragged} rows have a different number of fields than the header"
            ));
        }
        Ok(Summary {
            path,
            rows_scanned: rows,
            truncated,
            columns: columns.into_iter().map(Column::summary).collect(),
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        })
    }
}

export!(Csv);
