//! Reloading the catalog when skill folders change: the sources'
//! fingerprint (`skill/fingerprint.rs`) is polled, and a change rebuilds
//! the catalog and tells every client.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::server::Shared;
use crate::skill::fingerprint::fingerprint;

/// Watches the sources and reloads on change. `baseline` is the
/// fingerprint taken before the host built its catalog, so a change made
/// while the server starts is not missed.
pub(crate) async fn watch(server: Arc<Shared>, interval: Duration, baseline: u64) {
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
