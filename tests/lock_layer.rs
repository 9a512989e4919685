//! Conformance of `LockLayer` over every store: mutual exclusion, fencing, release on every exit
//! path, renewal, and the built-in conflict strategies.

use crate::support;

use crate::support::Shorthand;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use redefer::lock::{Acquisition, LockStore};
use redefer::strategy::{Conflict, ConflictStrategy, Decision, FailFast, Retry, Switch};
use redefer::{
    Backoff, BoxError, Error, Fencing, FencingToken, LockKey, LockLayer, LockToken, Outcome, current_lock,
};
use tokio::sync::{Mutex, oneshot};
use tower::{Layer, Service, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const LONG: Duration = Duration::from_secs(60);

/// Requests are order numbers; this one is the order every test fights over.
const HOT: u32 = 1;

fn hot_key() -> LockKey {
    LockKey::new("order:1").unwrap()
}

fn by_order(order: &u32) -> Option<String> {
    Some(format!("order:{order}"))
}

/// Whether the lock on `key` is free right now (taking it and giving it back at once).
async fn is_free<S: LockStore>(store: &S, key: &LockKey) -> bool {
    let probe = LockToken::random();
    match store.try_acquire(key, probe, LONG).await.unwrap() {
        Acquisition::Acquired(_) => {
            store.release(key, probe).await.unwrap();
            true
        }
        Acquisition::Held { .. } => false,
    }
}

/// Holds `key` with a fresh token, as another process would.
async fn hold<S: LockStore>(store: &S, key: &LockKey, ttl: Duration) -> LockToken {
    let token = LockToken::random();
    assert!(matches!(
        store.try_acquire(key, token, ttl).await.unwrap(),
        Acquisition::Acquired(_)
    ));
    token
}

/// Wraps a strategy and reports every conflict it sees.
#[derive(Clone)]
struct Observed<C> {
    strategy: C,
    conflicts: Arc<AtomicU32>,
    /// How long the call had waited at each conflict, in order.
    waited: Arc<std::sync::Mutex<Vec<Duration>>>,
    first_conflict: Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
}

impl<C> Observed<C> {
    fn new(strategy: C) -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let observed = Observed {
            strategy,
            conflicts: Arc::default(),
            waited: Arc::default(),
            first_conflict: Arc::new(std::sync::Mutex::new(Some(tx))),
        };
        (observed, rx)
    }
}

impl<Req, C: ConflictStrategy<Req>> ConflictStrategy<Req> for Observed<C> {
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        self.conflicts.fetch_add(1, Ordering::SeqCst);
        self.waited.lock().unwrap().push(conflict.waited);
        if let Some(tx) = self.first_conflict.lock().unwrap().take() {
            let _ = tx.send(());
        }
        self.strategy.on_conflict(conflict, request)
    }
}

/// 16 tasks make 10 requests each on one key, retrying until they get it; asserts no two
/// handlers ever overlapped, and returns the fences the handlers saw, in acquisition order.
async fn sixteen_tasks_on_one_key<S: LockStore>(store: S, fencing: Fencing) -> Vec<Option<FencingToken>> {
    let inside = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (inside, fences) = (inside.clone(), fences.clone());
        service_fn(move |_: u32| {
            let (inside, fences) = (inside.clone(), fences.clone());
            async move {
                let overlapping = inside.fetch_add(1, Ordering::SeqCst);
                fences
                    .lock()
                    .await
                    .push(current_lock().expect("runs under the lock").fence);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(overlapping)
            }
        })
    };
    let retry_forever =
        Retry::new(Backoff::exponential(Duration::from_millis(1), Duration::from_millis(4)).with_jitter(1.0))
            .max_attempts(u32::MAX)
            .max_wait(LONG);
    let service = LockLayer::new(store, by_order)
        .fencing(fencing)
        .on_conflict(retry_forever)
        .layer(handler);

    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let mut overlaps = 0;
                for _ in 0..10 {
                    overlaps += service.clone().oneshot(HOT).await.unwrap().done().unwrap();
                }
                overlaps
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), 0, "a handler found another inside");
    }
    let fences = fences.lock().await.clone();
    assert_eq!(fences.len(), 160);
    fences
}

async fn requests_on_one_key_never_overlap_and_fences_increase<S: LockStore>(store: S) {
    let fences = sixteen_tasks_on_one_key(store, Fencing::On).await;
    assert!(
        fences.iter().all(Option::is_some),
        "every holding is fenced: {fences:?}"
    );
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences in acquisition order: {fences:?}"
    );
}

