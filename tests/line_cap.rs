//! A cap on a key's line: never more than `max` waiting under 50 concurrent producers; the
//! newest refused with a typed error, or the oldest dropped to the dead-letter set with the
//! reason; on a lock and on a semaphore, on every store.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::support::Shorthand;
use redefer::guard::{LineCap, SUPERSEDED_BY_NEWER};
use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, JobSet, QueueStats, QueueStore};
use redefer::store::ListLocks;
use redefer::strategy::Defer;
use redefer::{Error, LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions};
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

trait Store: QueueStore + LockStore + ListLocks {}

impl<S: QueueStore + LockStore + ListLocks> Store for S {}

const PRODUCERS: u64 = 50;
const PER_PRODUCER: u64 = 4;
const CAP: u64 = 5;

/// What the producers were told.
#[derive(Debug, Default)]
struct Told {
    deferred: AtomicU64,
    refused: AtomicU64,
}

/// Runs 50 producers of 4 requests each against `service` while a sampler watches the key's
/// line: returns what they were told and the longest line seen.
async fn produce<S>(service: S, store: impl ListLocks + Clone + Send + 'static) -> (Told, u64)
where
    S: tower::Service<u64, Response = Outcome<()>, Error = Error<std::convert::Infallible>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut longest = 0;
            while !done.load(Ordering::SeqCst) {
                for info in store.list_locks(100).await.unwrap() {
                    longest = longest.max(info.waiters);
                }
                tokio::task::yield_now().await;
            }
            longest
        })
    };
    let told = Arc::new(Told::default());
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let (service, told) = (service.clone(), Arc::clone(&told));
            tokio::spawn(async move {
                for n in 0..PER_PRODUCER {
                    match service.clone().oneshot(producer * PER_PRODUCER + n).await {
                        Ok(Outcome::Deferred(_)) => told.deferred.fetch_add(1, Ordering::SeqCst),
                        Err(Error::LineFull {
                            waiting,
                            retry_after: Some(_),
                            ..
                        }) => {
                            assert!(waiting >= CAP, "refused with {waiting} waiting");
                            told.refused.fetch_add(1, Ordering::SeqCst)
                        }
                        other => panic!("{other:?}"),
                    };
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let longest = sampler.await.unwrap();
    let told = Arc::try_unwrap(told).unwrap();
    (told, longest)
}

/// Runs the queue's jobs through `service` until none is left; how many ran.
async fn drain<S, St: Store>(queue: &DelayQueue<u64, St>, service: S, ran: &AtomicU64) -> u64
where
    S: tower::Service<u64, Response = Outcome<()>, Error = Error<std::convert::Infallible>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(100),
            ..SchedulerOptions::default()
        })
        .start();
    eventually(Duration::from_secs(20), "the line ran", || async {
        let stats = queue.operator().stats().await.unwrap();
        (stats.waiting == 0 && stats.in_flight == 0).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    ran.load(Ordering::SeqCst)
}

/// A lock on `key` deferring to `queue` within `cap`, over a handler that counts its runs in
/// `ran`; the key held by another until the returned token releases it.
async fn capped_stack<S: Store>(
    store: &S,
    queue: &DelayQueue<u64, S>,
    key: &'static str,
    cap: LineCap,
    ran: &Arc<AtomicU64>,
) -> (
    impl tower::Service<u64, Response = Outcome<()>, Error = Error<std::convert::Infallible>, Future: Send>
    + Clone
    + Send
    + 'static,
    LockToken,
) {
    let ran = Arc::clone(ran);
    let service = LockLayer::new(store.clone(), move |_: &u64| Some(key.to_string()))
        .on_conflict(Defer::new(queue.clone()).max_waiting(cap))
        .layer(service_fn(move |_: u64| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::convert::Infallible>(()) }
        }));
    let holder = LockToken::random();
    store
        .try_acquire(&LockKey::new(key).unwrap(), holder, Duration::from_secs(60))
        .await
        .unwrap();
    (service, holder)
}

