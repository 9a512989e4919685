//! Trace context crosses a deferral (feature `opentelemetry`): the job's span is a child of,
//! and linked to, the span that deferred the request, so one trace shows request -> wait ->
//! run; the handler's spans nest under the job's. A push outside a trace stores nothing and
//! its job starts a trace of its own; a stored context that is not W3C Trace Context is
//! ignored and the job runs. Both stores and Valkey, spans read from an in-memory exporter.

mod support;

use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use redefer::lock::{Acquisition, LockStore};
use redefer::queue::{DelayQueue, Due, JobId, QueueStore};
use redefer::strategy::Defer;
use redefer::{LockKey, LockLayer, LockToken, Scheduler, SchedulerOptions};
use support::Shorthand;
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt, service_fn};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use support::for_each_store;

/// One exporter for the process: the global subscriber serves every test's threads; each test
/// reads the spans of its own queue or trace.
fn exporter() -> &'static (InMemorySpanExporter, SdkTracerProvider) {
    static TRACING: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    TRACING.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("redefer-tests")));
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        (exporter, provider)
    })
}

fn finished_spans() -> Vec<SpanData> {
    let (exporter, provider) = exporter();
    provider.force_flush().expect("the in-memory exporter flushes");
    exporter
        .get_finished_spans()
        .expect("the in-memory exporter reads")
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key.as_str() == key)
        .map(|attribute| attribute.value.to_string())
}

/// Whether span `id` is `ancestor` or under it, following the parents of finished spans.
fn descends(spans: &[SpanData], mut id: SpanId, ancestor: SpanId) -> bool {
    while id != ancestor {
        match spans.iter().find(|span| span.span_context.span_id() == id) {
            Some(span) => id = span.parent_span_id,
            None => return false,
        }
    }
    true
}

/// The finished `redefer.job` span of the one job of `queue`.
fn job_span(spans: &[SpanData], queue: &DelayQueue<u64, impl QueueStore>) -> SpanData {
    let mut jobs = spans.iter().filter(|span| {
        span.name == "redefer.job" && attribute(span, "queue").as_deref() == Some(queue.name().as_str())
    });
    let job = jobs.next().expect("the job's span was exported").clone();
    assert!(jobs.next().is_none(), "one run");
    job
}

/// A scheduler over `queue` whose handler reports, from its own span, the trace it ran in.
async fn run_the_job<St: QueueStore + LockStore>(
    queue: &DelayQueue<u64, St>,
    service_store: &St,
) -> (TraceId, SpanId) {
    let (ran, mut runs) = mpsc::unbounded_channel();
    let handler = service_fn(move |_: u64| {
        let ran = ran.clone();
        let span = tracing::info_span!("handler");
        async move {
            let context = tracing::Span::current().context();
            let span = context.span();
            let _ = ran.send((span.span_context().trace_id(), span.span_context().span_id()));
            Ok::<_, Infallible>(())
        }
        .instrument(span)
    });
    let service = LockLayer::new(service_store.clone(), |_: &u64| Some("document".to_string()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(20),
            ..SchedulerOptions::default()
        })
        .start();
    let ran = tokio::time::timeout(Duration::from_secs(10), runs.recv())
        .await
        .expect("the job ran")
        .expect("the handler reported");
    scheduler.shutdown().await;
    ran
}

fn unique_queue<St: QueueStore>(store: &St, what: &str) -> DelayQueue<u64, St> {
    DelayQueue::new(store.clone(), format!("{what}-{}", JobId::random())).expect("a valid name")
}