async fn without_fencing_requests_never_overlap_and_get_no_token<S: LockStore>(store: S) {
    let fences = sixteen_tasks_on_one_key(store, Fencing::Off).await;
    assert!(fences.iter().all(Option::is_none), "no fencing token: {fences:?}");
}

async fn released_after_success<S: LockStore>(store: S) {
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(LONG)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    assert!(service.oneshot(HOT).await.unwrap().done().is_some());
    assert!(is_free(&store, &hot_key()).await);
}

async fn released_after_inner_error<S: LockStore>(store: S) {
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(LONG)
        .layer(service_fn(|_: u32| async { Err::<(), _>("handler failed") }));
    assert!(matches!(
        service.oneshot(HOT).await,
        Err(Error::Inner("handler failed"))
    ));
    assert!(is_free(&store, &hot_key()).await);
}

async fn released_after_inner_panic<S: LockStore>(store: S) {
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(LONG)
        .layer(service_fn(|_: u32| async {
            panic!("handler panicked");
            #[allow(unreachable_code)]
            Ok::<(), Infallible>(())
        }));
    let joined = tokio::spawn(service.oneshot(HOT)).await;
    assert!(joined.unwrap_err().is_panic(), "the panic reaches the caller");
    assert!(
        is_free(&store, &hot_key()).await,
        "released before the panic propagated"
    );
}

async fn released_after_the_caller_drops_the_future<S: LockStore>(store: S) {
    let (entered_tx, entered_rx) = oneshot::channel();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(LONG)
        .layer(service_fn(move |_: u32| {
            let entered_tx = entered_tx.clone();
            async move {
                let _ = entered_tx.lock().unwrap().take().unwrap().send(());
                std::future::pending::<Result<(), Infallible>>().await
            }
        }));
    let call = tokio::spawn(service.oneshot(HOT));
    entered_rx.await.unwrap();
    assert!(!is_free(&store, &hot_key()).await, "held while the handler runs");
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    eventually(
        Duration::from_secs(5),
        "the lock is released after cancellation (TTL is 60 s)",
        || async { is_free(&store, &hot_key()).await.then_some(()) },
    )
    .await;
}

