//! A request id whose run died with its process is new again within one hold: the record of a
//! request in progress is renewed while it runs (so a long run stays a duplicate for
//! redeliveries), and runs out when its process dies (so a redelivery after the crash runs).

use crate::support;

use std::time::{Duration, Instant};

use redefer::idempotency::{IdempotencyLayer, Seen};
use redefer::queue::DelayQueue;
use redefer::strategy::Defer;
use redefer::{LockLayer, Outcome};
use serde::{Deserialize, Serialize};
use tower::{ServiceBuilder, ServiceExt, service_fn};

use support::{RedisServer, Server, WorkerProcess, for_each_server, store_at, unique_prefix};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hook {
    delivery: String,
    order: u64,
}

/// The record's hold, short for the test: renewed every second while a run lasts.
const HOLD: Duration = Duration::from_secs(3);

fn hook() -> Hook {
    Hook {
        delivery: "hook-1".to_string(),
        order: 7,
    }
}

/// The stack both processes run: idempotency over a lock per order (TTL 1 s) that defers.
fn stack<F, Fut>(
    store: &redefer::RedisStore,
    handler: F,
) -> impl tower::Service<
    Hook,
    Response = Outcome<()>,
    Error = redefer::Error<std::convert::Infallible>,
    Future: Send,
> + Clone
+ Send
+ 'static
where
    F: Fn(Hook) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), std::convert::Infallible>> + Send + 'static,
{
    let queue = DelayQueue::<Hook, _>::new(store.clone(), "hooks").unwrap();
    ServiceBuilder::new()
        .layer(
            IdempotencyLayer::new(queue.clone(), |hook: &Hook| Some(hook.delivery.clone()))
                .hold(HOLD)
                .over_guard(),
        )
        .layer(
            LockLayer::new(store.clone(), |hook: &Hook| Some(format!("order:{}", hook.order)))
                .ttl(Duration::from_secs(1))
                .on_conflict(Defer::new(queue)),
        )
        .service(service_fn(handler))
}

/// The worker, run in a child process when `REDEFER_HOOK_WORKER` names the server: it takes the
/// delivery and runs it until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_worker_process() {
    let (Ok(url), Ok(prefix)) = (
        std::env::var("REDEFER_HOOK_WORKER"),
        std::env::var("REDEFER_HOOK_PREFIX"),
    ) else {
        return; // not the child
    };
    let store = store_at(&url, &prefix).await;
    let service = stack(&store, |_: Hook| async {
        println!("worker ready");
        std::future::pending::<Result<(), std::convert::Infallible>>().await
    });
    let outcome = service.oneshot(hook()).await;
    panic!("the run never ends until the process is killed: {outcome:?}");
}

/// While the worker's run lasts (three holds), a redelivery is told the first is running; once
/// the worker is killed, a redelivery runs within one hold (plus the redelivery's period).
async fn a_run_that_died_with_its_process_frees_its_id_within_a_hold(server: Server) {
    let redis = RedisServer::start_of(server);
    let prefix = unique_prefix();
    let store = store_at(&redis.url(), &prefix).await;
    let url = redis.url();
    let mut worker = WorkerProcess::start(
        &support::test_name(module_path!(), "idempotency_worker_process"),
        &[("REDEFER_HOOK_WORKER", &url), ("REDEFER_HOOK_PREFIX", &prefix)],
    );
    let service = stack(&store, |_: Hook| async { Ok(()) });

    let started = Instant::now();
    while started.elapsed() < 3 * HOLD {
        match service.clone().oneshot(hook()).await.unwrap() {
            Outcome::Duplicate(duplicate) => assert_eq!(duplicate.seen, Seen::Running),
            other => panic!(
                "a redelivery while the first runs, after {:?}: {other:?}",
                started.elapsed()
            ),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    worker.kill();
    let killed = Instant::now();
    loop {
        match service.clone().oneshot(hook()).await.unwrap() {
            Outcome::Duplicate(duplicate) => assert_eq!(duplicate.seen, Seen::Running),
            Outcome::Done(()) => break,
            other => panic!("{other:?}"),
        }
        assert!(
            killed.elapsed() < HOLD + Duration::from_secs(2),
            "the id is still taken {:?} after its process died",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

for_each_server!(a_run_that_died_with_its_process_frees_its_id_within_a_hold);
