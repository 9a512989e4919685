//! The bridge to OpenTelemetry through `tracing-opentelemetry`: what a push captures from the
//! current span, and how a job's span continues it.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{TraceContext, TraceParent};

/// The context of the current span, if it belongs to a valid OpenTelemetry trace.
pub(super) fn current() -> Option<TraceContext> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span = span.span_context();
    if !span.is_valid() {
        return None;
    }
    let parent = TraceParent::new(
        span.trace_id().to_bytes(),
        span.span_id().to_bytes(),
        span.trace_flags().to_u8(),
    )?;
    let state = span.trace_state().header();
    TraceContext::new(&parent.to_string(), Some(&state)).ok()
}

/// Makes `span` a child of the span `context` names, and links it there too: the parent puts
/// the run in the request's trace; the link survives where a backend splits long traces.
pub(super) fn continue_in(context: &TraceContext, span: &tracing::Span) {
    let Some(parent) = context.parent() else {
        tracing::debug!(
            traceparent = context.traceparent(),
            "the job's traceparent is not W3C Trace Context; not continued"
        );
        return;
    };
    // A state that does not parse is dropped; the parent alone still continues the trace.
    let state = context
        .tracestate()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    let remote = SpanContext::new(
        TraceId::from_bytes(parent.trace_id()),
        SpanId::from_bytes(parent.span_id()),
        TraceFlags::new(parent.flags()),
        true,
        state,
    );
    // Fails only without an OpenTelemetry layer, where there is nothing to continue.
    let _ = span.set_parent(Context::new().with_remote_span_context(remote.clone()));
    span.add_link_with_attributes(remote, vec![KeyValue::new("redefer.link", "deferred_by")]);
}
