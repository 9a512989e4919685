//! An axum service whose order updates run under redefer's lock layer.
//!
//! ```text
//! cargo run --example http          # PORT (default 3000); REDIS_URL to use Redis, else in memory
//!
//! curl -X PUT localhost:3000/orders/7 -H 'content-type: application/json' -d '{"note":"paid","work_ms":2000}'
//! curl -X PUT localhost:3000/orders/7 -H 'content-type: application/json' -d '{"note":"shipped"}'
//!     # while the first runs: 409 Conflict, Retry-After: the estimated wait in whole seconds,
//!     # rounded up: 1 while the key's typical hold is not known yet (an estimate of 100 ms),
//!     # 2 once the key was held for its 2 s: the estimate follows the key's last hold
//! curl -X PUT localhost:3000/orders/7 -H 'prefer: respond-async' -H 'content-type: application/json' -d '{"note":"shipped"}'
//!     # while the first runs: 202 Accepted {"job_id": ...}; the scheduler applies it afterwards
//! curl localhost:3000/jobs/<job_id> # that job's status: waiting, in_flight, done (kept an hour), dead
//! curl localhost:3000/orders/7      # the order's last note and the fencing token it was written under
//! open http://localhost:3000/redefer/ # the dashboard (read-only unless REDEFER_DASHBOARD_TOKEN is set)
//! curl localhost:3000/metrics       # Prometheus text
//! ```
//!
//! The HTTP handlers turn requests into `UpdateOrder` values, which the lock stack can defer
//! (they serialize), and turn outcomes back into HTTP: `200` done, `409` with `Retry-After`
//! (seconds, rounded up) when the order is locked, `202` with the job id when the client sent
//! `Prefer: respond-async` (RFC 7240) and the request was deferred.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::future::BoxFuture;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redefer::dashboard::{Dashboard, DashboardOptions};
use redefer::idempotency::Seen;
use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, JobId, JobStatus, QueueError, QueueStore, Retention};
use redefer::store::ListLocks;
use redefer::strategy::{Defer, FailFast, Switch};
use redefer::{
    BoxLockService, Duplicate, Error, LockLayer, MemoryStore, Outcome, RedisStore, Scheduler,
    SchedulerOptions, current_lock,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tower::{Layer, ServiceExt, service_fn};

/// What the lock stack handles: one change to one order.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UpdateOrder {
    order: u64,
    note: String,
    work_ms: u64,
    /// The client sent `Prefer: respond-async`: a conflict defers the change instead of
    /// refusing it.
    respond_async: bool,
}

/// An order as last written, with the fencing token of the lock it was written under.
#[derive(Debug, Clone, Serialize)]
struct OrderState {
    order: u64,
    note: String,
    fence: u64,
}

/// The body of `PUT /orders/{id}`.
#[derive(Debug, Deserialize)]
struct Change {
    note: String,
    /// How long the change takes, to make conflicts easy to see (at most 10 s).
    #[serde(default)]
    work_ms: u64,
}

/// The lock stack, named: its strategy, extractor and handler types erased.
type Stack = BoxLockService<UpdateOrder, OrderState, Infallible>;

/// Looks up a job's status in the deferral queue.
type StatusOf = Arc<dyn Fn(JobId) -> BoxFuture<'static, Result<JobStatus, QueueError>> + Send + Sync>;

#[derive(Clone)]
struct App {
    orders_stack: Stack,
    status_of: StatusOf,
    orders: Arc<Mutex<HashMap<u64, OrderState>>>,
    metrics: PrometheusHandle,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let metrics = PrometheusBuilder::new().install_recorder()?;
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let router = match std::env::var("REDIS_URL") {
        Ok(url) => app(
            RedisStore::builder()
                .prefix("redefer-http")?
                .connect(&url)
                .await?,
            metrics,
        )?,
        Err(_) => app(MemoryStore::new(), metrics)?,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The connection's address feeds the dashboard's sign-in limit.
    let app = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}

/// The routes, over `store`, with a scheduler re-injecting deferred changes.
fn app<S: LockStore + QueueStore + ListLocks + Sync>(
    store: S,
    metrics: PrometheusHandle,
) -> Result<Router, Box<dyn std::error::Error>> {
    let orders: Arc<Mutex<HashMap<u64, OrderState>>> = Arc::default();
    let written = orders.clone();
    let handler = service_fn(move |change: UpdateOrder| {
        let written = written.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(change.work_ms.min(10_000))).await;
            let fence = current_lock()
                .and_then(|lock| lock.fence)
                .map_or(0, |fence| fence.0);
            let state = OrderState {
                order: change.order,
                note: change.note,
                fence,
            };
            // A real handler would pass `fence` to its database with the write.
            written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(state.order, state.clone());
            Ok::<_, Infallible>(state)
        }
    });
    // Finished jobs are kept an hour (at most 100,000), so a 202's job id can be followed.
    let queue = DelayQueue::<UpdateOrder, _>::new(store.clone(), "order-updates")?
        .retain_finished(Retention::new(100_000, Duration::from_secs(3600)));
    let dashboard = Dashboard::new(
        store.clone(),
        DashboardOptions::default()
            .token(std::env::var("REDEFER_DASHBOARD_TOKEN").ok())
            .mounted_at("/redefer"),
    );
    let lookup = queue.clone();
    let status_of: StatusOf = Arc::new(move |id| {
        let queue = lookup.clone();
        Box::pin(async move { queue.status(&id).await })
    });
    // One stack: a change whose client prefers an async answer is deferred when its order is
    // locked; any other is refused with 409.
    let respond_async = |change: &UpdateOrder| change.respond_async;
    let orders_stack: Stack = BoxLockService::new(
        LockLayer::new(store, |change: &UpdateOrder| {
            Some(format!("order:{}", change.order))
        })
        .ttl(Duration::from_secs(5))
        .on_conflict(Switch::when(respond_async, Defer::new(queue.clone())).otherwise(FailFast))
        .layer(handler),
    );
    let options = SchedulerOptions {
        max_idle: Duration::from_millis(500),
        ..SchedulerOptions::default()
    };
    // Runs until the process ends; a service with its own shutdown would keep the handle.
    let _scheduler = Scheduler::new(queue, orders_stack.clone())
        .options(options)
        .start();
    let app = App {
        orders_stack,
        status_of,
        orders,
        metrics,
    };
    Ok(Router::new()
        .route("/orders/{order}", get(show).put(update))
        .route("/jobs/{id}", get(job_status))
        .route(
            "/metrics",
            get(|State(app): State<App>| async move { app.metrics.render() }),
        )
        .with_state(app)
        .merge(dashboard.nested_at("/redefer")))
}

