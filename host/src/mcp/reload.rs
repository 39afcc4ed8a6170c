//! Reloading the catalog when skill folders change.
//!
//! Polling a cheap fingerprint (path, size and modification time of every
//! file below each source) works the same on every filesystem, network and
//! container mounts included, where change notification is unreliable.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::server::Shared;
use crate::skill::SourceOptions;

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
        if name.to_string_lossy().starts_with('.') || name == "target" || name == "node_modules" {
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

/// Watches the sources and reloads on change. `baseline` is the
/// fingerprint taken before the host built its catalog, so a change made
/// while the server starts is not missed.
pub async fn watch(server: Arc<Shared>, interval: Duration, baseline: u64) {
    let host = server.host.clone();
    let roots: Arc<Vec<std::path::PathBuf>> = Arc::new(
        host.options
            .sources
            .sources()
            .into_iter()
            .map(|s| s.root)
            .collect(),
    );
    let mut last = baseline;
    loop {
        tokio::time::sleep(interval).await;
        // Walking the folders blocks; it runs beside the runtime.
        let walk_roots = roots.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || {
            let roots: Vec<&Path> = walk_roots.iter().map(|p| p.as_path()).collect();
            fingerprint(&roots)
        })
        .await
        else {
            continue;
        };
        if now == last {
            continue;
        }
        last = now;
        let before: Vec<String> = host
            .catalog()
            .skills()
            .map(|s| format!("{}@{}", s.name(), s.digest))
            .collect();
        let catalog = host.reload_blocking().await;
        let after: Vec<String> = catalog
            .skills()
            .map(|s| format!("{}@{}", s.name(), s.digest))
            .collect();
        for d in catalog.diagnostics().iter().filter(|d| d.is_error()) {
            tracing::warn!("reload: {d}");
        }
        tracing::info!("skills changed; reloaded {} skills", catalog.len());
        if before != after || !catalog.diagnostics().is_empty() {
            server.broadcast_list_changed().await;
        }
    }
}
