//! Conformance of the throttle operations of every store (the semantics `ThrottleStore`
//! documents), and the throttle layer with each strategy end to end: exact waits, booked
//! slots, the rate kept over every window, and a throttle composed with a lock.

/// Keys closed by their handlers (a module, so that it shares this test binary).
#[path = "throttle/closing.rs"]
mod closing;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redefer::guard::Waiter;
use redefer::queue::{DelayQueue, JobId, QueueName, QueueStats, QueueStore};
use redefer::store::ListLocks;
use redefer::strategy::{Defer, Retry};
use redefer::throttle::{Admission, Rate, ThrottleLayer, ThrottleStore};
use redefer::{
    Backoff, Error, LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions, current_job,
};
use serde::{Deserialize, Serialize};
use tokio::time::{Instant, sleep};
use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};

use support::{StoreClock, eventually, for_each_store};

const MS: Duration = Duration::from_millis(1);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

/// The stores, with the clock their throttle keeps: the handlers read start times from it.
trait Clocked: ThrottleStore + QueueStore + redefer::lock::LockStore + ListLocks + StoreClock {}

impl<S: ThrottleStore + QueueStore + redefer::lock::LockStore + ListLocks + StoreClock> Clocked for S {}

fn job(n: u32) -> Waiter {
    Waiter::job(
        &QueueName::new("calls").unwrap(),
        &JobId::new(format!("job-{n}")).unwrap(),
    )
}

/// A burst, then one admission per interval; a refusal says exactly how long until the next
/// slot and moves nothing.
async fn a_key_admits_its_burst_then_refuses_with_the_exact_wait<S: Clocked>(store: S) {
    let rate = Rate::per_second(10).unwrap().burst(3).unwrap();
    let k = key("customer:1");
    let first = Instant::now();
    for n in 0..3 {
        assert_eq!(
            store.admit(&k, rate, None).await.unwrap(),
            Admission::Admitted,
            "burst {n}"
        );
    }
    let before = Instant::now();
    let Admission::Throttled { opens_in } = store.admit(&k, rate, None).await.unwrap() else {
        panic!("the fourth request within the burst's instant was admitted");
    };
    // The slot opened one interval after the first admission, which happened between `first`
    // and the refusal.
    let spent = before.duration_since(first);
    assert!(opens_in <= 100 * MS, "{opens_in:?}");
    assert!(
        opens_in + spent + 5 * MS >= 100 * MS,
        "{opens_in:?} after {spent:?}"
    );
    // Refusals move nothing: the same slot, a little nearer.
    let Admission::Throttled { opens_in: again } = store.admit(&k, rate, None).await.unwrap() else {
        panic!("admitted before the slot");
    };
    assert!(again <= opens_in, "{again:?} > {opens_in:?}");
    // Another key has a schedule of its own.
    assert_eq!(
        store.admit(&key("customer:2"), rate, None).await.unwrap(),
        Admission::Admitted
    );
}

