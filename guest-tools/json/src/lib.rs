//! jq filters (via the jaq crates) over a JSON file or string, with
//! bounded output.
// The generated export shims take one argument per flattened parameter.
#![allow(clippy::too_many_arguments)]

use std::io::Read;

use guest_common::{bounded, clip, file_error, resolve};
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;

wit_bindgen::generate!({ path: "../../wit/json", world: "json" });

const MAX_RESULTS: u32 = 1000;
/// Input documents above this are refused: the guest's memory is capped.
const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;
/// Total characters of results returned in one call.
const MAX_OUTPUT_CHARS: usize = 512 * 1024;
const MAX_RESULT_CHARS: usize = 64 * 1024;

struct Json;

impl Guest for Json {
    fn query(
        filter: String,
        path: Option<String>,
        input: Option<String>,
        max_results: Option<u32>,
    ) -> Result<QueryResult, String> {
        let text = match (path, input) {
            (Some(path), None) => read_bounded(&path)?,
            (None, Some(input)) => input.into_bytes(),
            _ => {
                return Err(
                    "pass exactly one of `path` (a JSON file) or `input` (JSON text)".into(),
                );
            }
        };
        let document = jaq_json::read::parse_single(&text)
            .map_err(|e| format!("the input is not valid JSON: {e}"))?;
        let max = bounded(max_results, 100, MAX_RESULTS) as usize;

        let program = File {
            code: filter.as_str(),
            path: (),
        };
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs());
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(&arena, program)
            .map_err(|errs| format!("`filter` is not a valid jq filter: {}", describe(&errs)))?;
        let compiled = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errs| format!("`filter` does not compile: {}", describe(&errs)))?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&compiled.lut, Vars::new([]));

        let mut results = Vec::new();
        let (mut total, mut chars, mut cut_by_size) = (0u32, 0usize, false);
        for out in compiled.id.run((ctx, document)).map(unwrap_valr) {
            let value = out.map_err(|e| format!("the filter failed: {e}"))?;
            total += 1;
            if results.len() >= max || cut_by_size {
                continue;
            }
            let text = clip(&value.to_string(), MAX_RESULT_CHARS);
            if chars + text.len() > MAX_OUTPUT_CHARS {
                cut_by_size = true;
                continue;
            }
            chars += text.len();
            results.push(text);
        }
        let truncated = (total as usize) > results.len();
        let note = truncated.then(|| {
            format!(
                "the filter produced {total} results; returned {}. Narrow the filter (select, limit, paths) or raise max-results (up to {MAX_RESULTS})",
                results.len()
            )
        });
        Ok(QueryResult {
            results,
            total,
            truncated,
            note,
        })
    }
}

fn read_bounded(path: &str) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(resolve(path)).map_err(|e| file_error(path, &e))?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| file_error(path, &e))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "`{path}` is larger than {} MiB; query a smaller file or extract part of it first",
            MAX_INPUT_BYTES >> 20
        ));
    }
    Ok(bytes)
}

fn describe(errors: &impl std::fmt::Debug) -> String {
    clip(&format!("{errors:?}"), 400)
}

export!(Json);
