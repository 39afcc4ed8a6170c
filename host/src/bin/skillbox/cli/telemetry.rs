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
pub fn init() {
    let filter = EnvFilter::try_from_env("SKILLBOX_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let logs = fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
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
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown();
    }
}