/// Bookings take consecutive slots, one interval apart; a job's booking is found again by a
/// second booking, redeemed once by the job, and not counted again.
async fn bookings_take_consecutive_slots_and_are_redeemed_once<S: Clocked>(store: S) {
    let rate = Rate::per_second(20).unwrap();
    let k = key("customer:3");
    assert_eq!(store.admit(&k, rate, None).await.unwrap(), Admission::Admitted);
    let mut slots = Vec::new();
    for n in 0..5 {
        slots.push(store.book(&k, rate, &job(n)).await.unwrap());
    }
    for pair in slots.windows(2) {
        assert_eq!(
            pair[1].at.duration_since(pair[0].at).unwrap(),
            50 * MS,
            "{slots:?}"
        );
    }
    let now = store.now().await;
    assert!(
        slots[0].at > now && slots[0].at <= now + 50 * MS,
        "{slots:?} at {now:?}"
    );
    assert_eq!(store.book(&k, rate, &job(2)).await.unwrap().at, slots[2].at);
    // After the admission and five bookings, the next free slot is the seventh.
    let Admission::Throttled { opens_in } = store.admit(&k, rate, None).await.unwrap() else {
        panic!("admitted ahead of five bookings");
    };
    assert!(opens_in > 250 * MS && opens_in <= 300 * MS, "{opens_in:?}");
    // Job 4 comes early: admitted, told to wait for its slot; the booking is used up.
    let Admission::Redeemed { wait } = store.admit(&k, rate, Some(&job(4))).await.unwrap() else {
        panic!("job 4's booking was not found");
    };
    assert!(wait > 200 * MS && wait <= 250 * MS, "{wait:?}");
    assert!(matches!(
        store.admit(&k, rate, Some(&job(4))).await.unwrap(),
        Admission::Throttled { .. }
    ));
    // A job booked while a slot is open has it at once, and still finds it when it comes
    // (it is stored after its booking).
    let open = key("customer:3b");
    let at_once = store.book(&open, rate, &job(9)).await.unwrap();
    assert_eq!(at_once.wait, Duration::ZERO);
    assert_eq!(
        store.admit(&open, rate, Some(&job(9))).await.unwrap(),
        Admission::Redeemed { wait: Duration::ZERO }
    );
    // A caller that waits in place books the next slot after all of them.
    let caller = Waiter::caller(LockToken::random());
    let booked = store.book(&k, rate, &caller).await.unwrap();
    assert_eq!(booked.at.duration_since(slots[4].at).unwrap(), 50 * MS);
}

/// `FailFast` answers with the exact time to the next slot: a request a little before it is
/// refused, one at it admitted.
///
/// The refusal is checked only when the request came back before the earliest the slot can
/// be: a loaded machine may wake the test after the slot it aimed 5 ms before, and such a try
/// proves nothing either way. It is tried again on a key of its own, up to five times.
async fn fail_fast_says_exactly_when_the_next_slot_opens<S: Clocked>(store: S) {
    let rate = Rate::per_second(5).unwrap();
    for attempt in 0..5 {
        let key = format!("customer:4:{attempt}");
        let service = ThrottleLayer::new(store.clone(), move |_: &u32| Some(key.clone()), rate).layer(
            service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) }),
        );
        let first = Instant::now();
        assert_eq!(service.clone().oneshot(1).await.unwrap().done(), Some(1));
        let admitted = Instant::now();
        let refused_at = Instant::now();
        let retry_after = match service.clone().oneshot(2).await {
            Err(Error::Throttled { retry_after, .. }) => retry_after,
            other => panic!("{other:?}"),
        };
        let answered = Instant::now();
        // The slot is 200 ms after the first admission, somewhere in [first, admitted].
        let earliest = (200 * MS).saturating_sub(answered.duration_since(first));
        let latest = (200 * MS).saturating_sub(refused_at.duration_since(admitted));
        assert!(
            retry_after + MS >= earliest && retry_after <= latest + MS,
            "{retry_after:?} outside [{earliest:?}, {latest:?}]"
        );
        // 5 ms before the slot: refused, with what is left.
        sleep(
            retry_after
                .saturating_sub(answered.duration_since(refused_at))
                .saturating_sub(5 * MS),
        )
        .await;
        let before_slot = service.clone().oneshot(3).await;
        if Instant::now() >= first + 200 * MS {
            // Woken too late to ask before the slot: another try.
            continue;
        }
        let left = match before_slot {
            // (5 ms, give or take the two clocks' reads: under a millisecond)
            Err(Error::Throttled { retry_after, .. }) => retry_after,
            other => panic!("admitted before the slot: {other:?}"),
        };
        assert!(left <= 6 * MS, "{left:?}");
        // At the slot: admitted.
        sleep(left).await;
        assert_eq!(service.oneshot(4).await.unwrap().done(), Some(4));
        return;
    }
    panic!("five tries woke after the slot they aimed 5 ms before");
}

