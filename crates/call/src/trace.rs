//! W3C trace context (`traceparent`), so a call that arrives as part of a
//! distributed trace is recorded under that trace: in the host's span and
//! in the audit line.
//!
//! A `traceparent` is client input. It is parsed strictly (the version-00
//! form: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not all zero) and
//! anything else is ignored, so a client cannot put arbitrary text into
//! the audit log or the logs through it.

use serde::Serialize;

/// The `_meta` key of the 2026-07-28 convention for trace context.
pub const TRACEPARENT_META_KEY: &str = "traceparent";

/// The trace a call belongs to, and the caller's span in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceContext {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// The caller's span: 16 lowercase hex digits.
    pub parent_id: String,
    /// Whether the caller sampled this trace.
    pub sampled: bool,
}

impl TraceContext {
    /// Parses a version-00 `traceparent`; `None` for anything else.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" {
            return None;
        }
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let zero = |s: &str| s.bytes().all(|b| b == b'0');
        if !hex(trace_id, 32) || !hex(parent_id, 16) || !hex(flags, 2) {
            return None;
        }
        if zero(trace_id) || zero(parent_id) {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(TraceContext {
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            sampled: flags & 1 == 1,
        })
    }
}

#[cfg(feature = "otlp")]
impl TraceContext {
    /// Makes the caller's span the OpenTelemetry parent of `span`, so an
    /// exported trace shows the call inside the caller's trace.
    pub(crate) fn continue_in(&self, span: &tracing::Span) {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(&self.trace_id),
            SpanId::from_hex(&self.parent_id),
        ) else {
            return;
        };
        let flags = if self.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let remote = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
}

#[cfg(test)]
mod tests {
    use super::TraceContext;

    #[test]
    fn a_valid_traceparent_parses() {
        let t =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id, "00f067aa0ba902b7");
        assert!(t.sampled);
    }

    #[test]
    fn anything_else_is_ignored() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e473\n-00f067aa0ba902b7-01",
            "00-\"},\"outcome\":\"ok-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }
}
