//! Prometheus metrics of the call path: what ran, how it ended, what it
//! cost. Every call is counted where it is audited ([`Host::record`]), so
//! the metrics and the audit log cannot disagree.
//!
//! Labels come from bounded sets only: a tool label is a tool the catalog
//! resolved (or a host tool), never a name a client made up, so a client
//! cannot grow the scrape without bound by calling names that do not exist.
//!
//! [`Host::record`]: super::Host::record

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

use super::audit::Record;

/// The tool label of a call whose tool did not resolve.
pub(crate) const UNRESOLVED_TOOL: &str = "(unresolved)";

/// Latency buckets, in seconds: a warm call takes under a millisecond, a
/// long one up to the scripts' default limit.
const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// The host's metrics, in a registry of their own (not the process-global
/// one), so two hosts in one process count apart.
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    duration: HistogramVec,
    fuel: IntCounterVec,
    sandbox_errors: IntCounterVec,
    active_calls: IntGauge,
    waiting_calls: IntGauge,
    sessions: IntGauge,
    cache: IntCounterVec,
    egress_bytes: IntCounter,
    egress_requests: IntCounterVec,
    workspace: IntCounterVec,
    /// Serialises bringing the cache counters up to date, so two scrapes
    /// at once do not both add the same difference.
    cache_sync: std::sync::Mutex<()>,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            registry.register(Box::new(g.clone())).expect("unique");
            g
        };
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "skillbox_call_duration_seconds",
                "Wall-clock time of tool calls and script runs, refusals included.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["tool"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(duration.clone()))
            .expect("unique");
        let egress_bytes = IntCounter::new(
            "skillbox_egress_bytes_total",
            "Response bytes guests received over granted network access.",
        )
        .expect("valid metric");
        registry
            .register(Box::new(egress_bytes.clone()))
            .expect("unique");
        Metrics {
            calls: counter(
                "skillbox_calls_total",
                "Tool calls and script runs by tool and outcome (ok; nonzero_exit for a script that exited with another code; or the error's code).",
                &["tool", "outcome"],
            ),
            duration,
            fuel: counter(
                "skillbox_fuel_consumed_total",
                "WebAssembly fuel (instructions, roughly) that successful calls used.",
                &["tool"],
            ),
            sandbox_errors: counter(
                "skillbox_sandbox_errors_total",
                "Calls the sandbox ended with an error, by kind (timeout, out_of_fuel, ...).",
                &["kind"],
            ),
            active_calls: gauge(
                "skillbox_active_calls",
                "Calls holding a call slot right now.",
            ),
            waiting_calls: gauge(
                "skillbox_waiting_calls",
                "Calls waiting for a call slot right now (--max-concurrency, or one client's share).",
            ),
            sessions: gauge(
                "skillbox_sessions",
                "Open MCP sessions (2025-11-25 clients over HTTP; stateless requests open none).",
            ),
            cache: counter(
                "skillbox_compile_cache_total",
                "Components loaded from the compiled-code cache (hit) or compiled (miss).",
                &["result"],
            ),
            egress_bytes,
            egress_requests: counter(
                "skillbox_egress_requests_total",
                "Guests' outgoing HTTP requests by outcome (ok, denied, ...).",
                &["outcome"],
            ),
            workspace: counter(
                "skillbox_workspace_transactions_total",
                "Write-granted calls by what became of their workspace changes (committed, \
                 discarded, conflicted, dry-run, declined).",
                &["outcome"],
            ),
            registry,
            cache_sync: std::sync::Mutex::new(()),
        }
    }

    /// Counts a finished call. `tool_resolved` says whether the record's
    /// tool name is one of the catalog's (or a host tool).
    pub fn observe(&self, record: &Record, tool_resolved: bool) {
        let tool = if tool_resolved {
            record.tool.as_str()
        } else {
            UNRESOLVED_TOOL
        };
        self.calls.with_label_values(&[tool, &record.outcome]).inc();
        self.duration
            .with_label_values(&[tool])
            .observe(record.duration_ms / 1000.0);
        if let Some(fuel) = record.fuel {
            self.fuel.with_label_values(&[tool]).inc_by(fuel);
        }
        for request in &record.network {
            self.egress_requests
                .with_label_values(&[&request.outcome])
                .inc();
            self.egress_bytes.inc_by(request.bytes);
        }
        if let Some(workspace) = &record.workspace {
            self.workspace.with_label_values(&[workspace.outcome]).inc();
        }
    }

    /// Counts a call the sandbox ended with an error of kind `code`.
    pub fn sandbox_error(&self, code: &str) {
        self.sandbox_errors.with_label_values(&[code]).inc();
    }

    /// Marks a call as holding a slot until the guard drops.
    pub fn active_call(&self) -> Counted {
        Counted::in_gauge(&self.active_calls)
    }

    /// Marks a call as waiting for a slot until the guard drops.
    pub fn waiting_call(&self) -> Counted {
        Counted::in_gauge(&self.waiting_calls)
    }

    /// Sets the open-sessions gauge (the HTTP layer knows the number).
    pub fn set_sessions(&self, open: usize) {
        self.sessions.set(open as i64);
    }

    /// Renders the Prometheus text format, with the compiled-code cache's
    /// running totals (`hits`, `misses`) brought up to date first.
    pub fn render(&self, hits: u64, misses: u64) -> String {
        {
            let _sync = self.cache_sync.lock().unwrap_or_else(|e| e.into_inner());
            for (label, total) in [("hit", hits), ("miss", misses)] {
                let counter = self.cache.with_label_values(&[label]);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A call counted in a gauge (`skillbox_active_calls`,
/// `skillbox_waiting_calls`) while this lives.
pub struct Counted(IntGauge);

impl Counted {
    fn in_gauge(gauge: &IntGauge) -> Self {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}
