//! Folder listings with filters: a listing without filters floods the
//! model's context, so glob, date, depth and count filters are built in.
// The generated export shims take one argument per flattened parameter.
#![allow(clippy::too_many_arguments)]

use std::fs;
use std::time::UNIX_EPOCH;

use globset::{Glob, GlobMatcher};
use guest_common::time::{format_rfc3339, parse_rfc3339};
use guest_common::{bounded, file_error, resolve};

wit_bindgen::generate!({ path: "../../wit/files", world: "files" });

const MAX_ENTRIES: u32 = 1000;
const MAX_DEPTH: u32 = 16;
/// Entries examined before the walk gives up, however few match.
const WALK_BUDGET: usize = 100_000;

struct Files;

struct Filters {
    glob: Option<(GlobMatcher, bool)>,
    modified_after: Option<i64>,
    max_depth: u32,
}

impl Guest for Files {
    fn list(
        path: Option<String>,
        glob: Option<String>,
        modified_after: Option<String>,
        max_entries: Option<u32>,
        max_depth: Option<u32>,
    ) -> Result<Listing, String> {
        let root = path.unwrap_or_else(|| ".".to_string());
        let glob = glob
            .map(|g| {
                let matcher = Glob::new(&g)
                    .map_err(|e| format!("`glob` is not a valid pattern: {e}"))?
                    .compile_matcher();
                // A pattern without `/` (such as `*.log`) matches names at any depth.
                Ok::<_, String>((matcher, !g.contains('/')))
            })
            .transpose()?;
        let filters = Filters {
            glob,
            modified_after: modified_after.as_deref().map(parse_rfc3339).transpose()?,
            max_depth: bounded(max_depth, 4, MAX_DEPTH),
        };
        let max = bounded(max_entries, 200, MAX_ENTRIES) as usize;

        let mut matched = Vec::new();
        let mut examined = 0usize;
        walk(
            &resolve(&root),
            "",
            1,
            &filters,
            &mut matched,
            &mut examined,
        )
        .map_err(|e| file_error(&root, &e))?;
        matched.sort_by(|a: &Entry, b| a.path.cmp(&b.path));
        let total = matched.len();
        matched.truncate(max);
        let budget_hit = examined >= WALK_BUDGET;
        let truncated = total > max || budget_hit;
        let note = match (total > max, budget_hit) {
            (_, true) => Some(format!(
                "stopped after examining {WALK_BUDGET} entries; list a subfolder or lower max-depth"
            )),
            (true, false) => Some(format!(
                "{total} entries match; showing the first {max} by path. Narrow with glob or modified-after, or raise max-entries (up to {MAX_ENTRIES})"
            )),
            _ => None,
        };
        Ok(Listing {
            root,
            entries: matched,
            total_matched: total as u32,
            truncated,
            note,
        })
    }
}

fn walk(
    dir: &str,
    prefix: &str,
    depth: u32,
    filters: &Filters,
    out: &mut Vec<Entry>,
    examined: &mut usize,
) -> std::io::Result<()> {
    let mut children: Vec<_> = fs::read_dir(dir)?.filter_map(Result::ok).collect();
    children.sort_by_key(|e| e.file_name());
    for child in children {
        if *examined >= WALK_BUDGET {
            return Ok(());
        }
        *examined += 1;
        let name = child.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        // symlink_metadata: a link is reported as a link, never followed.
        let Ok(meta) = fs::symlink_metadata(child.path()) else {
            continue;
        };
        let kind = if meta.is_symlink() {
            EntryKind::Symlink
        } else if meta.is_dir() {
            EntryKind::Dir
        } else if meta.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64);
        if keep(filters, &rel, &name, modified) {
            out.push(Entry {
                path: rel.clone(),
                kind,
                size: meta.len(),
                modified: modified.map(format_rfc3339),
            });
        }
        if kind == EntryKind::Dir && depth < filters.max_depth {
            let _ = walk(
                &format!("{dir}/{name}"),
                &rel,
                depth + 1,
                filters,
                out,
                examined,
            );
        }
    }
    Ok(())
}

fn keep(filters: &Filters, rel: &str, name: &str, modified: Option<i64>) -> bool {
    if let Some((glob, by_name)) = &filters.glob {
        let hit = glob.is_match(rel) || (*by_name && glob.is_match(name));
        if !hit {
            return false;
        }
    }
    match (filters.modified_after, modified) {
        (Some(after), Some(m)) => m > after,
        (Some(_), None) => false,
        (None, _) => true,
    }
}

export!(Files);