/// `Retry` callers each book a slot and wait exactly for it: all run, one interval apart, and
/// none earlier than the rate allows.
async fn retrying_callers_wait_exactly_for_their_booked_slots<S: Clocked>(store: S) {
    let rate = Rate::per_second(50).unwrap();
    let started = Arc::new(Mutex::new(Vec::new()));
    // By the store's clock, before any request: no slot of the burst opens earlier.
    let began = store.now().await;
    let service = {
        let (started, clock) = (Arc::clone(&started), store.clone());
        ThrottleLayer::new(store, |_: &u32| Some("customer:5".to_string()), rate)
            .on_conflict(Retry::new(Backoff::default()).max_wait(Duration::from_secs(5)))
            .layer(service_fn(move |n: u32| {
                let (started, clock) = (Arc::clone(&started), clock.clone());
                async move {
                    let at = clock.now().await;
                    started.lock().unwrap().push((at, n));
                    Ok::<_, std::convert::Infallible>(n)
                }
            }))
    };
    let calls: Vec<_> = (0..10)
        .map(|n| tokio::spawn(service.clone().oneshot(n)))
        .collect();
    for call in calls {
        assert!(matches!(call.await.unwrap(), Ok(Outcome::Done(_))));
    }
    let mut starts: Vec<SystemTime> = started.lock().unwrap().iter().map(|(at, _)| *at).collect();
    starts.sort();
    assert_eq!(starts.len(), 10);
    for (i, start) in starts.iter().enumerate() {
        let since = start.duration_since(began).unwrap_or_default();
        // Never early: the i-th start is at least i intervals after the burst began (to the
        // millisecond). Each start is read by its handler after its admission, so a late read
        // only makes it later; measured against the first start instead, a first read that a
        // busy host delayed (by 10 ms once in CI) made the second start look early.
        assert!(
            since + MS >= rate.interval() * i as u32,
            "start {i} {since:?} after the burst began"
        );
    }
    let span = starts[9].duration_since(starts[0]).unwrap();
    assert!(
        span < 9 * rate.interval() + 200 * MS,
        "the callers waited {span:?} for 9 slots"
    );
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Call {
    n: u32,
}

/// What the handlers saw: each run's start by the store's clock and its attempt.
#[derive(Default)]
struct Runs {
    runs: Mutex<Vec<(u32, SystemTime, u32)>>,
}

/// At most 10 calls per second per customer and one at a time per order, in one stack, both
/// deferring to the same queue: every request runs once, the orders never overlap, the rate is
/// kept, and the jobs that met the lock then the throttle used no attempt.
async fn a_throttle_and_a_lock_compose_in_one_stack<S: Clocked>(store: S) {
    let rate = Rate::per_second(40).unwrap().burst(2).unwrap();
    let queue = DelayQueue::<Call, _>::new(store.clone(), "refunds").unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(Runs::default());
    let service = {
        let (running, overlapped, runs, clock) = (
            Arc::clone(&running),
            Arc::clone(&overlapped),
            Arc::clone(&runs),
            store.clone(),
        );
        ServiceBuilder::new()
            .layer(
                ThrottleLayer::new(store.clone(), |_: &Call| Some("customer:6".to_string()), rate)
                    .on_conflict(Defer::new(queue.clone()))
                    .over_guard(),
            )
            .layer(
                LockLayer::new(store.clone(), |call: &Call| Some(format!("order:{}", call.n % 3)))
                    .on_conflict(Defer::new(queue.clone())),
            )
            .service(service_fn(move |call: Call| {
                let (running, overlapped, runs, clock) = (
                    Arc::clone(&running),
                    Arc::clone(&overlapped),
                    Arc::clone(&runs),
                    clock.clone(),
                );
                async move {
                    let started = clock.now().await;
                    if running.fetch_add(1, Ordering::SeqCst) > 2 {
                        overlapped.fetch_add(1, Ordering::SeqCst);
                    }
                    let attempt = current_job().map_or(0, |job| job.attempt);
                    runs.runs.lock().unwrap().push((call.n, started, attempt));
                    sleep(30 * MS).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(200),
            ..SchedulerOptions::default()
        })
        .start();
    let calls: Vec<_> = (0..60)
        .map(|n| tokio::spawn(service.clone().oneshot(Call { n })))
        .collect();
    for call in calls {
        assert!(call.await.unwrap().is_ok());
    }
    eventually(Duration::from_secs(30), "every refund ran", || async {
        (runs.runs.lock().unwrap().len() >= 60).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!((report.retried, report.buried), (0, 0), "{report:?}");
    assert_eq!(overlapped.load(Ordering::SeqCst), 0, "more than 3 orders at once");
    let runs = runs.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 60, "a refund ran twice");
    assert!(
        runs.iter().all(|(.., attempt)| *attempt == 0),
        "a job used an attempt"
    );
    let mut starts: Vec<SystemTime> = runs.iter().map(|(_, started, ..)| *started).collect();
    starts.sort();
    let span = starts[59].duration_since(starts[0]).unwrap();
    // 60 starts at 40/s with a burst of 2: at least 58 intervals.
    assert!(span + MS >= rate.interval() * 58, "60 refunds in {span:?}");
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// The listing shows a throttled key with its next free slot and the slots booked ahead, beside
/// the locks.
async fn the_listing_shows_a_throttles_next_slot_and_bookings<S: Clocked>(store: S) {
    let rate = Rate::per_second(2).unwrap();
    let k = key("customer:7");
    assert_eq!(store.admit(&k, rate, None).await.unwrap(), Admission::Admitted);
    for n in 0..3 {
        store.book(&k, rate, &job(n)).await.unwrap();
    }
    let locks = store.list_locks(100).await.unwrap();
    let [shown] = locks.as_slice() else {
        panic!("{locks:?}");
    };
    assert_eq!(
        (shown.key.as_str(), shown.waiters, shown.holders),
        ("customer:7", 3, 0)
    );
    // One admission and three bookings at 2/s: the next slot opens 2 s after the admission.
    let next = shown.next_slot.expect("a throttle's next slot");
    assert!(
        next > Duration::from_millis(1_500) && next <= Duration::from_secs(2),
        "{next:?}"
    );
    // The schedule's key lives until the slot at least (its TTL in whole milliseconds).
    assert!(shown.remaining.is_some_and(|left| left + MS >= next), "{shown:?}");
}

for_each_store!(
    the_listing_shows_a_throttles_next_slot_and_bookings,
    a_key_admits_its_burst_then_refuses_with_the_exact_wait,
    bookings_take_consecutive_slots_and_are_redeemed_once,
    fail_fast_says_exactly_when_the_next_slot_opens,
    retrying_callers_wait_exactly_for_their_booked_slots,
    a_throttle_and_a_lock_compose_in_one_stack,
);

/// A throttle's state that another tool wrote past 2^53 µs (the year 2255), or as no number at
/// all, is refused with an error naming it and kept as it was: such a state answered
/// "throttled, retry after 0" forever (a time past 2^63 wrapped to a negative wait), or, as
/// `nan`, admitted every request.
mod hostile_state {
    use super::*;

    async fn a_state_past_what_a_script_counts_is_refused_and_kept(kind: crate::support::Server) {
        let server = crate::support::RedisServer::start_of(kind);
        let store = server.store().await;
        let prefix = store.prefix().as_str().to_string();
        let rate = Rate::per_second(10).unwrap();
        for held in [
            "99999999999999999999999",
            "9007199254740993",
            "nan",
            "1 99999999999999999999999",
        ] {
            let k = key(&format!("customer:{held}"));
            let state = format!("{prefix}:throttle:{{{}}}", k.as_str());
            let _: () = server.cmd(::redis::cmd("SET").arg(&state).arg(held)).await;
            for _ in 0..2 {
                let said = match store.admit(&k, rate, None).await {
                    Err(error) => error.to_string(),
                    Ok(admission) => panic!("{held}: answered {admission:?}"),
                };
                assert!(
                    said.contains(&state) && said.contains("2^53") && !said.contains("script:"),
                    "{said}"
                );
            }
            let kept: String = server.cmd(::redis::cmd("GET").arg(&state)).await;
            assert_eq!(kept, held);
            let _: () = server.cmd(::redis::cmd("DEL").arg(&state)).await;
            assert_eq!(
                store.admit(&k, rate, None).await.unwrap(),
                Admission::Admitted,
                "{held}"
            );
        }
    }

    crate::support::for_each_server!(a_state_past_what_a_script_counts_is_refused_and_kept);
}
