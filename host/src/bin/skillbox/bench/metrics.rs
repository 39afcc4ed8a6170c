//! What the metrics cost: counting one call (done on every call, where it
//! is audited) and rendering a scrape of a server with many tools.

use std::time::{Duration, Instant};

use skillbox_call::audit::Record;
use skillbox_call::metrics::Metrics;

use super::Stats;

/// Calls counted per sample, so one sample is long enough to time.
const BATCH: u32 = 1_000;
/// Tools (each with two outcomes) a rendered scrape holds.
const TOOLS: usize = 50;

pub(super) struct MetricsCost {
    /// One call counted (per call, from batches).
    pub observe: Stats,
    /// One scrape rendered with [`TOOLS`] tools' series.
    pub render: Stats,
}

pub(super) fn run(iterations: usize) -> MetricsCost {
    let metrics = Metrics::new();
    let mut record = record("bench__noop");
    let mut observe = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        for _ in 0..BATCH {
            metrics.observe(&record, true);
        }
        observe.push(start.elapsed() / BATCH);
    }
    for n in 0..TOOLS {
        record.tool = format!("bench__tool-{n}");
        metrics.observe(&record, true);
        record.outcome = "timeout".into();
        metrics.observe(&record, true);
        metrics.sandbox_error("timeout");
        record.outcome = "ok".into();
    }
    let mut render = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        std::hint::black_box(metrics.render(1, 1));
        render.push(start.elapsed());
    }
    MetricsCost {
        observe: Stats::of(observe),
        render: Stats::of(render),
    }
}

fn record(tool: &str) -> Record {
    Record {
        workspace: None,
        time: String::new(),
        client: Some("bench 1".into()),
        tool: tool.into(),
        skill: Some("bench".into()),
        source: Some("explicit".into()),
        component: Some("tools/bench.wasm".into()),
        component_digest: None,
        skill_resolved: None,
        skill_signer: None,
        grants: None,
        argument_bytes: 2,
        code_digest: None,
        code_bytes: None,
        exit_code: None,
        outcome: "ok".into(),
        duration_ms: 0.4,
        fuel: Some(17),
        idempotency_key: None,
        trace_id: None,
        parent_span_id: None,
        network: Vec::new(),
        programs: Vec::new(),
    }
}

/// The share of `whole` that `part` is, as a percentage.
pub(super) fn share(part: Duration, whole: Duration) -> f64 {
    100.0 * part.as_secs_f64() / whole.as_secs_f64().max(1e-12)
}