async fn update(
    State(app): State<App>,
    Path(order): Path<u64>,
    headers: HeaderMap,
    Json(change): Json<Change>,
) -> Response {
    let change = UpdateOrder {
        order,
        note: change.note,
        work_ms: change.work_ms,
        respond_async: prefers_async(&headers),
    };
    match app.orders_stack.oneshot(change).await {
        Ok(Outcome::Done(state)) => (StatusCode::OK, Json(state)).into_response(),
        Ok(Outcome::Deferred(deferred)) => {
            let due_in = deferred.due.duration_since(SystemTime::now()).unwrap_or_default();
            let body = json!({ "job_id": deferred.job_id, "due_in_ms": due_in.as_millis() as u64 });
            (StatusCode::ACCEPTED, Json(body)).into_response()
        }
        // Only behind an idempotency layer, which this stack has not.
        Ok(Outcome::Duplicate(duplicate)) => duplicate_response(&duplicate),
        // `Outcome` is `#[non_exhaustive]`: outcomes of later versions.
        Ok(_) => (StatusCode::ACCEPTED, Json(json!({ "status": "accepted" }))).into_response(),
        Err(Error::Locked { retry_after, .. }) => {
            // Whole seconds, rounded up: a client retrying sooner would meet the lock again.
            let seconds = retry_after
                .map_or(1, |after| after.as_secs() + u64::from(after.subsec_nanos() > 0))
                .max(1);
            let body = json!({ "error": format!("order {order} is being changed by another request"), "retry_after_s": seconds });
            (
                StatusCode::CONFLICT,
                [(header::RETRY_AFTER, seconds.to_string())],
                Json(body),
            )
                .into_response()
        }
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

/// What the sender of a request whose id was seen before is told, by where the first is: done
/// is a success, in progress asks to try again later, dead says the work failed for good.
fn duplicate_response(duplicate: &Duplicate) -> Response {
    let body = |status: &str| json!({ "duplicate_of": duplicate.job_id, "status": status });
    match duplicate.seen {
        Seen::Finished | Seen::Done => (StatusCode::OK, Json(body("done"))).into_response(),
        Seen::Dead => (StatusCode::CONFLICT, Json(body("failed: in the dead-letter set"))).into_response(),
        // Running, waiting or in flight (and states of later versions): try again.
        _ => (
            StatusCode::CONFLICT,
            [(header::RETRY_AFTER, "1")],
            Json(body("in progress")),
        )
            .into_response(),
    }
}

async fn show(State(app): State<App>, Path(order): Path<u64>) -> Response {
    match app.orders.lock().unwrap_or_else(|e| e.into_inner()).get(&order) {
        Some(state) => Json(state.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /jobs/{id}`: where the deferred change with this id (a 202's `job_id`) is.
async fn job_status(State(app): State<App>, Path(id): Path<String>) -> Response {
    let Ok(id) = JobId::new(id) else {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": "not a job id" }))).into_response();
    };
    match (app.status_of)(id).await {
        Ok(JobStatus::Unknown) => (StatusCode::NOT_FOUND, Json(JobStatus::Unknown)).into_response(),
        Ok(status) => Json(status).into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

/// Whether the client asked to be answered at once and served later (`Prefer: respond-async`).
fn prefers_async(headers: &HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|preference| preference.trim().eq_ignore_ascii_case("respond-async"))
}
