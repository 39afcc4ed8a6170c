//! A cheap fingerprint of the skill sources: path, size and modification
//! time of every file below each root. Polling it works the same on every
//! filesystem, network and container mounts included, where change
//! notification is unreliable. It lives only in memory, so the standard
//! library's hasher is fine.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;

use super::SourceOptions;

/// A hash of every file's path, size and modification time below the roots.
pub fn fingerprint(roots: &[&Path]) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut budget = crate::skill::discover::Limits::default().max_entries;
    for root in roots {
        root.hash(&mut hasher);
        walk(root, 0, &mut hasher, &mut budget);
    }
    hasher.finish()
}

fn walk(dir: &Path, depth: usize, hasher: &mut DefaultHasher, budget: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if *budget == 0 || depth > 8 {
            return;
        }
        *budget -= 1;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        // What is never a skill's file cannot change a skill (fileset.rs).
        if text.starts_with('.') || super::fileset::BUILD_OUTPUTS.contains(&text.as_ref()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        name.hash(hasher);
        meta.len().hash(hasher);
        meta.modified().ok().hash(hasher);
        if meta.is_dir() {
            walk(&entry.path(), depth + 1, hasher, budget);
        }
    }
}

/// The fingerprint of every source folder `options` names.
pub fn fingerprint_sources(options: &SourceOptions) -> u64 {
    let sources = options.sources();
    let roots: Vec<&Path> = sources.iter().map(|s| s.root.as_path()).collect();
    fingerprint(&roots)
}