async fn renewal_keeps_the_lock_through_a_handler_three_ttls_long<S: LockStore>(store: S) {
    // Long enough that a renewal two thirds of a TTL late (a loaded two-core machine running
    // the suite's tests side by side stalled one 200 ms) still lands: what is tested is that
    // renewal happens, not how promptly.
    let ttl = Duration::from_millis(1_000);
    let (entered_tx, entered_rx) = oneshot::channel::<()>();
    let (finish_tx, finish_rx) = oneshot::channel::<()>();
    let channels = Arc::new(std::sync::Mutex::new(Some((entered_tx, finish_rx))));
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(ttl)
        .layer(service_fn(move |_: u32| {
            let channels = channels.clone();
            async move {
                let (entered_tx, finish_rx) = channels.lock().unwrap().take().unwrap();
                entered_tx.send(()).unwrap();
                finish_rx.await.unwrap();
                Ok::<_, Infallible>(current_lock().unwrap().fence)
            }
        }));
    let call = tokio::spawn(service.oneshot(HOT));
    entered_rx.await.unwrap();
    // Probe the lock throughout three TTLs: it must stay held the whole time.
    let until = tokio::time::Instant::now() + ttl * 3;
    let mut probes = 0;
    while tokio::time::Instant::now() < until {
        assert!(
            !is_free(&store, &hot_key()).await,
            "lock free after {probes} probes"
        );
        probes += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    finish_tx.send(()).unwrap();
    assert!(call.await.unwrap().unwrap().done().is_some());
    assert!(is_free(&store, &hot_key()).await);
}

/// A handler that blocks its worker thread (synchronous I/O, a CPU loop) for three TTLs keeps
/// its lock: the renewal does not wait for the handler's task to be polled.
async fn a_handler_blocking_its_thread_keeps_the_lock<S: LockStore>(store: S) {
    let ttl = Duration::from_millis(300);
    let (entered_tx, entered_rx) = oneshot::channel::<()>();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let returned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(ttl)
        .layer(service_fn({
            let returned = returned.clone();
            move |_: u32| {
                let (entered_tx, returned) = (entered_tx.clone(), returned.clone());
                async move {
                    entered_tx.lock().unwrap().take().unwrap().send(()).unwrap();
                    std::thread::sleep(ttl * 3);
                    returned.store(true, Ordering::SeqCst);
                    Ok::<_, Infallible>(current_lock().unwrap().fence)
                }
            }
        }));
    // The call blocks a worker; the test's own task runs on the runtime's main thread.
    let call = tokio::spawn(service.oneshot(HOT));
    entered_rx.await.unwrap();
    let entered = tokio::time::Instant::now();
    // How long after the handler began the last probe that found the key held returned.
    let mut probed_until = Duration::ZERO;
    while !call.is_finished() {
        let free = is_free(&store, &hot_key()).await;
        // Free after the handler returned is its release.
        if returned.load(Ordering::SeqCst) {
            break;
        }
        assert!(
            !free,
            "another request took the key {:?} after the handler began",
            entered.elapsed()
        );
        probed_until = entered.elapsed();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        probed_until > ttl * 2,
        "the probes stalled: the last returned {probed_until:?} after the handler began"
    );
    let outcome = call.await.unwrap();
    assert!(
        matches!(outcome, Ok(Outcome::Done(Some(_)))),
        "the call ended with {outcome:?}"
    );
    assert!(is_free(&store, &hot_key()).await);
}

/// The same on a quiet runtime: nothing else happens while the handler blocks (the test only
/// awaits the call), so no other worker is woken to drive the runtime's timers and I/O; the
/// renewal still runs (started by the watchdog thread). After its block, the handler finds
/// its lock still in place.
async fn a_handler_blocking_its_thread_on_a_quiet_runtime_keeps_the_lock<S: LockStore>(store: S) {
    let ttl = Duration::from_millis(300);
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(ttl)
        .layer(service_fn({
            let store = store.clone();
            move |_: u32| {
                let store = store.clone();
                async move {
                    std::thread::sleep(ttl * 3);
                    Ok::<_, Infallible>(!is_free(&store, &hot_key()).await)
                }
            }
        }));
    let outcome = tokio::spawn(service.oneshot(HOT)).await.unwrap();
    assert!(
        matches!(outcome, Ok(Outcome::Done(true))),
        "the lock ran out under the blocked handler: {outcome:?}"
    );
}

/// A fail-fast hint is the holder's expected rest: a typical hold (here, with nothing measured,
/// the default), never more than the holder's remaining TTL, which it follows down.
async fn fail_fast_reports_the_remaining_ttl<S: LockStore>(store: S) {
    let holder = hold(&store, &hot_key(), Duration::from_secs(10)).await;
    let service =
        LockLayer::new(store.clone(), by_order).layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let retry_after = |result: Result<Outcome<()>, Error<Infallible>>| match result {
        Err(Error::Locked {
            key,
            retry_after: Some(after),
        }) => {
            assert_eq!(key, hot_key());
            after
        }
        other => panic!("expected Locked with a retry-after, got {other:?}"),
    };
    let first = retry_after(service.clone().oneshot(HOT).await);
    assert_eq!(first, redefer::lock::DEFAULT_TYPICAL_HOLD, "not the 10 s TTL");
    // The holder's lock runs out sooner than a typical hold: the hint follows it.
    assert!(
        store
            .extend(&hot_key(), holder, Duration::from_millis(60))
            .await
            .unwrap()
    );
    let second = retry_after(service.oneshot(HOT).await);
    assert!(second <= Duration::from_millis(60), "{second:?}");
}

async fn retry_succeeds_once_the_holder_releases<S: LockStore>(store: S) {
    let holder = hold(&store, &hot_key(), LONG).await;
    let (strategy, first_conflict) = Observed::new(
        Retry::new(Backoff::exponential(
            Duration::from_millis(2),
            Duration::from_millis(20),
        ))
        .max_attempts(1000)
        .max_wait(LONG),
    );
    let conflicts = strategy.conflicts.clone();
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(strategy)
        .layer(service_fn(|_: u32| async {
            Ok::<_, Infallible>(current_lock().unwrap().fence)
        }));
    let call = tokio::spawn(service.oneshot(HOT));
    first_conflict.await.unwrap();
    assert!(store.release(&hot_key(), holder).await.unwrap());
    assert!(call.await.unwrap().unwrap().done().is_some());
    assert!(conflicts.load(Ordering::SeqCst) >= 1);
}

/// A holder that dies hands its key to nobody: its lock runs out by its TTL. The callers waiting
/// for it in place learn of that by the TTL they met, as promptly as of a release, not at their
/// next poll (20 s away here); and one of them looks, not all.
async fn callers_waiting_in_place_take_a_key_freed_by_its_ttl_before_their_next_poll<S: LockStore>(store: S) {
    const CALLERS: u32 = 4;
    let poll = Duration::from_secs(20);
    let _dead_holder = hold(&store, &hot_key(), Duration::from_millis(300)).await;
    let (strategy, _) = Observed::new(
        Retry::new(Backoff::exponential(poll, poll))
            .max_attempts(1000)
            .max_wait(LONG),
    );
    let conflicts = strategy.conflicts.clone();
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(strategy)
        .layer(service_fn(|_: u32| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, Infallible>(())
        }));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| tokio::spawn(service.clone().oneshot(HOT)))
        .collect();
    let all_ran = async {
        for caller in callers {
            assert!(caller.await.unwrap().unwrap().done().is_some());
        }
    };
    tokio::time::timeout(poll / 2, all_ran)
        .await
        .expect("the callers took the key once its TTL ran out, before their next poll");
    // Each met the key once as it came; then the one that looked met it handed to the first
    // in line (unless it was the first); the rest were handed the key by releases.
    let conflicts = conflicts.load(Ordering::SeqCst);
    assert!(
        conflicts <= CALLERS + 1,
        "{conflicts} conflicts for {CALLERS} callers"
    );
}