async fn a_job_continues_the_trace_of_the_request_that_deferred_it<S: LockStore + QueueStore>(store: S) {
    exporter();
    let queue = unique_queue(&store, "traced");
    let document = LockKey::new(format!("document-of-{}", queue.name())).unwrap();
    let holder = LockToken::random();
    let acquired = store
        .try_acquire(&document, holder, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(acquired, Acquisition::Acquired(_)));

    let deferring = LockLayer::new(store.clone(), {
        let document = document.as_str().to_string();
        move |_: &u64| Some(document.clone())
    })
    .on_conflict(Defer::new(queue.clone()))
    .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }));
    let request = tracing::info_span!("request");
    let request_context = request.context().span().span_context().clone();
    let outcome = deferring.oneshot(7).instrument(request.clone()).await.unwrap();
    assert!(outcome.deferred().is_some(), "the held key defers the request");
    drop(request);
    assert!(store.release(&document, holder).await.unwrap());

    let (handler_trace, handler_span) = run_the_job(&queue, &store).await;
    let spans = finished_spans();
    let job = job_span(&spans, &queue);
    let trace = request_context.trace_id();
    assert_eq!(
        job.span_context.trace_id(),
        trace,
        "the job runs in the request's trace"
    );
    assert_eq!(handler_trace, trace, "and so does its handler");
    assert!(job.parent_span_is_remote, "its parent is the stored context");
    // The parent is the span the deferral ran in: the request's, or a span under it.
    assert!(descends(&spans, job.parent_span_id, request_context.span_id()));
    assert!(
        job.links
            .links
            .iter()
            .any(|link| link.span_context.span_id() == job.parent_span_id
                && link.span_context.trace_id() == trace),
        "the job's span links to the deferring span: {:?}",
        job.links
    );
    assert_eq!(
        attribute(&job, "traceparent"),
        Some(format!("00-{trace}-{}-01", job.parent_span_id)),
        "the job's span records the traceparent it continues"
    );
    assert!(
        descends(&spans, handler_span, job.span_context.span_id()),
        "the handler runs under the job"
    );
}

async fn a_push_outside_a_trace_stores_no_context_and_its_job_starts_one<S: LockStore + QueueStore>(
    store: S,
) {
    exporter();
    let queue = unique_queue(&store, "untraced");
    let pushed = queue.push(&1, Duration::ZERO).await.unwrap();
    let stored = queue.operator().job(&pushed.id).await.unwrap().expect("stored");
    assert_eq!(stored.envelope.expect("bytes").expect("decodes").trace, None);

    let (handler_trace, _) = run_the_job(&queue, &store).await;
    let job = job_span(&finished_spans(), &queue);
    assert_eq!(job.parent_span_id, SpanId::INVALID, "a root");
    assert!(job.links.links.is_empty());
    assert_eq!(attribute(&job, "traceparent"), None);
    assert_eq!(handler_trace, job.span_context.trace_id());
}

async fn a_direct_push_in_a_traced_span_keeps_that_span<S: LockStore + QueueStore>(store: S) {
    exporter();
    let queue = unique_queue(&store, "pushed");
    let producer = tracing::info_span!("producer");
    let expected = {
        let context = producer.context();
        let span = context.span();
        format!(
            "00-{}-{}-01",
            span.span_context().trace_id(),
            span.span_context().span_id()
        )
    };
    let pushed = queue.push(&1, Duration::ZERO).instrument(producer).await.unwrap();
    let stored = queue.operator().job(&pushed.id).await.unwrap().expect("stored");
    let trace = stored
        .envelope
        .expect("bytes")
        .expect("decodes")
        .trace
        .expect("kept");
    assert_eq!(trace.traceparent(), expected);
}

async fn a_job_whose_stored_context_is_not_w3c_still_runs<S: LockStore + QueueStore>(store: S) {
    exporter();
    let queue = unique_queue(&store, "hostile");
    let id = JobId::random();
    let envelope = serde_json::json!({
        "id": id.as_str(),
        "attempt": 0,
        "enqueued_at_ms": 0,
        "last_error": null,
        "trace": { "traceparent": "00-NOT-W3C-\u{202e}", "tracestate": "x=1" },
        "payload": 1,
    });
    let bytes = serde_json::to_vec(&envelope).unwrap();
    store
        .push_many(queue.name(), &[(id, bytes)], Due::In(Duration::ZERO))
        .await
        .unwrap();

    run_the_job(&queue, &store).await;
    let job = job_span(&finished_spans(), &queue);
    assert_eq!(job.parent_span_id, SpanId::INVALID, "nothing to continue: a root");
    assert_eq!(
        attribute(&job, "traceparent").as_deref(),
        Some("00-NOT-W3C-\u{202e}")
    );
}

for_each_store!(
    a_job_continues_the_trace_of_the_request_that_deferred_it,
    a_push_outside_a_trace_stores_no_context_and_its_job_starts_one,
    a_direct_push_in_a_traced_span_keeps_that_span,
    a_job_whose_stored_context_is_not_w3c_still_runs,
);
