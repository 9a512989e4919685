//! Conformance of the semaphore operations of every store (the semantics `LockStore`
//! documents), and the lock layer with N permits per key end to end.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::Shorthand;
use redefer::guard::Waiter;
use redefer::lock::{Acquisition, LockStore};
use redefer::queue::{DelayQueue, QueueStats, QueueStore};
use redefer::semaphore::Permits;
use redefer::store::ListLocks;
use redefer::strategy::{Defer, Retry};
use redefer::{
    Backoff, Fencing, FencingToken, LockKey, LockLayer, LockToken, MemoryStore, Outcome, RedisStore,
    Scheduler, SchedulerOptions, current_lock,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const LONG: Duration = Duration::from_secs(60);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

/// Stores whose reservation time a test can shorten.
trait Reserving: LockStore + QueueStore + ListLocks {
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

async fn take<S: LockStore>(
    store: &S,
    key: &LockKey,
    token: LockToken,
    permits: u32,
) -> Option<FencingToken> {
    take_as(store, key, token, permits, None, LONG).await
}

async fn take_as<S: LockStore>(
    store: &S,
    key: &LockKey,
    token: LockToken,
    permits: u32,
    waiter: Option<&Waiter>,
    ttl: Duration,
) -> Option<FencingToken> {
    match store
        .try_acquire_permit(key, token, ttl, permits, waiter, Fencing::On)
        .await
        .unwrap()
    {
        Acquisition::Acquired(fence) => Some(fence.expect("fencing is on")),
        Acquisition::Held { .. } => None,
    }
}

async fn at_most_n_hold_a_key_and_each_permit_gets_a_higher_fence<S: Reserving>(store: S) {
    for permits in [1u32, 3] {
        let k = key(&format!("upstream:{permits}"));
        let mut last = FencingToken(0);
        let mut holders = Vec::new();
        for _ in 0..permits {
            let token = LockToken::random();
            let fence = take(&store, &k, token, permits).await.expect("a free permit");
            assert!(fence > last, "{fence:?} after {last:?}");
            last = fence;
            holders.push(token);
        }
        match store
            .try_acquire_permit(&k, LockToken::random(), LONG, permits, None, Fencing::On)
            .await
            .unwrap()
        {
            Acquisition::Held {
                remaining: Some(remaining),
                ahead: 0,
                reserved: false,
                ..
            } => assert!(remaining > LONG - Duration::from_secs(5), "{remaining:?}"),
            other => panic!("{permits} permits taken, yet {other:?}"),
        }
        assert!(store.release_permit(&k, holders[0], permits, None).await.unwrap());
        let next = take(&store, &k, LockToken::random(), permits)
            .await
            .expect("the freed permit");
        assert!(next > last, "the next permit's fence {next:?} is above {last:?}");
        assert!(take(&store, &k, LockToken::random(), permits).await.is_none());
    }
}

async fn a_resent_acquire_finds_its_own_permit_and_no_lower_fence<S: Reserving>(store: S) {
    let k = key("upstream:1");
    let token = LockToken::random();
    let first = take(&store, &k, token, 2).await.expect("first");
    let other = take(&store, &k, LockToken::random(), 2)
        .await
        .expect("second permit");
    let again = take(&store, &k, token, 2).await.expect("re-sent acquire");
    // Its own fence again, or (a key's first permit on Redis, held as a key of its own, as the
    // mutex's) a new one above it: never lower than the first reply's.
    assert!(
        again >= first,
        "the re-sent acquire's fence {again:?} is below {first:?}"
    );
    assert!(other > first);
    assert!(
        take(&store, &k, LockToken::random(), 2).await.is_none(),
        "still two holders"
    );
    // Below the limit as well: the permit is not taken twice.
    let roomy = key("upstream:2");
    let first = take(&store, &roomy, token, 3).await.expect("first");
    let again = take(&store, &roomy, token, 3).await.expect("re-sent acquire");
    assert!(
        again >= first,
        "below the limit, the re-sent acquire's fence {again:?} is below {first:?}"
    );
    for _ in 0..2 {
        take(&store, &roomy, LockToken::random(), 3)
            .await
            .expect("the two other permits");
    }
    assert!(
        take(&store, &roomy, LockToken::random(), 3).await.is_none(),
        "three holders: the re-sent acquire counted once"
    );
}

/// A short permit taken beside a long one leaves the long one held: a semaphore's records
/// live as long as its longest permit, not its last.
async fn a_short_permit_beside_a_long_one_leaves_the_long_one_held<S: Reserving>(store: S) {
    let k = key("upstream:1");
    let long = LockToken::random();
    let fence = take(&store, &k, long, 2).await.expect("the long permit");
    take_as(
        &store,
        &k,
        LockToken::random(),
        2,
        None,
        Duration::from_millis(200),
    )
    .await
    .expect("the short permit");
    // Its holder dies: once its TTL ran out, one permit comes free, not two.
    eventually(Duration::from_secs(5), "the short permit came free", || async {
        take(&store, &k, LockToken::random(), 2).await
    })
    .await;
    assert!(
        take(&store, &k, LockToken::random(), 2).await.is_none(),
        "the long permit is still held"
    );
    assert!(
        store.extend_permit(&k, long, LONG).await.unwrap(),
        "and still its holder's"
    );
    let again = take(&store, &k, long, 2).await;
    assert!(
        again >= Some(fence),
        "with its fence or above: {again:?} against {fence:?}"
    );
}

async fn release_and_extend_act_only_on_the_callers_permit<S: Reserving>(store: S) {
    let k = key("upstream:1");
    let token = LockToken::random();
    let stranger = LockToken::random();
    take(&store, &k, token, 2).await.expect("a permit");
    assert!(!store.extend_permit(&k, stranger, LONG).await.unwrap());
    assert!(!store.release_permit(&k, stranger, 2, None).await.unwrap());
    assert!(store.extend_permit(&k, token, LONG).await.unwrap());
    assert!(store.release_permit(&k, token, 2, None).await.unwrap());
    assert!(
        !store.release_permit(&k, token, 2, None).await.unwrap(),
        "released twice"
    );
    assert!(
        !store.extend_permit(&k, token, LONG).await.unwrap(),
        "extended after its release"
    );
}

/// A holder that dies frees its permit when its lease runs out, never before; extended, the
/// permit outlives its first TTL.
async fn a_dead_holders_permit_comes_free_when_its_lease_runs_out<S: Reserving>(store: S) {
    let k = key("upstream:1");
    let ttl = Duration::from_millis(400);
    let renewed = LockToken::random();
    take_as(&store, &k, renewed, 2, None, ttl)
        .await
        .expect("a permit");
    let sent = Instant::now();
    let dying = LockToken::random();
    take_as(&store, &k, dying, 2, None, ttl)
        .await
        .expect("the dying holder's permit");
    let taken_at = eventually(
        Duration::from_secs(5),
        "the dead holder's permit came free",
        || async {
            assert!(
                store.extend_permit(&k, renewed, ttl).await.unwrap(),
                "the renewed permit lives"
            );
            take_as(&store, &k, LockToken::random(), 2, None, LONG)
                .await
                .map(|_| Instant::now())
        },
    )
    .await;
    assert!(
        taken_at - sent >= ttl - Duration::from_millis(5),
        "a dead holder's permit was taken {:?} after its acquire (TTL {ttl:?})",
        taken_at - sent
    );
    assert!(
        store.extend_permit(&k, renewed, ttl).await.unwrap(),
        "renewed past its first TTL"
    );
    assert!(
        !store.release_permit(&k, dying, 2, None).await.unwrap(),
        "a permit past its deadline is no longer its holder's to release"
    );
}

/// Freed permits are reserved for the first in line, in arrival order; a newcomer finds them taken; a waiter takes the permit reserved for it.
async fn freed_permits_go_to_the_line_in_arrival_order<S: Reserving>(store: S) {
    let k = key("upstream:1");
    let holders = [LockToken::random(), LockToken::random()];
    for holder in holders {
        take(&store, &k, holder, 2).await.expect("a permit");
    }
    let line: Vec<Waiter> = (0..3).map(|_| Waiter::caller(LockToken::random())).collect();
    for (place, waiter) in line.iter().enumerate() {
        assert_eq!(
            store.join_permits(&k, waiter, None, 2).await.unwrap(),
            place as u64
        );
    }
    assert!(store.release_permit(&k, holders[0], 2, None).await.unwrap());
    match store
        .try_acquire_permit(&k, LockToken::random(), LONG, 2, None, Fencing::On)
        .await
        .unwrap()
    {
        Acquisition::Held {
            reserved: true,
            ahead: 3,
            ..
        } => {}
        other => panic!("a newcomer met a reserved permit as {other:?}"),
    }
    let token = LockToken::random();
    assert!(
        take_as(&store, &k, token, 2, Some(&line[1]), LONG)
            .await
            .is_none(),
        "the second in line takes no permit reserved for the first"
    );
    take_as(&store, &k, token, 2, Some(&line[0]), LONG)
        .await
        .expect("the first in line takes its permit");
    assert!(store.release_permit(&k, holders[1], 2, None).await.unwrap());
    assert!(
        take_as(&store, &k, LockToken::random(), 2, Some(&line[2]), LONG)
            .await
            .is_none(),
        "the permit is reserved for the second in line"
    );
    // A waiter that gives up passes its reservation on.
    store.leave_permits(&k, &line[1], 2).await.unwrap();
    take_as(&store, &k, LockToken::random(), 2, Some(&line[2]), LONG)
        .await
        .expect("the third in line takes the permit the second left");
}

/// A limit lowered while the key is held: the holders above it finish, and nobody new enters
/// until fewer than the new limit hold the key. Raised, it admits at once.
async fn a_changed_limit_applies_to_the_next_acquire<S: Reserving>(store: S) {
    let k = key("tenant:1");
    let holders: Vec<LockToken> = (0..3).map(|_| LockToken::random()).collect();
    for holder in &holders {
        take(&store, &k, *holder, 3).await.expect("a permit");
    }
    assert!(
        take(&store, &k, LockToken::random(), 2).await.is_none(),
        "3 hold, limit 2"
    );
    assert!(store.release_permit(&k, holders[0], 2, None).await.unwrap());
    assert!(
        take(&store, &k, LockToken::random(), 2).await.is_none(),
        "2 hold, limit 2"
    );
    assert!(
        store.extend_permit(&k, holders[1], LONG).await.unwrap(),
        "holders above the limit keep theirs"
    );
    assert!(
        take(&store, &k, LockToken::random(), 3).await.is_some(),
        "2 hold, limit raised to 3"
    );
    assert!(
        take(&store, &k, LockToken::random(), 0).await.is_none(),
        "a limit of 0 closes the key"
    );
}

/// A reservation nobody takes runs out: its waiter leaves the line, and the permit goes to the
/// next in line at the next operation on the key.
async fn an_unused_reservation_runs_out_and_goes_to_the_next<S: Reserving>(store: S) {
    let reservation = Duration::from_millis(200);
    let store = store.reserving(reservation);
    let k = key("upstream:1");
    let holder = LockToken::random();
    take(&store, &k, holder, 1).await.expect("the permit");
    let (gone, next) = (
        Waiter::caller(LockToken::random()),
        Waiter::caller(LockToken::random()),
    );
    store.join_permits(&k, &gone, None, 1).await.unwrap();
    store.join_permits(&k, &next, None, 1).await.unwrap();
    assert!(store.release_permit(&k, holder, 1, None).await.unwrap());
    let released = Instant::now();
    eventually(
        Duration::from_secs(5),
        "the next in line got the permit",
        || async { take_as(&store, &k, LockToken::random(), 1, Some(&next), LONG).await },
    )
    .await;
    assert!(released.elapsed() >= reservation - Duration::from_millis(5));
    assert!(
        take_as(&store, &k, LockToken::random(), 1, Some(&gone), LONG)
            .await
            .is_none(),
        "the waiter whose reservation ran out left the line"
    );
}

/// What operators see (`redefer locks`, the dashboard): permits held, the limit, the line,
/// the latest fence; a mutex beside it shows 1 / 1.
async fn the_listing_shows_permits_held_the_limit_and_the_line<S: Reserving>(store: S) {
    let k = key("tenant:3");
    let mut last = None;
    for _ in 0..2 {
        last = take(&store, &k, LockToken::random(), 3).await;
    }
    store
        .join_permits(&k, &Waiter::caller(LockToken::random()), None, 3)
        .await
        .unwrap();
    assert!(matches!(
        store
            .try_acquire(&key("order:1"), LockToken::random(), LONG)
            .await
            .unwrap(),
        Acquisition::Acquired(_)
    ));
    let mut locks = store.list_locks(100).await.unwrap();
    locks.sort_by(|a, b| a.key.cmp(&b.key));
    let shown: Vec<_> = locks
        .iter()
        .map(|lock| (lock.key.as_str(), lock.holders, lock.limit, lock.waiters))
        .collect();
    // The waiter that joined found a permit free: it is reserved for it.
    assert_eq!(shown, [("order:1", 1, Some(1), 0), ("tenant:3", 2, Some(3), 1)]);
    assert_eq!(locks[1].fence, last.expect("a permit").0);
    assert!(
        locks[1]
            .reserved_for
            .as_deref()
            .is_some_and(|reserved| reserved.starts_with("c|"))
    );
}

/// A key held by its first permit alone, with a caller in line behind it, is listed with its
/// holder, its limit and its line (the first permit's value then carries the line's mark).
async fn a_full_key_held_by_one_permit_is_listed_with_its_limit_and_line<S: Reserving>(store: S) {
    let k = key("tenant:5");
    take(&store, &k, LockToken::random(), 1)
        .await
        .expect("the permit of a free key");
    store
        .join_permits(&k, &Waiter::caller(LockToken::random()), None, 1)
        .await
        .unwrap();
    let locks = store.list_locks(100).await.unwrap();
    let shown: Vec<_> = locks
        .iter()
        .map(|lock| (lock.key.as_str(), lock.holders, lock.limit, lock.waiters))
        .collect();
    assert_eq!(shown, [("tenant:5", 1, Some(1), 1)]);
}

/// A permit renewed past its first TTL keeps its key listed with its limit (the limit's record
/// lived only as long as the first TTL: the key was then listed with limit 0, which reads as
/// "closed").
async fn a_permit_renewed_past_its_first_ttl_is_listed_with_its_limit<S: Reserving>(store: S) {
    let k = key("tenant:4");
    let ttl = Duration::from_millis(200);
    let token = LockToken::random();
    take_as(&store, &k, token, 3, None, ttl)
        .await
        .expect("a permit of a free key");
    // Renewed as a running handler's permit is, at a third of its TTL, past three TTLs.
    let until = tokio::time::Instant::now() + ttl * 3;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(ttl / 3).await;
        assert!(
            store.extend_permit(&k, token, ttl).await.unwrap(),
            "renewed in time"
        );
    }
    let locks = store.list_locks(100).await.unwrap();
    let listed: Vec<_> = locks
        .iter()
        .map(|lock| (lock.key.as_str(), lock.holders, lock.limit))
        .collect();
    assert_eq!(listed, [("tenant:4", 1, Some(3))]);
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Export {
    n: u64,
}

/// Runs of a handler: how many run now, the most at once, the fences seen, the order of starts.
#[derive(Default)]
struct Runs {
    now: AtomicUsize,
    most: AtomicUsize,
    fences: Mutex<Vec<FencingToken>>,
    started: Mutex<Vec<u64>>,
}

fn exporter<St: Reserving>(
    store: &St,
    permits: u32,
    queue: &DelayQueue<Export, St>,
    runs: &Arc<Runs>,
) -> impl tower::Service<
    Export,
    Response = Outcome<()>,
    Error = redefer::Error<std::convert::Infallible>,
    Future: Send,
> + Clone
+ Send
+ 'static {
    let runs = Arc::clone(runs);
    LockLayer::new(store.clone(), |_: &Export| Some("tenant:7".to_string()))
        .permits(permits)
        .on_conflict(Defer::new(queue.clone()))
        .layer(service_fn(move |export: Export| {
            let runs = Arc::clone(&runs);
            async move {
                let running = runs.now.fetch_add(1, Ordering::SeqCst) + 1;
                runs.most.fetch_max(running, Ordering::SeqCst);
                runs.started.lock().unwrap().push(export.n);
                let fence = current_lock()
                    .and_then(|lock| lock.fence)
                    .expect("a fence per permit");
                runs.fences.lock().unwrap().push(fence);
                tokio::time::sleep(Duration::from_millis(40)).await;
                runs.now.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(())
            }
        }))
}

/// Twelve exports deferred behind three holders of a key with three permits: as permits come
/// free they run three at a time at most, in arrival order, each once, none buried, and every
/// run has a fence of its own.
async fn deferred_requests_run_n_at_a_time_in_arrival_order<S: Reserving>(store: S) {
    let queue = DelayQueue::<Export, _>::new(store.clone(), "exports").unwrap();
    let runs = Arc::new(Runs::default());
    let service = exporter(&store, 3, &queue, &runs);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(500),
            ..SchedulerOptions::default()
        })
        .start();
    let permits = Permits::new(store.clone(), 3);
    let k = key("tenant:7");
    let holders: Vec<LockToken> = (0..3).map(|_| LockToken::random()).collect();
    for holder in &holders {
        assert!(matches!(
            permits.try_acquire(&k, *holder, LONG).await.unwrap(),
            Acquisition::Acquired(_)
        ));
    }
    for n in 0..12 {
        match service.clone().oneshot(Export { n }).await {
            Ok(Outcome::Deferred(_)) => {}
            other => panic!("export {n}: expected a deferral, got {other:?}"),
        }
    }
    for holder in &holders {
        assert!(permits.release(&k, *holder).await.unwrap());
    }
    eventually(Duration::from_secs(10), "all twelve exports ran", || async {
        (runs.started.lock().unwrap().len() == 12).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!((report.acked, report.buried), (12, 0), "{report:?}");
    let most = runs.most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} exports ran at once with 3 permits");
    assert!(most >= 2, "the permits were used one at a time only ({most})");
    let mut fences = runs.fences.lock().unwrap().clone();
    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 12, "every run has a fence of its own");
    let started = runs.started.lock().unwrap().clone();
    // Three permits are reserved at a time: a run may start before an earlier one of its
    // batch, never before one of an earlier batch.
    for (at, n) in started.iter().enumerate() {
        assert!(
            (*n as usize) / 3 <= at / 3 + 1,
            "export {n} started {at}th: {started:?}"
        );
    }
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// Twenty callers that wait in line (`Retry`) for a key with four permits: never more than four
/// at once, all served.
async fn retrying_callers_share_n_permits<S: Reserving>(store: S) {
    let runs = Arc::new(Runs::default());
    let service = {
        let runs = Arc::clone(&runs);
        LockLayer::new(store.clone(), |_: &u64| Some("tenant:9".to_string()))
            .permits_by(|key: &LockKey| if key.as_str() == "tenant:9" { 4 } else { 1 })
            .on_conflict(Retry::new(Backoff::exponential(
                Duration::from_millis(5),
                Duration::from_secs(1),
            )))
            .layer(service_fn(move |n: u64| {
                let runs = Arc::clone(&runs);
                async move {
                    let running = runs.now.fetch_add(1, Ordering::SeqCst) + 1;
                    runs.most.fetch_max(running, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    runs.now.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(n)
                }
            }))
    };
    let calls: Vec<_> = (0..20)
        .map(|n| tokio::spawn(service.clone().oneshot(n)))
        .collect();
    for call in calls {
        let outcome = call.await.unwrap();
        assert!(matches!(outcome, Ok(Outcome::Done(_))), "{outcome:?}");
    }
    let most = runs.most.load(Ordering::SeqCst);
    assert!((2..=4).contains(&most), "{most} ran at once with 4 permits");
}

/// A key whose limit is 0 is closed: under every strategy a request is refused with
/// `Error::Closed` at once (no invented wait, no job stored); once the limit opens it, it runs.
async fn a_closed_key_is_refused_under_every_strategy_and_nothing_is_stored<S: Reserving>(store: S) {
    use redefer::strategy::FailFast;

    let queue = DelayQueue::<u64, _>::new(store.clone(), "closed").unwrap();
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let limit = {
        let open = Arc::clone(&open);
        move |_: &LockKey| u32::from(open.load(Ordering::SeqCst))
    };
    let layer = LockLayer::new(store.clone(), |_: &u64| Some("tenant:closed".to_string())).permits_by(limit);
    let handler = service_fn(|n: u64| async move { Ok::<_, std::convert::Infallible>(n) });
    let fail_fast = layer.clone().on_conflict(FailFast).layer(handler);
    let retry = layer
        .clone()
        .on_conflict(Retry::new(Backoff::default()))
        .layer(handler);
    let defer = layer
        .clone()
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    let started = Instant::now();
    for outcome in [
        fail_fast.clone().oneshot(1).await,
        retry.oneshot(2).await,
        defer.oneshot(3).await,
    ] {
        match outcome {
            Err(redefer::Error::Closed { key }) => assert_eq!(key.as_str(), "tenant:closed"),
            other => panic!("a closed key: {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once, not after retries"
    );
    assert_eq!(
        queue.operator().stats().await.unwrap(),
        QueueStats::default(),
        "nothing stored"
    );
    open.store(true, Ordering::SeqCst);
    assert!(matches!(fail_fast.oneshot(4).await, Ok(Outcome::Done(4))));
}

#[test]
#[should_panic(expected = "at least one permit")]
fn a_semaphore_of_no_permits_is_refused_as_config_refuses_it() {
    let _ = LockLayer::new(MemoryStore::new(), |_: &u64| Some("k".to_string())).permits(0);
}

/// A blocked caller's typical hold is the key's last reported hold, as the guide says, on
/// every store (the memory store once averaged the holds instead).
async fn the_typical_hold_is_the_last_reported_hold<S: Reserving>(store: S) {
    let key = key("typical-hold");
    let (first, second) = (LockToken::random(), LockToken::random());
    assert!(take(&store, &key, first, 1).await.is_some());
    assert!(
        store
            .release_permit(&key, first, 1, Some(Duration::from_millis(900)))
            .await
            .unwrap()
    );
    assert!(take(&store, &key, second, 1).await.is_some());
    assert!(
        store
            .release_permit(&key, second, 1, Some(Duration::from_millis(100)))
            .await
            .unwrap()
    );
    assert!(take(&store, &key, first, 1).await.is_some());
    let blocked = store
        .try_acquire_permit(&key, LockToken::random(), LONG, 1, None, Fencing::On)
        .await
        .unwrap();
    let Acquisition::Held { typical_hold, .. } = blocked else {
        panic!("the one permit is held: {blocked:?}");
    };
    assert_eq!(typical_hold, Some(Duration::from_millis(100)));
}

/// A waiter whose reservation ran out, and that joins again (a deferred job claimed late),
/// stands in line again, before those who come after it (on Redis the join once dropped it
/// from the line after putting it there).
async fn a_waiter_that_joins_again_after_its_reservation_ran_out_is_in_line<S: Reserving>(store: S) {
    let reservation = Duration::from_millis(100);
    let store = store.reserving(reservation);
    let k = key("late:1");
    // One of two permits is held for long: the key's records outlive the reservation.
    take(&store, &k, LockToken::random(), 2).await.expect("a permit");
    let (late, next) = (
        Waiter::caller(LockToken::random()),
        Waiter::caller(LockToken::random()),
    );
    // The other permit is reserved for `late` as it joins, and it does not come in time.
    store.join_permits(&k, &late, None, 2).await.unwrap();
    tokio::time::sleep(2 * reservation).await;
    store.join_permits(&k, &late, None, 2).await.unwrap();
    let ahead = store.join_permits(&k, &next, None, 2).await.unwrap();
    assert_eq!(ahead, 1, "the late waiter stands before the next");
    assert!(
        take_as(&store, &k, LockToken::random(), 2, Some(&late), LONG)
            .await
            .is_some(),
        "the permit is the late waiter's"
    );
}

for_each_store!(
    a_waiter_that_joins_again_after_its_reservation_ran_out_is_in_line,
    the_typical_hold_is_the_last_reported_hold,
    a_closed_key_is_refused_under_every_strategy_and_nothing_is_stored,
    at_most_n_hold_a_key_and_each_permit_gets_a_higher_fence,
    a_resent_acquire_finds_its_own_permit_and_no_lower_fence,
    release_and_extend_act_only_on_the_callers_permit,
    a_dead_holders_permit_comes_free_when_its_lease_runs_out,
    a_short_permit_beside_a_long_one_leaves_the_long_one_held,
    freed_permits_go_to_the_line_in_arrival_order,
    a_changed_limit_applies_to_the_next_acquire,
    an_unused_reservation_runs_out_and_goes_to_the_next,
    deferred_requests_run_n_at_a_time_in_arrival_order,
    retrying_callers_share_n_permits,
    the_listing_shows_permits_held_the_limit_and_the_line,
    a_full_key_held_by_one_permit_is_listed_with_its_limit_and_line,
    a_permit_renewed_past_its_first_ttl_is_listed_with_its_limit,
);