/// A reservation nobody takes (the waiter the key was handed to died) hands the key to nobody
/// either: the caller behind it, which heard the handoff, looks when the reservation runs out,
/// not at its next poll (20 s away here).
async fn a_caller_behind_a_reservation_nobody_takes_gets_the_key_when_it_runs_out<S: LockStore>(store: S) {
    let poll = Duration::from_secs(20);
    let holder = hold(&store, &hot_key(), LONG).await;
    // The first in line: a waiter whose process died before the key was handed to it.
    let dead = redefer::guard::Waiter::caller(LockToken::random());
    store
        .join_line(&hot_key(), &dead, None, redefer::lock::Holders::One, None)
        .await
        .unwrap();
    let (strategy, first_conflict) = Observed::new(
        Retry::new(Backoff::exponential(poll, poll))
            .max_attempts(1000)
            .max_wait(LONG),
    );
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(strategy)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let caller = tokio::spawn(service.oneshot(HOT));
    first_conflict.await.unwrap();
    // The caller is in line (it joins right after its first conflict): the release hands the
    // key to the dead waiter, and the caller hears it.
    eventually(Duration::from_secs(5), "the caller is in line", || async {
        let waiting = match store
            .try_acquire(&hot_key(), LockToken::random(), LONG)
            .await
            .unwrap()
        {
            Acquisition::Held { ahead, .. } => ahead,
            Acquisition::Acquired(_) => unreachable!("the key is held"),
        };
        (waiting == 2).then_some(())
    })
    .await;
    let released = tokio::time::Instant::now();
    assert!(store.release(&hot_key(), holder).await.unwrap());
    let outcome = tokio::time::timeout(poll / 2, caller)
        .await
        .expect("the caller took the key once the reservation ran out, before its next poll")
        .unwrap();
    assert!(outcome.unwrap().done().is_some());
    assert!(
        released.elapsed() >= store.reservation(),
        "the key stayed reserved for the first in line until its reservation ran out"
    );
}

async fn retry_gives_up_after_max_attempts_and_falls_through<S: LockStore>(store: S) {
    hold(&store, &hot_key(), LONG).await;
    let (strategy, _) = Observed::new(
        Retry::new(Backoff::exponential(
            Duration::from_millis(1),
            Duration::from_millis(1),
        ))
        .max_attempts(3),
    );
    let conflicts = strategy.conflicts.clone();
    let service = LockLayer::new(store, by_order)
        .on_conflict(strategy)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    assert!(matches!(service.oneshot(HOT).await, Err(Error::Locked { .. })));
    assert_eq!(
        conflicts.load(Ordering::SeqCst),
        4,
        "three retries, then the fallback"
    );
}

