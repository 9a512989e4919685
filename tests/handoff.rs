//! Handoff: at release, a contended key goes to the requests waiting for it, in arrival order,
//! on every store.

use crate::support;

use crate::support::Shorthand;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::guard::Waiter;
use redefer::lock::{Acquisition, Fencing, Holders, LockStore};
use redefer::lock_set::{LockSetStore, SetAcquisition};
use redefer::queue::{DelayQueue, QueueStats, QueueStore};
use redefer::strategy::{Defer, FailFast, Retry, RetryLimits};
use redefer::{
    Backoff, Error, LockKey, LockLayer, LockToken, MemoryStore, Outcome, RedisStore, Scheduler,
    SchedulerOptions,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const KEY: &str = "doc:1";
const WORK: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Edit {
    n: u64,
    delivery: String,
}

fn edit(n: u64) -> Edit {
    Edit {
        n,
        delivery: format!("delivery-{n}"),
    }
}

/// Stores whose reservation time a test can shorten.
trait Reserving: LockStore + LockSetStore + QueueStore {
    fn reserving(self, reservation: Duration) -> Self;
}

impl Reserving for MemoryStore {
    fn reserving(self, reservation: Duration) -> Self {
        self.with_reservation(reservation)
    }
}

impl Reserving for RedisStore {
    fn reserving(self, reservation: Duration) -> Self {
        self.with_reservation(reservation)
    }
}

/// When each edit ran: (n, start, end), in order of start.
type Runs = Arc<Mutex<Vec<(u64, Instant, Instant)>>>;

/// A service that runs each edit under the document's lock for `WORK`, deferring to `queue`
/// when the lock is held; the runs are recorded.
fn editor<St: Reserving>(
    store: &St,
    queue: &DelayQueue<Edit, St>,
    runs: &Runs,
) -> impl tower::Service<Edit, Response = Outcome<()>, Error = Error<std::convert::Infallible>, Future: Send>
+ Clone
+ Send
+ 'static {
    let runs = Arc::clone(runs);
    LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(service_fn(move |edit: Edit| {
            let runs = Arc::clone(&runs);
            async move {
                let start = Instant::now();
                tokio::time::sleep(WORK).await;
                runs.lock().unwrap().push((edit.n, start, Instant::now()));
                Ok::<_, std::convert::Infallible>(())
            }
        }))
}

fn scheduler_options() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(500),
        ..SchedulerOptions::default()
    }
}

async fn hold<St: LockStore>(store: &St) -> LockToken {
    let token = LockToken::random();
    let taken = store
        .try_acquire(&LockKey::new(KEY).unwrap(), token, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(taken, redefer::lock::Acquisition::Acquired(_)));
    token
}

