//! Trace context across a deferral: the W3C [Trace Context] of the request that stored a job,
//! kept in the job's envelope, so that the job's run continues the request's trace.
//!
//! A job is pushed while a request is traced; its envelope keeps that request's `traceparent`
//! (and `tracestate`). When a scheduler runs the job, its `redefer.job` span records the
//! `traceparent` it came from (every build), and with the `opentelemetry` feature the span is
//! made a child of the deferring span and linked to it: one trace shows the request, the
//! wait, then the run, across processes and restarts. Without the feature nothing is captured
//! on push, and a job stored by a producer that has the feature still carries its context.
//!
//! [Trace Context]: https://www.w3.org/TR/trace-context/
//!
//! ```
//! use redefer::trace_context::TraceContext;
//!
//! let context = TraceContext::new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)?;
//! let parent = context.parent().expect("made by new(): valid");
//! assert_eq!(parent.span_id(), [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
//! assert!(parent.is_sampled());
//! # Ok::<(), redefer::trace_context::InvalidTraceContext>(())
//! ```

#[cfg(feature = "opentelemetry")]
mod opentelemetry;
mod traceparent;

use serde::{Deserialize, Serialize};

pub use self::traceparent::TraceParent;

/// The longest `tracestate` kept: the W3C limit a vendor may rely on being propagated
/// (32 members of at most 256 characters each could be longer; such a state is dropped, the
/// parent kept).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// The trace context of the request that stored a job: W3C `traceparent` and `tracestate`.
///
/// Kept in the envelope as the two header strings; a `traceparent` that does not parse is
/// ignored when the job runs (the job runs, without a parent), never a reason to lose it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

/// A `traceparent` that is not W3C Trace Context, or a `tracestate` over
/// [`MAX_TRACESTATE_LEN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTraceContext {
    /// The `traceparent` header is malformed (what W3C Trace Context level 1 says a receiver
    /// must reject: wrong length or separators, upper-case or non-hex digits, version `ff`,
    /// an all-zero trace or parent id).
    #[error("not a W3C traceparent: {0:?}")]
    TraceParent(String),
    /// The `tracestate` header is longer than [`MAX_TRACESTATE_LEN`].
    #[error("tracestate of {0} bytes is over the {MAX_TRACESTATE_LEN} kept")]
    TraceStateTooLong(usize),
}

impl TraceContext {
    /// A context from the two W3C headers.
    ///
    /// # Errors
    ///
    /// [`InvalidTraceContext`] for a malformed `traceparent` or an over-long `tracestate`.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self, InvalidTraceContext> {
        let parent = TraceParent::parse(traceparent)
            .ok_or_else(|| InvalidTraceContext::TraceParent(traceparent.to_string()))?;
        if let Some(state) = tracestate.filter(|state| state.len() > MAX_TRACESTATE_LEN) {
            return Err(InvalidTraceContext::TraceStateTooLong(state.len()));
        }
        Ok(TraceContext {
            // Re-formatted: what is kept is canonical (version 00), whatever version came in.
            traceparent: parent.to_string(),
            tracestate: tracestate.filter(|state| !state.is_empty()).map(str::to_string),
        })
    }

    /// The `traceparent` header as stored (for a context read from a store, possibly not
    /// valid: see [`parent`](Self::parent)).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header, if there was one.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The parsed `traceparent`: `None` only for a context decoded from a store that holds
    /// something else than W3C Trace Context (a hostile or corrupted envelope).
    pub fn parent(&self) -> Option<TraceParent> {
        TraceParent::parse(&self.traceparent)
    }

    /// The context of the span the caller runs in, when it is part of an OpenTelemetry trace
    /// (through `tracing-opentelemetry`): what a push keeps in the job's envelope. Always
    /// `None` without the `opentelemetry` feature.
    pub fn current() -> Option<Self> {
        #[cfg(feature = "opentelemetry")]
        {
            self::opentelemetry::current()
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            None
        }
    }

    /// Makes `span` (not yet entered) continue this context: a child of the span it names,
    /// linked to it. Does nothing without the `opentelemetry` feature, without an
    /// OpenTelemetry layer, or for a `traceparent` that does not parse.
    pub(crate) fn continue_in(&self, span: &tracing::Span) {
        #[cfg(feature = "opentelemetry")]
        self::opentelemetry::continue_in(self, span);
        #[cfg(not(feature = "opentelemetry"))]
        let _ = span;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_context_is_kept_canonically_and_within_bounds() {
        let later = format!("01{}-more", &VALID[2..]);
        let context = TraceContext::new(&later, Some("")).unwrap();
        assert_eq!((context.traceparent(), context.tracestate()), (VALID, None));
        let long = "k=".to_string() + &"v".repeat(MAX_TRACESTATE_LEN);
        assert_eq!(
            TraceContext::new(VALID, Some(&long)),
            Err(InvalidTraceContext::TraceStateTooLong(long.len()))
        );
        assert!(matches!(
            TraceContext::new("00-nope", None),
            Err(InvalidTraceContext::TraceParent(_))
        ));
    }

    #[test]
    fn nothing_is_captured_outside_a_trace() {
        assert_eq!(TraceContext::current(), None);
    }
}
