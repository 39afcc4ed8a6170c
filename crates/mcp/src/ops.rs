//! Operations endpoints beside `/mcp`, for load balancers, orchestrators
//! and Prometheus:
//!
//! - `/healthz`: the process serves HTTP (liveness). No authentication.
//! - `/readyz`: the catalog is loaded and every component is compiled or
//!   loaded from the cache, and the server is not draining (readiness).
//!   No authentication; the body holds counts, never names or paths.
//! - `/metrics`: the Prometheus text format, behind the same
//!   authentication as `/mcp` (it names the tools).
//!
//! The drain on shutdown (readiness turns false, new connections are
//! refused, and requests in flight get a grace period to finish) keeps
//! its state in `lifecycle.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;

use super::lifecycle::Phase;
use super::server::Shared;

/// Loads every skill's components once, from the cache where it has
/// them, then marks the server ready. Runs once per server.
pub(crate) async fn warm_up(shared: Arc<Shared>) {
    let host = shared.host.clone();
    let skills: Vec<_> = host.catalog().skills().cloned().collect();
    let failed_to_compile = host.compiled(&skills).await;
    let failed = skills
        .iter()
        .map(|s| host.problems_of(s.name()).len())
        .sum::<usize>()
        .max(failed_to_compile);
    shared.readiness.warmed(failed);
}

/// `/healthz` and `/readyz`: public, and saying nothing sensitive.
pub(crate) fn probes(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route(
            "/healthz",
            axum::routing::get(|| async {
                json_response(StatusCode::OK, &json!({"status": "alive"}))
            }),
        )
        .route(
            "/readyz",
            axum::routing::get(move || {
                let shared = shared.clone();
                async move { readyz(&shared) }
            }),
        )
}

fn readyz(shared: &Shared) -> axum::response::Response {
    let (from_cache, compiled) = shared.host.sandbox.load_counts();
    let phase = shared.readiness.phase();
    let mut body = json!({
        "status": match phase {
            Phase::Ready => "ready",
            Phase::Draining => "draining",
            Phase::Warming => "warming",
        },
        "skills": shared.host.catalog().len(),
        "components": {
            "from_cache": from_cache,
            "compiled_here": compiled,
            "failed": shared.readiness.failed(),
        },
    });
    let state_reachable = shared.readiness.state_reachable();
    if shared.state.is_shared() {
        body["state"] = json!({"store": shared.state.kind(), "reachable": state_reachable});
    }
    if !state_reachable {
        body["status"] = json!("state store unreachable");
        body["hint"] = json!(
            "the shared state store (--state) does not answer: approvals cannot be checked \
             across replicas, so this replica takes no traffic until it does; check that \
             Redis is up and reachable from here"
        );
    } else if phase == Phase::Warming {
        body["hint"] = json!(
            "loading the skills' components; a replica whose compiled-code cache was filled \
             with `skillbox compile` is ready in moments, one that compiles takes longer"
        );
    } else if compiled > 0 {
        body["hint"] = json!(format!(
            "this replica compiled {compiled} component(s) itself; fill the shared cache with \
             `skillbox compile SKILLS_DIR --cache DIR` so new replicas start without compiling"
        ));
    }
    let status = if phase == Phase::Ready && state_reachable {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &body)
}

/// Keeps `/readyz` told whether the shared state store answers, and the
/// sealing key agreed with the other replicas, asking it every second; a
/// store this process keeps always answers.
pub(crate) async fn watch_state(shared: Arc<Shared>) {
    if !shared.state.is_shared() {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let reachable = shared.state.refresh().await;
        if shared.readiness.set_state_reachable(reachable) {
            if reachable {
                tracing::info!("the shared state store answers again; ready");
            } else {
                tracing::warn!("the shared state store does not answer; not ready until it does");
            }
        }
    }
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `/metrics`, for behind the same authentication as `/mcp`.
pub(crate) fn metrics(
    shared: Arc<Shared>,
    open_sessions: Arc<super::http_guard::CappedSessions>,
) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (shared, open_sessions) = (shared.clone(), open_sessions.clone());
            async move {
                shared.host.metrics.set_sessions(open_sessions.open().await);
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    shared.host.metrics_text(),
                )
            }
        }),
    )
}