/// The scenario: ten requests deferred behind a holder, each 50 ms of work. At the
/// release they run one after the other, in arrival order, the first at once, nothing buried,
/// no waiter re-deferred more than once.
async fn deferred_waiters_run_in_arrival_order_as_soon_as_the_key_is_released<St: Reserving>(store: St) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let runs = Runs::default();
    let service = editor(&store, &queue, &runs);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(scheduler_options())
        .start();
    let holder = hold(&store).await;
    for n in 0..10 {
        match service.clone().oneshot(edit(n)).await {
            Ok(Outcome::Deferred(deferred)) => assert!(deferred.queue.is_some()),
            other => panic!("edit {n}: expected a deferral, got {other:?}"),
        }
    }
    let released = Instant::now();
    assert!(store.release(&LockKey::new(KEY).unwrap(), holder).await.unwrap());
    eventually(Duration::from_secs(10), "all ten edits ran", || async {
        (runs.lock().unwrap().len() == 10).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    let runs = runs.lock().unwrap().clone();

    let order: Vec<u64> = runs.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "arrival order");
    let first_start = runs[0].1 - released;
    let last_end = runs[9].2 - released;
    assert!(
        first_start <= Duration::from_millis(25),
        "the first waiter started {first_start:?} after the release"
    );
    let ideal = WORK * 10;
    assert!(
        last_end <= ideal + Duration::from_millis(150),
        "the last waiter ended {last_end:?} after the release (ideal {ideal:?})"
    );
    assert_eq!(
        (report.acked, report.buried, report.retried),
        (10, 0, 0),
        "{report:?}"
    );
    assert!(
        report.waited <= 10,
        "at most one lost race per waiter: {report:?}"
    );
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// A retrying caller waits in the same line as deferred jobs: served between them, in arrival
/// order, woken by the handoff rather than its (long) backoff.
async fn a_retrying_caller_and_deferred_jobs_share_one_line<St: Reserving>(store: St) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let runs = Runs::default();
    let deferring = editor(&store, &queue, &runs);
    let scheduler = Scheduler::new(queue.clone(), deferring.clone())
        .options(scheduler_options())
        .start();
    let retrying = {
        let runs = Arc::clone(&runs);
        LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
            .on_conflict(Retry::from_limits(RetryLimits {
                backoff: Backoff::exponential(Duration::from_secs(5), Duration::from_secs(5)),
                max_attempts: 10,
                max_wait: Duration::from_secs(60),
            }))
            .layer(service_fn(move |edit: Edit| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.lock()
                        .unwrap()
                        .push((edit.n, Instant::now(), Instant::now()));
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let key = LockKey::new(KEY).unwrap();
    let holder = hold(&store).await;
    assert!(matches!(
        deferring.clone().oneshot(edit(0)).await,
        Ok(Outcome::Deferred(_))
    ));
    let caller = tokio::spawn(retrying.oneshot(edit(1)));
    eventually(Duration::from_secs(5), "the caller is in line", || async {
        // A probe of our own joins behind the job and the caller, then leaves again.
        let probe = Waiter::caller(LockToken::random());
        let ahead = store.join(&key, &probe, None).await.unwrap();
        store.leave(&key, &probe).await.unwrap();
        (ahead == 2).then_some(())
    })
    .await;
    assert!(matches!(
        deferring.clone().oneshot(edit(2)).await,
        Ok(Outcome::Deferred(_))
    ));
    let released = Instant::now();
    assert!(store.release(&key, holder).await.unwrap());
    assert!(matches!(caller.await.unwrap(), Ok(Outcome::Done(()))));
    eventually(Duration::from_secs(10), "all three ran", || async {
        (runs.lock().unwrap().len() == 3).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    let order: Vec<u64> = runs.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(order, [0, 1, 2], "one line, arrival order");
    assert!(
        runs[1].1 - released < Duration::from_secs(2),
        "the caller was woken by its turn, not its 5 s backoff"
    );
}

/// An idempotent deferral: the same delivery deferred twice is stored once.
async fn deferring_the_same_delivery_twice_stores_it_once<St: Reserving>(store: St) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let service = LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
        .on_conflict(Defer::new(queue.clone()).job_id(|edit: &Edit| Some(edit.delivery.clone())))
        .layer(service_fn(|_: Edit| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let _holder = hold(&store).await;
    let Ok(Outcome::Deferred(first)) = service.clone().oneshot(edit(7)).await else {
        panic!("expected a deferral")
    };
    let Ok(Outcome::Deferred(again)) = service.clone().oneshot(edit(7)).await else {
        panic!("expected a deferral")
    };
    assert_eq!(first.job_id.as_str(), "delivery-7");
    assert!(!first.duplicate);
    assert_eq!(again.job_id, first.job_id);
    assert!(again.duplicate, "marked as the existing deferral");
    assert_eq!(again.due, first.due);
    assert_eq!(queue.operator().stats().await.unwrap().waiting, 1, "stored once");
}

/// Idempotency keys are any text: with `/`, `+`, `=`, spaces or non-ASCII, each is deferred
/// once under its own job id; a key too long for an id fails the deferral, never falling back
/// to a random id (which would store a duplicate).
async fn idempotency_keys_of_any_text_dedup_and_too_long_ones_fail<St: Reserving>(store: St) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let service = LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
        .on_conflict(Defer::new(queue.clone()).job_id(|edit: &Edit| Some(edit.delivery.clone())))
        .layer(service_fn(|_: Edit| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let _holder = hold(&store).await;
    let keys = ["a/b", "x+y=", "with space", "ünïcode ✓", "a_2Fb"];
    let mut ids = std::collections::HashSet::new();
    for (n, key) in keys.iter().enumerate() {
        let request = || Edit {
            n: n as u64,
            delivery: key.to_string(),
        };
        let Ok(Outcome::Deferred(first)) = service.clone().oneshot(request()).await else {
            panic!("{key}: expected a deferral")
        };
        let Ok(Outcome::Deferred(again)) = service.clone().oneshot(request()).await else {
            panic!("{key}: expected a deferral")
        };
        assert!(!first.duplicate && again.duplicate, "{key}");
        assert_eq!(again.job_id, first.job_id, "{key}");
        assert!(ids.insert(first.job_id.clone()), "{key} shares an id");
    }
    assert_eq!(queue.operator().stats().await.unwrap().waiting, keys.len() as u64);
    let too_long = Edit {
        n: 99,
        delivery: "é".repeat(100),
    };
    let refused = service.oneshot(too_long).await;
    assert!(matches!(refused, Err(redefer::Error::Strategy(_))), "{refused:?}");
    assert_eq!(
        queue.operator().stats().await.unwrap().waiting,
        keys.len() as u64,
        "nothing stored"
    );
}

/// A fail-fast caller's `retry_after` counts the waiters ahead and the key's typical hold,
/// not the holder's remaining TTL (which renewal keeps full).
async fn retry_after_counts_the_line_and_the_typical_hold<St: Reserving>(store: St) {
    let key = LockKey::new(KEY).unwrap();
    for _ in 0..3 {
        let token = LockToken::random();
        store
            .try_acquire(&key, token, Duration::from_secs(30))
            .await
            .unwrap();
        store
            .release_after(&key, token, Some(Duration::from_millis(200)))
            .await
            .unwrap();
    }
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let deferring = LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
        .ttl(Duration::from_secs(30))
        .on_conflict(Defer::new(queue))
        .layer(service_fn(|_: Edit| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let failing = LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
        .ttl(Duration::from_secs(30))
        .on_conflict(FailFast)
        .layer(service_fn(|_: Edit| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let _holder = hold(&store).await;
    for n in 0..2 {
        assert!(matches!(
            deferring.clone().oneshot(edit(n)).await,
            Ok(Outcome::Deferred(_))
        ));
    }
    match failing.oneshot(edit(9)).await {
        // The holder's rest (at most a typical hold) and a typical hold for each of the two
        // ahead: 600 ms, where the remaining TTL says 30 s.
        Err(Error::Locked {
            retry_after: Some(after),
            ..
        }) => assert_eq!(after, Duration::from_millis(600)),
        other => panic!("expected Locked, got {other:?}"),
    }
}

/// The first in line never comes for its reservation (its scheduler died): the next in line
/// gets the key when the reservation runs out.
async fn when_a_reservation_runs_out_the_next_in_line_gets_the_key<St: Reserving>(store: St) {
    let reservation = Duration::from_millis(300);
    let store = store.reserving(reservation);
    // The first waiter's queue has no scheduler: as if its scheduler was killed.
    let orphaned = DelayQueue::<Edit, _>::new(store.clone(), "orphaned").unwrap();
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let runs = Runs::default();
    let orphan_stack = editor(&store, &orphaned, &runs);
    let service = editor(&store, &queue, &runs);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(scheduler_options())
        .start();
    let holder = hold(&store).await;
    assert!(matches!(
        orphan_stack.oneshot(edit(0)).await,
        Ok(Outcome::Deferred(_))
    ));
    assert!(matches!(
        service.clone().oneshot(edit(1)).await,
        Ok(Outcome::Deferred(_))
    ));
    let released = Instant::now();
    assert!(store.release(&LockKey::new(KEY).unwrap(), holder).await.unwrap());
    eventually(Duration::from_secs(10), "the next in line ran", || async {
        (!runs.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let started = runs.lock().unwrap()[0];
    assert_eq!(started.0, 1);
    assert!(
        started.1 - released <= reservation + Duration::from_millis(100),
        "the next in line started {:?} after the release (reservation {reservation:?})",
        started.1 - released
    );
    scheduler.shutdown().await;
}

/// A key whose only waiter never came for it (its reservation ran out) is free: the next
/// caller takes it at once, even one that comes as a waiter no longer in line (its place was
/// lost: evicted, or its join never landed), a single key and a set's alike. Both once
/// answered "reserved" for a key nobody held nor waited for, and the caller waited its
/// fallback poll.
async fn a_key_whose_only_waiter_never_came_is_free_for_the_next_caller<St: Reserving>(store: St) {
    let reservation = Duration::from_millis(100);
    let store = store.reserving(reservation);
    for (n, as_a_set) in [false, true].into_iter().enumerate() {
        let key = LockKey::new(format!("doc:gone-waiter:{n}")).unwrap();
        let holder = LockToken::random();
        let acquired = store
            .try_acquire(&key, holder, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(matches!(acquired, Acquisition::Acquired(_)), "{acquired:?}");
        let gone = Waiter::caller(LockToken::random());
        store.join(&key, &gone, None).await.unwrap();
        assert!(store.release(&key, holder).await.unwrap());
        // Reserved for `gone`, which never comes.
        tokio::time::sleep(2 * reservation).await;
        let token = LockToken::random();
        let lost = Waiter::caller(token);
        let ttl = Duration::from_secs(30);
        let free = if as_a_set {
            let keys = [key.clone()];
            let taken = store
                .acquire_set(&keys, token, ttl, Some(&lost), Fencing::On)
                .await;
            matches!(taken.unwrap(), SetAcquisition::Acquired(_))
        } else {
            let taken = store
                .acquire(&key, token, ttl, Holders::One, Some(&lost), Fencing::On)
                .await;
            matches!(taken.unwrap(), Acquisition::Acquired(_))
        };
        assert!(free, "the key is free (as a set: {as_a_set})");
    }
}

for_each_store!(
    a_key_whose_only_waiter_never_came_is_free_for_the_next_caller,
    deferred_waiters_run_in_arrival_order_as_soon_as_the_key_is_released,
    a_retrying_caller_and_deferred_jobs_share_one_line,
    deferring_the_same_delivery_twice_stores_it_once,
    idempotency_keys_of_any_text_dedup_and_too_long_ones_fail,
    retry_after_counts_the_line_and_the_typical_hold,
    when_a_reservation_runs_out_the_next_in_line_gets_the_key,
);

/// A store whose pub/sub connection opens `delay` late (through a proxy), a key held, and a
/// `Retry` caller whose fallback poll is a minute. The key is released as soon as the caller
/// is in line; the caller must get it long before its minute. Returns when the caller was in
/// line, from its start.
async fn release_as_the_caller_joins(listens_after: Duration) -> Duration {
    use redefer::store::ListLocks;

    let server = support::RedisServer::start();
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("redis://{}", proxy.local_addr().unwrap());
    let redis_port = server.port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = proxy.accept().await {
            tokio::spawn(async move {
                tokio::time::sleep(listens_after).await;
                let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", redis_port)).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    let store = server
        .store()
        .await
        .with_pubsub(redefer::redis::Client::open(proxy_url).unwrap());
    let key = LockKey::new("doc:late-listener").unwrap();
    let holder = LockToken::random();
    let acquired = store
        .try_acquire(&key, holder, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(acquired, Acquisition::Acquired(_)), "{acquired:?}");
    let a_minute = Backoff::exponential(Duration::from_secs(60), Duration::from_secs(60));
    let service = LockLayer::new(store.clone(), |_: &u32| Some("doc:late-listener".to_string()))
        .on_conflict(
            Retry::new(a_minute)
                .max_attempts(1)
                .max_wait(Duration::from_secs(120)),
        )
        .layer(service_fn(|_: u32| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let started = Instant::now();
    let call = tokio::spawn(service.oneshot(1));
    eventually(Duration::from_secs(5), "the caller waits in line", || {
        let store = store.clone();
        async move {
            let locks = store.list_locks(10).await.ok()?;
            locks.iter().any(|lock| lock.waiters == 1).then_some(())
        }
    })
    .await;
    let in_line = started.elapsed();
    assert!(store.release(&key, holder).await.unwrap());
    let done = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the caller heard of the key (not after its minute)");
    assert!(done.unwrap().unwrap().done().is_some());
    in_line
}

/// A caller joins the line once its store listens to the key: the handoff that follows is
/// heard (it was lost, now and then, when the store began to listen just after the join).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_joins_the_line_once_its_store_listens() {
    let listens_after = Duration::from_millis(300);
    let in_line = release_as_the_caller_joins(listens_after).await;
    assert!(
        in_line >= listens_after,
        "in line after {in_line:?}, before the store listened"
    );
}

/// A store that listens later than a caller waits for it (pub/sub slow or unreachable): the
/// caller joins anyway, the key is handed to it unheard, and it looks again once the store
/// listens, not at its fallback poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_before_the_store_listens_is_not_lost() {
    let listens_after = Duration::from_millis(2_000);
    let in_line = release_as_the_caller_joins(listens_after).await;
    assert!(
        in_line < listens_after,
        "in line after {in_line:?}, once the store listened"
    );
}

/// A store kept from one runtime to the next (a harness or a tool that builds a runtime per
/// task) still hears who a key is handed to: the handoff subscriber starts again on the new
/// runtime once the runtime it ran on is shut down. A `Retry` caller whose backoff is a minute
/// gets the key as soon as it is released, on either runtime.
#[test]
fn a_store_used_from_a_new_runtime_still_hears_handoffs() {
    use redefer::store::ListLocks;

    let server = support::RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(server.store());
    // A key per runtime: the first runtime's last release may not have reached Redis before
    // that runtime was shut down (its connection's task went with it).
    let wait_for_a_release = |runtime: &tokio::runtime::Runtime, store: RedisStore, name: &'static str| {
        runtime.block_on(async move {
            let key = LockKey::new(name).unwrap();
            // The store's connection of the runtime before is gone: it reconnects.
            let holder = LockToken::random();
            let acquired = eventually(Duration::from_secs(10), "the store reconnects", || {
                let (store, key) = (store.clone(), key.clone());
                async move {
                    store
                        .try_acquire(&key, holder, Duration::from_secs(60))
                        .await
                        .ok()
                }
            })
            .await;
            assert!(matches!(acquired, Acquisition::Acquired(_)), "{acquired:?}");
            let a_minute = Backoff::exponential(Duration::from_secs(60), Duration::from_secs(60));
            let service = LockLayer::new(store.clone(), move |_: &u32| Some(name.to_string()))
                .on_conflict(
                    Retry::new(a_minute)
                        .max_attempts(1)
                        .max_wait(Duration::from_secs(120)),
                )
                .layer(service_fn(|_: u32| async {
                    Ok::<_, std::convert::Infallible>(())
                }));
            let call = tokio::spawn(service.oneshot(1));
            eventually(Duration::from_secs(10), "the caller waits in line", || {
                let store = store.clone();
                async move {
                    let locks = store.list_locks(10).await.ok()?;
                    locks.iter().any(|lock| lock.waiters == 1).then_some(())
                }
            })
            .await;
            assert!(store.release(&key, holder).await.unwrap());
            let done = tokio::time::timeout(Duration::from_secs(10), call)
                .await
                .expect("the caller heard the handoff (not its minute of backoff)");
            assert!(done.unwrap().unwrap().done().is_some());
        })
    };
    wait_for_a_release(&runtime, store.clone(), "doc:first");
    drop(runtime);
    let next = tokio::runtime::Runtime::new().unwrap();
    wait_for_a_release(&next, store, "doc:second");
}
