//! Logs on stderr, and, when an OTLP endpoint is configured, the calls'
//! spans exported to it.
//!
//! The standard OpenTelemetry variables configure the export:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! turns it on, `OTEL_EXPORTER_OTLP_PROTOCOL` picks `http/protobuf` (the
//! default) or `http/json`, and `OTEL_EXPORTER_OTLP_HEADERS` adds headers.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Sets up logging (`SKILLBOX_LOG`, default `warn`) and, if configured,
/// span export. A misconfigured export is reported and left off; it never
/// stops the command.
pub(super) fn init() {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_env("SKILLBOX_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let logs = fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour codes only for a person at a terminal, never in a file.
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(RoutineDisconnects {
            shown: std::env::var("SKILLBOX_LOG")
                .is_ok_and(|v| v.contains("debug") || v.contains("trace")),
        })
        .with_filter(filter);
    let spans = exporter().map(|provider| {
        let tracer = provider.tracer("skillbox");
        let _ = PROVIDER.set(provider);
        // Only the host's own spans: not every dependency's.
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(EnvFilter::new("skillbox=info").add_directive(LevelFilter::OFF.into()))
    });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
}

/// Keeps what a client's ordinary goodbye makes the MCP library log as an
/// error (a reply it could not send to a client that had gone) out of the
/// log, unless the user asked for debug logs (`SKILLBOX_LOG=debug`).
struct RoutineDisconnects {
    shown: bool,
}

/// Events the MCP library logs as errors that are a client leaving.
const ROUTINE: &[&str] = &[
    "failed to send pending response during drain",
    "fail to response message",
];

impl<S> tracing_subscriber::layer::Filter<S> for RoutineDisconnects {
    fn enabled(
        &self,
        _meta: &tracing::Metadata<'_>,
        _ctx: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        true
    }

    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _ctx: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        if self.shown || !event.metadata().target().starts_with("rmcp") {
            return true;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        !ROUTINE.contains(&message.0.as_str())
    }
}

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

fn exporter() -> Option<SdkTracerProvider> {
    let configured = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
    if !configured {
        return None;
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build();
    let exporter = match exporter {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!(
                "warning: OTLP span export is off: {e}; check OTEL_EXPORTER_OTLP_ENDPOINT and \
                 OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf or http/json)"
            );
            return None;
        }
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("skillbox")
        .build();
    Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    )
}

/// Sends the spans still batched; for the end of the process.
pub(super) fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown();
    }
}