async fn retry_gives_up_within_max_wait<S: LockStore>(store: S) {
    hold(&store, &hot_key(), LONG).await;
    let fixed = Backoff::exponential(Duration::from_millis(50), Duration::from_millis(50));
    let (strategy, _) = Observed::new(
        Retry::new(fixed)
            .max_attempts(100)
            .max_wait(Duration::from_millis(120)),
    );
    let waited = strategy.waited.clone();
    let service = LockLayer::new(store, by_order)
        .on_conflict(strategy)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    assert!(matches!(service.oneshot(HOT).await, Err(Error::Locked { .. })));
    // Judged on the time each conflict had waited, not on the machine's speed: every conflict
    // but the last was retried because a 50 ms wait still fit into 120 ms; the last fell
    // through because it did not.
    let waited = waited.lock().unwrap().clone();
    let (last, retried) = waited.split_last().expect("conflicts");
    let wait = Duration::from_millis(50);
    let max_wait = Duration::from_millis(120);
    assert!(
        !retried.is_empty(),
        "the first conflict, 0 ms in, retries: {waited:?}"
    );
    assert!(retried.iter().all(|w| *w + wait <= max_wait), "{waited:?}");
    assert!(*last + wait > max_wait, "{waited:?}");
    assert!(
        waited.len() <= 3,
        "waits of 50 ms fit at most twice into 120 ms: {waited:?}"
    );
}

async fn retry_falls_through_to_the_strategy_it_is_given<S: LockStore>(store: S) {
    #[derive(Clone)]
    struct Refuse;
    impl<Req> ConflictStrategy<Req> for Refuse {
        fn on_conflict(
            &self,
            _: Conflict,
            _: &Req,
        ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
            std::future::ready(Err::<Decision, BoxError>("no more waiting".into()))
        }
    }
    hold(&store, &hot_key(), LONG).await;
    let service = LockLayer::new(store, by_order)
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(1),
                Duration::from_millis(1),
            ))
            .max_attempts(2)
            .then(Refuse),
        )
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    match service.oneshot(HOT).await {
        Err(Error::Strategy(error)) => assert_eq!(error.to_string(), "no more waiting"),
        other => panic!("expected the fallback's error, got {other:?}"),
    }
}

async fn a_switch_answers_each_request_with_its_own_strategy<S: LockStore>(store: S) {
    #[derive(Clone)]
    struct Refuse(&'static str);
    impl<Req> ConflictStrategy<Req> for Refuse {
        fn on_conflict(
            &self,
            _: Conflict,
            _: &Req,
        ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
            std::future::ready(Err::<Decision, BoxError>(self.0.into()))
        }
    }
    // Even orders are one kind of caller, odd ones another; each of both keys is held.
    let even = |order: &u32| order.is_multiple_of(2);
    let service = LockLayer::new(store.clone(), |order: &u32| Some(format!("order:{}", order / 10)))
        .on_conflict(Switch::when(even, Refuse("even")).otherwise(Refuse("odd")))
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let key = LockKey::new("order:5").unwrap();
    hold(&store, &key, LONG).await;
    for (order, expected) in [(50, "even"), (51, "odd"), (52, "even")] {
        match service.clone().oneshot(order).await {
            Err(Error::Strategy(error)) => assert_eq!(error.to_string(), expected, "order {order}"),
            other => panic!("order {order}: {other:?}"),
        }
    }
    let defaulted = LockLayer::new(store, |order: &u32| Some(format!("order:{}", order / 10)))
        .on_conflict(Switch::when(even, Refuse("even")))
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    assert!(
        matches!(defaulted.oneshot(51).await, Err(Error::Locked { .. })),
        "the others fail fast by default"
    );
}

async fn requests_without_a_key_pass_through_unlocked<S: LockStore>(store: S) {
    hold(&store, &hot_key(), LONG).await;
    let service = LockLayer::new(store, |_: &u32| None::<String>)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(current_lock()) }));
    assert_eq!(service.oneshot(HOT).await.unwrap().done(), Some(None));
}

async fn invalid_keys_are_rejected_before_the_store<S: LockStore>(store: S) {
    let service = LockLayer::new(store, |name: &String| Some(name.clone()))
        .layer(service_fn(|_: String| async { Ok::<_, Infallible>(()) }));
    assert!(matches!(
        service.clone().oneshot(String::new()).await,
        Err(Error::InvalidKey(redefer::KeyError::Empty { .. }))
    ));
    assert!(matches!(
        service.oneshot("k".repeat(2000)).await,
        Err(Error::InvalidKey(redefer::KeyError::TooLong { len: 2000, .. }))
    ));
}

