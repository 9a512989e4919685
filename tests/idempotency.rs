//! An idempotency id covers a request's whole life: twins delivered at once on a free key run
//! once; a redelivery while the first waits, runs, or is kept as done is a duplicate; once the
//! record is forgotten the id is new; ids are any text. Both stores and Valkey.

use crate::support;

use crate::support::Shorthand;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::idempotency::{IdempotencyLayer, IdempotencyStore, Seen};
use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, QueueStats, Retention};
use redefer::strategy::Defer;
use redefer::{Error, LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{ServiceBuilder, ServiceExt, service_fn};

use support::{eventually, for_each_store};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hook {
    delivery: String,
    order: u64,
    fail: bool,
}

trait Store: IdempotencyStore + LockStore {}

impl<S: IdempotencyStore + LockStore> Store for S {}

type Runs = Arc<Mutex<HashMap<String, u32>>>;

/// The stack: idempotency in front of a lock per order that defers to `queue`, over a handler
/// that counts its runs per delivery (and fails when asked).
fn stack<S: Store>(
    store: &S,
    queue: &DelayQueue<Hook, S>,
    runs: &Runs,
) -> impl tower::Service<Hook, Response = Outcome<()>, Error = Error<String>, Future: Send> + Clone + Send + 'static
{
    let runs = Arc::clone(runs);
    ServiceBuilder::new()
        .layer(IdempotencyLayer::new(queue.clone(), |hook: &Hook| Some(hook.delivery.clone())).over_guard())
        .layer(
            LockLayer::new(store.clone(), |hook: &Hook| Some(format!("order:{}", hook.order)))
                .on_conflict(Defer::new(queue.clone())),
        )
        .service(service_fn(move |hook: Hook| {
            let runs = Arc::clone(&runs);
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                *runs.lock().unwrap().entry(hook.delivery.clone()).or_default() += 1;
                if hook.fail {
                    Err("declined".to_string())
                } else {
                    Ok(())
                }
            }
        }))
}

fn scheduler_options() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(100),
        ..SchedulerOptions::default()
    }
}

/// 70 deliveries, each delivered twice at once, on 10 orders (so some run directly, some wait
/// as jobs): each runs exactly once, and of each pair one is told it is a duplicate. The queue
/// keeps finished jobs: 140 tasks start over some milliseconds on a busy machine, and a twin
/// that comes once the first's run ended is a duplicate only while the id is remembered (it
/// is new again without a retention, as `without_retention_a_finished_id_is_new_again` pins).
async fn twins_delivered_at_once_run_once<S: Store>(store: S) {
    let queue = DelayQueue::<Hook, _>::new(store.clone(), "hooks")
        .unwrap()
        .retain_finished(Retention::default());
    let runs: Runs = Arc::default();
    let service = stack(&store, &queue, &runs);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(scheduler_options())
        .start();
    let calls: Vec<_> = (0..140u64)
        .map(|n| {
            let hook = Hook {
                delivery: format!("delivery {}/{}", n / 2, "ü"),
                order: n % 10,
                fail: false,
            };
            tokio::spawn(service.clone().oneshot(hook))
        })
        .collect();
    let mut duplicates = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(Outcome::Duplicate(_)) => duplicates += 1,
            Ok(Outcome::Done(()) | Outcome::Deferred(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(duplicates, 70, "one of each pair is a duplicate");
    eventually(Duration::from_secs(20), "every delivery ran", || async {
        let stats = queue.operator().stats().await.unwrap();
        let settled = QueueStats { done: 0, ..stats } == QueueStats::default();
        (runs.lock().unwrap().len() == 70 && settled).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let runs = runs.lock().unwrap();
    assert!(runs.values().all(|&n| n == 1), "{runs:?}");
}

/// A redelivery is a duplicate while the first runs, waits, or is kept as done (directly or
/// from the queue); after the record is forgotten (a retention of one job), the id is new; a
/// failed run is forgotten at once, so its redelivery runs.
async fn redeliveries_are_duplicates_for_the_records_life<S: Store>(store: S) {
    let queue = DelayQueue::<Hook, _>::new(store.clone(), "hooks")
        .unwrap()
        .retain_finished(Retention::new(1, Duration::from_secs(3600)));
    let runs: Runs = Arc::default();
    let service = stack(&store, &queue, &runs);
    let hook = |delivery: &str, order: u64| Hook {
        delivery: delivery.to_string(),
        order,
        fail: false,
    };
    let seen = |outcome: Outcome<()>| match outcome {
        Outcome::Duplicate(duplicate) => Some(duplicate.seen),
        _ => None,
    };

    // Ran directly, then kept: a duplicate.
    assert!(
        service
            .clone()
            .oneshot(hook("a=b+c", 1))
            .await
            .unwrap()
            .done()
            .is_some()
    );
    assert_eq!(
        seen(service.clone().oneshot(hook("a=b+c", 1)).await.unwrap()),
        Some(Seen::Finished)
    );

    // Deferred while the order is held: a duplicate while it waits, and once it ran and is kept.
    let holder = LockToken::random();
    let order = LockKey::new("order:2").unwrap();
    store
        .try_acquire(&order, holder, Duration::from_secs(30))
        .await
        .unwrap();
    let deferred = service.clone().oneshot(hook("x y", 2)).await.unwrap();
    let job = deferred.deferred().expect("deferred").job_id.clone();
    assert_eq!(
        seen(service.clone().oneshot(hook("x y", 2)).await.unwrap()),
        Some(Seen::Waiting)
    );
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(scheduler_options())
        .start();
    assert!(store.release(&order, holder).await.unwrap());
    eventually(Duration::from_secs(10), "the deferred delivery ran", || async {
        (queue.operator().stats().await.unwrap().done == 1).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    match service.clone().oneshot(hook("x y", 2)).await.unwrap() {
        Outcome::Duplicate(duplicate) => {
            assert_eq!((duplicate.seen, &duplicate.job_id), (Seen::Done, &job));
        }
        other => panic!("{other:?}"),
    }

    // A failed run is forgotten: its redelivery runs.
    let failing = Hook {
        fail: true,
        ..hook("fails", 3)
    };
    assert!(matches!(
        service.clone().oneshot(failing.clone()).await,
        Err(Error::Inner(_))
    ));
    assert!(matches!(
        service.clone().oneshot(failing).await,
        Err(Error::Inner(_))
    ));

    assert_eq!(runs.lock().unwrap().get("a=b+c"), Some(&1));
    assert_eq!(runs.lock().unwrap().get("x y"), Some(&1));
    assert_eq!(runs.lock().unwrap().get("fails"), Some(&2));
}

/// Without retention a finished request is forgotten at once, as a finished job is: the same
/// id later is new.
async fn without_retention_a_finished_id_is_new_again<S: Store>(store: S) {
    let queue = DelayQueue::<Hook, _>::new(store.clone(), "hooks").unwrap();
    let runs: Runs = Arc::default();
    let service = stack(&store, &queue, &runs);
    let hook = Hook {
        delivery: "once".to_string(),
        order: 4,
        fail: false,
    };
    for _ in 0..2 {
        assert!(
            service
                .clone()
                .oneshot(hook.clone())
                .await
                .unwrap()
                .done()
                .is_some()
        );
    }
    assert_eq!(runs.lock().unwrap().get("once"), Some(&2));
}

for_each_store!(
    twins_delivered_at_once_run_once,
    redeliveries_are_duplicates_for_the_records_life,
    without_retention_a_finished_id_is_new_again,
);