/// The newest are refused once `CAP` wait: exactly `CAP` deferred, every other producer told
/// `LineFull`, nothing of theirs stored; the line never longer than `CAP`.
async fn a_full_line_refuses_the_newest_under_fifty_producers<S: Store>(store: S) {
    let queue = DelayQueue::<u64, _>::new(store.clone(), "orders").unwrap();
    let ran = Arc::new(AtomicU64::new(0));
    let (service, holder) = capped_stack(&store, &queue, "order:1", LineCap::new(CAP), &ran).await;
    let key = LockKey::new("order:1").unwrap();
    let (told, longest) = produce(service.clone(), store.clone()).await;
    assert!(longest <= CAP, "{longest} waited at once");
    assert_eq!(told.deferred.load(Ordering::SeqCst), CAP);
    assert_eq!(
        told.refused.load(Ordering::SeqCst),
        PRODUCERS * PER_PRODUCER - CAP
    );
    assert_eq!(
        queue.operator().stats().await.unwrap().waiting,
        CAP,
        "a refused request was stored"
    );
    assert!(store.release(&key, holder).await.unwrap());
    assert_eq!(drain(&queue, service, &ran).await, CAP);
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// With `drop_oldest`, every request is deferred and the oldest waiting jobs make room: the
/// line never holds more than `CAP`, the dropped ones are dead with the reason, and every
/// request either ran or is dead.
async fn a_full_line_drops_the_oldest_to_the_dead_set<S: Store>(store: S) {
    let queue = DelayQueue::<u64, _>::new(store.clone(), "orders").unwrap();
    let ran = Arc::new(AtomicU64::new(0));
    let cap = LineCap::new(CAP).drop_oldest();
    let (service, holder) = capped_stack(&store, &queue, "order:2", cap, &ran).await;
    let key = LockKey::new("order:2").unwrap();
    let (told, longest) = produce(service.clone(), store.clone()).await;
    let total = PRODUCERS * PER_PRODUCER;
    assert!(longest <= CAP, "{longest} waited at once");
    assert_eq!(told.deferred.load(Ordering::SeqCst), total);
    let stats = queue.operator().stats().await.unwrap();
    assert_eq!((stats.waiting, stats.dead), (CAP, total - CAP), "{stats:?}");
    let dead = queue.operator().list(JobSet::Dead, 1000).await.unwrap();
    assert!(
        dead.iter()
            .all(|entry| entry.reason.as_deref() == Some(SUPERSEDED_BY_NEWER))
    );
    assert!(store.release(&key, holder).await.unwrap());
    assert_eq!(drain(&queue, service, &ran).await, CAP);
    let stats = queue.operator().stats().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight, stats.dead), (0, 0, total - CAP));
}

/// A semaphore's line keeps the same cap: one permit held by a running request, 50 producers.
async fn a_semaphores_line_keeps_its_cap<S: Store>(store: S) {
    let queue = DelayQueue::<u64, _>::new(store.clone(), "orders").unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let ran = Arc::new(AtomicU64::new(0));
    let service = {
        let (gate, ran) = (Arc::clone(&gate), Arc::clone(&ran));
        LockLayer::new(store.clone(), |_: &u64| Some("order:3".to_string()))
            .permits(1)
            .on_conflict(Defer::new(queue.clone()).max_waiting(LineCap::new(CAP)))
            .layer(service_fn(move |n: u64| {
                let (gate, ran) = (Arc::clone(&gate), Arc::clone(&ran));
                async move {
                    if n == u64::MAX {
                        gate.acquire().await.unwrap().forget();
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let holder = tokio::spawn(service.clone().oneshot(u64::MAX));
    eventually(Duration::from_secs(10), "the permit is held", || async {
        let locks = store.list_locks(10).await.unwrap();
        locks.iter().any(|info| info.holders == 1).then_some(())
    })
    .await;
    let (told, longest) = produce(service.clone(), store.clone()).await;
    assert!(longest <= CAP, "{longest} waited at once");
    assert_eq!(told.deferred.load(Ordering::SeqCst), CAP);
    gate.add_permits(1);
    assert!(matches!(holder.await.unwrap(), Ok(Outcome::Done(()))));
    assert_eq!(drain(&queue, service, &ran).await, CAP + 1);
}

for_each_store!(
    a_full_line_refuses_the_newest_under_fifty_producers,
    a_full_line_drops_the_oldest_to_the_dead_set,
    a_semaphores_line_keeps_its_cap,
);