async fn the_inner_service_made_ready_is_the_one_called<S: LockStore>(store: S) {
    // ConcurrencyLimit panics when called without the permit its poll_ready took.
    let limited = tower::limit::ConcurrencyLimitLayer::new(1)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let mut service = LockLayer::new(store, by_order)
        .on_conflict(FailFast)
        .layer(limited);
    for _ in 0..3 {
        let outcome = service
            .ready()
            .await
            .map_err(|_| "not ready")
            .unwrap()
            .call(HOT)
            .await;
        assert!(outcome.unwrap().done().is_some());
    }
}

/// `retry_after` on a key whose holds were never sampled: the default typical hold (not a TTL
/// per holder), then, once the layer has measured holds on other keys, their average.
async fn a_cold_keys_retry_after_comes_from_the_layers_holds<S: LockStore>(store: S) {
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(Duration::from_secs(30))
        .layer(service_fn(|order: u32| async move {
            tokio::time::sleep(Duration::from_millis(u64::from(order % 100))).await;
            Ok::<_, Infallible>(())
        }));
    let retry_after = |order: u32| {
        let (store, service) = (store.clone(), service.clone());
        async move {
            let key = LockKey::new(format!("order:{order}")).unwrap();
            store.try_acquire(&key, LockToken::random(), LONG).await.unwrap();
            match service.oneshot(order).await {
                Err(Error::Locked { retry_after, .. }) => retry_after.expect("an estimate"),
                other => panic!("{other:?}"),
            }
        }
    };
    // Nothing measured yet: the default typical hold.
    assert_eq!(retry_after(1_000).await, redefer::lock::DEFAULT_TYPICAL_HOLD);
    // Holds of 40 ms on other keys, then another cold key: their average.
    for order in 0..8 {
        let ran = service.clone().oneshot(2_040 + order * 100).await.unwrap();
        assert!(ran.done().is_some());
    }
    let estimate = retry_after(3_000).await;
    assert!(
        estimate >= Duration::from_millis(40) && estimate < Duration::from_millis(60),
        "{estimate:?}"
    );
}

for_each_store!(
    a_cold_keys_retry_after_comes_from_the_layers_holds,
    a_switch_answers_each_request_with_its_own_strategy,
    requests_on_one_key_never_overlap_and_fences_increase,
    without_fencing_requests_never_overlap_and_get_no_token,
    released_after_success,
    released_after_inner_error,
    released_after_inner_panic,
    released_after_the_caller_drops_the_future,
    renewal_keeps_the_lock_through_a_handler_three_ttls_long,
    a_handler_blocking_its_thread_keeps_the_lock,
    a_handler_blocking_its_thread_on_a_quiet_runtime_keeps_the_lock,
    fail_fast_reports_the_remaining_ttl,
    retry_succeeds_once_the_holder_releases,
    callers_waiting_in_place_take_a_key_freed_by_its_ttl_before_their_next_poll,
    a_caller_behind_a_reservation_nobody_takes_gets_the_key_when_it_runs_out,
    retry_gives_up_after_max_attempts_and_falls_through,
    retry_gives_up_within_max_wait,
    retry_falls_through_to_the_strategy_it_is_given,
    requests_without_a_key_pass_through_unlocked,
    invalid_keys_are_rejected_before_the_store,
    the_inner_service_made_ready_is_the_one_called,
);

/// The release is done when the response comes back: the next command on the same connection
/// finds the key free. On a current-thread runtime nothing spawned runs before that command is
/// sent, so a release left wholly to a task would still be behind it.
#[tokio::test(flavor = "current_thread")]
async fn the_release_is_on_the_connection_when_the_response_returns() {
    let server = support::TestRedis::start();
    releases_are_on_the_connection_when_responses_return(server.store().await).await;
}

/// The same with a store over a connection the user made (`RedisStore::new`) on a server that
/// has no script loaded: its first acquire loads them, so that its first release is one
/// request too (a `NOSCRIPT` answer would send it again, after the next acquire).
#[tokio::test(flavor = "current_thread")]
async fn a_store_over_a_connection_of_the_user_s_keeps_its_first_releases_in_order() {
    let server = support::RedisServer::start();
    let client = ::redis::Client::open(server.url()).unwrap();
    let conn = ::redis::aio::ConnectionManager::new(client).await.unwrap();
    releases_are_on_the_connection_when_responses_return(redefer::RedisStore::new(conn)).await;
}

/// Twenty calls, each followed at once by a command of the caller's own on the store's
/// connection, then by an acquire through the store: both find the key released.
async fn releases_are_on_the_connection_when_responses_return<Conn: redefer::store::RedisConnection>(
    store: redefer::RedisStore<Conn>,
) {
    let service = LockLayer::new(store.clone(), by_order)
        .ttl(LONG)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let lock_key = store.lock_redis_key(&hot_key());
    for call in 0..20 {
        assert!(service.clone().oneshot(HOT).await.unwrap().done().is_some());
        let held: bool = ::redis::cmd("EXISTS")
            .arg(&lock_key)
            .query_async(&mut store.connection())
            .await
            .unwrap();
        assert!(
            !held,
            "call {call}: the key was still held when the response returned"
        );
        let next = LockToken::random();
        assert!(
            matches!(
                store.try_acquire(&hot_key(), next, LONG).await.unwrap(),
                Acquisition::Acquired(_)
            ),
            "call {call}: the key was still held for the next acquire"
        );
        store.release(&hot_key(), next).await.unwrap();
    }
}

/// A program's runtime may end as soon as its last call returns (`#[tokio::main]` returning
/// from `main`, a service shut down after its last response, a serverless function frozen once
/// it answered): the call's keys are free by then, not left to their TTL for the program's next
/// run to meet. A current-thread runtime runs nothing more once the future it was given is
/// done, so a release left to be sent by a task of its own is never sent there.
#[test]
fn a_runtime_that_ends_with_its_last_call_leaves_its_keys_free() {
    let server = support::TestRedis::start();
    let prefix = support::unique_prefix();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let handler = || service_fn(|_: u32| async { Ok::<_, Infallible>(()) });
    let url = server.url();
    // Two programs: one whose last call holds a key, one whose last call holds a set of two.
    runtime().block_on(async {
        let store = support::store_at(&url, &prefix).await;
        let mutex = LockLayer::new(store, by_order).ttl(LONG).layer(handler());
        assert!(mutex.oneshot(HOT).await.unwrap().done().is_some());
    });
    runtime().block_on(async {
        let store = support::store_at(&url, &prefix).await;
        let set = redefer::lock_set::LockSetLayer::new(store, |_: &u32| {
            Some(vec!["order:2".to_string(), "order:3".to_string()])
        })
        .ttl(LONG)
        .layer(handler());
        assert!(set.oneshot(HOT).await.unwrap().done().is_some());
    });
    runtime().block_on(async {
        let store = support::store_at(&url, &prefix).await;
        let mut held = Vec::new();
        for order in 1..=3 {
            let key = LockKey::new(format!("order:{order}")).unwrap();
            if !is_free(&store, &key).await {
                held.push(key);
            }
        }
        assert!(
            held.is_empty(),
            "still held after the programs that took them ended: {held:?}"
        );
    });
}

/// A connection whose queue is often full (one slot) sends some releases only after the next
/// acquire: a task's request must still never meet the lock of its own finished one, whichever
/// stack over the store sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_meets_the_lock_of_its_own_finished_one() {
    let server = support::RedisServer::start();
    let client = ::redis::Client::open(server.url()).unwrap();
    let config = ::redis::aio::ConnectionManagerConfig::new().set_pipeline_buffer_size(1);
    let conn = ::redis::aio::ConnectionManager::new_with_config(client, config)
        .await
        .unwrap();
    let store =
        redefer::RedisStore::new(conn).with_prefix(redefer::Prefix::new(support::unique_prefix()).unwrap());
    // A stack of its own each time: what the store knows, not the stack.
    each_task_on_its_own_key(64, 200, move || {
        LockLayer::new(store.clone(), task_key)
            .ttl(LONG)
            .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }))
    })
    .await;
}

/// The lock key of task `task`, in the tests where each task has its own.
fn task_key(task: &u32) -> Option<String> {
    Some(format!("task:{task}"))
}

/// `requests` calls from each of `tasks` tasks at once, task `t` on key `task:t`, each through
/// the stack `stack` returns for it: every call must be done.
async fn each_task_on_its_own_key<S>(
    tasks: u32,
    requests: u32,
    stack: impl Fn() -> S + Clone + Send + 'static,
) where
    S: Service<u32, Response = Outcome<()>> + Send,
    S::Error: std::fmt::Debug,
    S::Future: Send,
{
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let stack = stack.clone();
            tokio::spawn(async move {
                for _ in 0..requests {
                    let outcome = stack().oneshot(task).await;
                    assert!(
                        matches!(outcome, Ok(Outcome::Done(()))),
                        "task {task}: {outcome:?}"
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// A store from `RedisStore::connect` queues enough commands that, 64 callers at once, every
/// release goes out from its first poll, ahead of its caller's next acquire of the key: no
/// uncontended request meets its own finished lock and pays the acquire script and two more
/// round trips. Told by the server: an acquire that finds the key held asks its `PTTL` (for
/// the caller's retry-after), which nothing else here does. (With redis-rs's default queue
/// of 50 commands, about three requests in a hundred met their own lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_concurrency_64_no_uncontended_request_meets_its_own_finished_lock() {
    const TASKS: u32 = 64;
    const REQUESTS: u32 = 100;
    let server = support::RedisServer::start();
    let store = server.store().await;
    let service = LockLayer::new(store.clone(), task_key)
        .ttl(LONG)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let _: () = server.cmd(::redis::cmd("CONFIG").arg("RESETSTAT")).await;
    each_task_on_its_own_key(TASKS, REQUESTS, move || service.clone()).await;
    let stats = commandstats_after_releases(&server, &store).await;
    assert_eq!(
        calls(&stats, "pttl"),
        0,
        "acquires that met their own finished lock"
    );
}

/// The server's `INFO commandstats` once every release sent on `store`'s connection is
/// answered: each went out on it before its response returned, so a command sent on it now is
/// answered after all of them.
async fn commandstats_after_releases(server: &support::RedisServer, store: &redefer::RedisStore) -> String {
    let _: String = ::redis::cmd("PING")
        .query_async(&mut store.connection())
        .await
        .unwrap();
    server.cmd(::redis::cmd("INFO").arg("commandstats")).await
}

/// How many times the server ran `command`, by `INFO commandstats` (a command run by a script
/// counts under the script and again under its own name).
fn calls(stats: &str, command: &str) -> u32 {
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A key's first fenced acquire is one request, to a script that raises its new counter
/// (plain commands first would have cost it a second round trip); the key's later
/// acquires are plain commands. Told apart by the server: only the plain acquire sends `INCR`
/// (the script counts with `INCRBY`), and each release is one script call on Redis 7.
#[tokio::test]
async fn a_keys_first_acquire_is_the_script_alone_and_its_next_ones_plain_commands() {
    const KEYS: u32 = 20;
    let server = support::RedisServer::start();
    let store = server.store().await;
    let service = LockLayer::new(store.clone(), task_key)
        .ttl(LONG)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let stats_after_each_key_once = async || {
        for key in 0..KEYS {
            let outcome = service.clone().oneshot(key).await.unwrap();
            assert!(outcome.done().is_some());
        }
        let stats = commandstats_after_releases(&server, &store).await;
        (calls(&stats, "evalsha"), calls(&stats, "incr"))
    };
    let _: () = server.cmd(::redis::cmd("CONFIG").arg("RESETSTAT")).await;
    assert_eq!(
        stats_after_each_key_once().await,
        (2 * KEYS, 0),
        "first acquires: one script call each (and one release), no plain commands"
    );
    assert_eq!(
        stats_after_each_key_once().await,
        (3 * KEYS, KEYS),
        "later acquires: plain commands, no script but the release"
    );
}

/// On a current-thread runtime the renewal task is spawned from the timer too, and keeps an
/// awaiting handler's lock through three TTLs.
#[tokio::test(flavor = "current_thread")]
async fn renewal_keeps_the_lock_on_a_current_thread_runtime() {
    let store = redefer::MemoryStore::new();
    let ttl = Duration::from_millis(300);
    let service =
        LockLayer::new(store.clone(), by_order)
            .ttl(ttl)
            .layer(service_fn(move |_: u32| async move {
                tokio::time::sleep(ttl * 3).await;
                Ok::<_, Infallible>(())
            }));
    let call = tokio::spawn(service.oneshot(HOT));
    while !call.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if !call.is_finished() {
            assert!(
                !is_free(&store, &hot_key()).await,
                "the lock ran out under the handler"
            );
        }
    }
    assert!(call.await.unwrap().unwrap().done().is_some());
}
