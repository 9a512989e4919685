//! Limits the handler learns: a handler closes its throttled key (or another key of the same
//! throttle) until a time an upstream named. Every caller and job of the key waits for the
//! reopening, exactly: `FailFast` is told when, `Retry` runs after it, a job goes back without
//! using an attempt; other keys are not slowed; the listing shows the closed key.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::{Defer, Retry};
use redefer::throttle::{Admission, CloseError, Rate, ThrottleLayer, close_for, close_key_for};
use redefer::{Backoff, Error, MemoryStore, Outcome, Scheduler, SchedulerOptions, current_job};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use super::Clocked;
use crate::support::{eventually, for_each_store};

const MS: Duration = Duration::from_millis(1);
/// How long the handlers close their keys for.
const CLOSED: Duration = Duration::from_secs(1);

/// A request for a domain; `limited`: the upstream answers 429 to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fetch {
    n: u32,
    domain: String,
    limited: bool,
}

fn fetch(n: u32, domain: &str, limited: bool) -> Fetch {
    Fetch {
        n,
        domain: domain.to_string(),
        limited,
    }
}

fn rate() -> Rate {
    Rate::per_second(20).unwrap()
}

/// A handler closes its key: a `FailFast` caller is told exactly when it reopens, a `Retry`
/// caller runs after it, another key is not slowed, and the listing shows the key closed.
async fn a_closed_key_makes_every_caller_wait_for_its_reopening<S: Clocked>(store: S) {
    let starts: Arc<Mutex<Vec<(u32, SystemTime)>>> = Arc::default();
    let handler = {
        let (starts, clock) = (Arc::clone(&starts), store.clone());
        service_fn(move |request: Fetch| {
            let (starts, clock) = (Arc::clone(&starts), clock.clone());
            async move {
                let at = clock.now().await;
                starts.lock().unwrap().push((request.n, at));
                if request.limited {
                    let closed = close_for(CLOSED).await?;
                    assert_eq!(closed.key().as_str(), request.domain);
                    assert!(closed.opens_in() + MS >= CLOSED, "{closed:?}");
                }
                Ok::<_, CloseError>(request.n)
            }
        })
    };
    let layer = ThrottleLayer::new(store.clone(), |f: &Fetch| Some(f.domain.clone()), rate());
    let fail_fast = layer.clone().layer(handler.clone());
    let retrying = layer
        .on_conflict(Retry::new(Backoff::default()).max_wait(Duration::from_secs(5)))
        .layer(handler);
    // The upstream limits the first request: its key closes.
    let closed_at = store.now().await;
    assert_eq!(
        fail_fast
            .clone()
            .oneshot(fetch(0, "a.example", true))
            .await
            .unwrap()
            .done(),
        Some(0)
    );
    match fail_fast.clone().oneshot(fetch(1, "a.example", false)).await {
        Err(Error::Throttled { key, retry_after }) => {
            assert_eq!(key.as_str(), "a.example");
            assert!(
                // Told the time left: the closing's, less what passed since (a busy host's
                // hundreds of ms at most).
                retry_after <= CLOSED && retry_after + 800 * MS > CLOSED,
                "told to retry after {retry_after:?}"
            );
        }
        other => panic!("a closed key admitted a request: {other:?}"),
    }
    // Another key is not slowed.
    assert_eq!(
        fail_fast
            .clone()
            .oneshot(fetch(2, "b.example", false))
            .await
            .unwrap()
            .done(),
        Some(2)
    );
    let listed = store.list_locks(100).await.unwrap();
    let a = listed
        .iter()
        .find(|info| info.key == "a.example")
        .expect("listed");
    let left = a.closed_for.expect("shown closed");
    assert!(left <= CLOSED && left + 800 * MS > CLOSED, "{a:?}");
    assert!(
        listed
            .iter()
            .find(|info| info.key == "b.example")
            .is_some_and(|b| b.closed_for.is_none())
    );
    // A retrying caller runs once the key reopens, not before.
    assert_eq!(
        retrying
            .oneshot(fetch(3, "a.example", false))
            .await
            .unwrap()
            .done(),
        Some(3)
    );
    let starts = starts.lock().unwrap().clone();
    let (_, third) = starts.iter().find(|(n, _)| *n == 3).unwrap();
    let waited = third.duration_since(closed_at).unwrap_or_default();
    assert!(waited + 5 * MS >= CLOSED, "ran {waited:?} after the key closed");
}

/// A job whose handler hears 429 closes another key of its throttle (the domain, where the
/// throttle's key is the URL's) and asks to wait for the reopening: it goes back without using
/// an attempt and runs once after it; the jobs of that domain deferred meanwhile run after it
/// too, each once; nothing is buried.
async fn a_job_waits_for_the_reopening_without_using_an_attempt<S: Clocked>(store: S) {
    let queue = DelayQueue::<Fetch, _>::new(store.clone(), "fetches").unwrap();
    let runs: Arc<Mutex<Vec<(u32, u32, SystemTime)>>> = Arc::default();
    let limited_once = Arc::new(Mutex::new(true));
    let service = {
        let (runs, clock, limited_once) = (Arc::clone(&runs), store.clone(), Arc::clone(&limited_once));
        ThrottleLayer::new(store.clone(), |f: &Fetch| Some(f.domain.clone()), rate())
            .on_conflict(Defer::new(queue.clone()))
            .layer(service_fn(move |request: Fetch| {
                let (runs, clock, limited_once) =
                    (Arc::clone(&runs), clock.clone(), Arc::clone(&limited_once));
                async move {
                    let attempt = current_job().map_or(0, |job| job.attempt);
                    let at = clock.now().await;
                    runs.lock().unwrap().push((request.n, attempt, at));
                    let limited = request.limited && std::mem::take(&mut *limited_once.lock().unwrap());
                    if limited {
                        close_key_for(&request.domain, CLOSED).await?.retry_at_reopening();
                        return Err(CloseError::NotThrottled); // dropped: the request waits
                    }
                    Ok::<_, CloseError>(())
                }
            }))
    };
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(100),
            ..SchedulerOptions::default()
        })
        .start();
    let closed_at = store.now().await;
    queue
        .push(&fetch(0, "c.example", true), Duration::ZERO)
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the first job ran", || async {
        (!runs.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    // Requests for the closed domain meanwhile are deferred to the reopening.
    for n in 1..4 {
        match service.clone().oneshot(fetch(n, "c.example", false)).await {
            Ok(Outcome::Deferred(_)) => {}
            other => panic!("expected a deferral, got {other:?}"),
        }
    }
    eventually(Duration::from_secs(10), "every job ran", || async {
        (runs.lock().unwrap().len() == 5).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    let mut ran: Vec<u32> = runs.iter().map(|(n, _, _)| *n).collect();
    ran.sort();
    assert_eq!(
        ran,
        [0, 0, 1, 2, 3],
        "the limited job ran again, every other once: {runs:?}"
    );
    for (n, attempt, at) in &runs[1..] {
        assert_eq!(*attempt, 0, "job {n} used an attempt");
        let after = at.duration_since(closed_at).unwrap_or_default();
        assert!(
            after + 5 * MS >= CLOSED,
            "job {n} ran {after:?} after the domain closed"
        );
    }
    assert_eq!((report.acked, report.buried), (4, 0), "{report:?}");
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// Jobs whose booked slots fall inside a long closure go back to wait in the queue rather than
/// sleep in their runs: a scheduler of two places keeps running another domain's jobs while the
/// closed domain waits, and the closed domain's jobs start no earlier than its reopening.
async fn booked_jobs_of_a_closed_key_do_not_hold_the_schedulers_places<S: Clocked>(store: S) {
    const LONG: Duration = Duration::from_secs(3);
    let queue = DelayQueue::<Fetch, _>::new(store.clone(), "fetches").unwrap();
    let runs: Arc<Mutex<Vec<(Fetch, u32, SystemTime)>>> = Arc::default();
    let closed_at: Arc<Mutex<Option<(SystemTime, SystemTime)>>> = Arc::default();
    let service = {
        let (runs, clock, closed_at) = (Arc::clone(&runs), store.clone(), Arc::clone(&closed_at));
        ThrottleLayer::new(
            store.clone(),
            |f: &Fetch| Some(f.domain.clone()),
            Rate::per_second(10).unwrap(),
        )
        .on_conflict(Defer::new(queue.clone()))
        .layer(service_fn(move |request: Fetch| {
            let (runs, clock, closed_at) = (Arc::clone(&runs), clock.clone(), Arc::clone(&closed_at));
            async move {
                let at = clock.now().await;
                let attempt = current_job().map_or(0, |job| job.attempt);
                runs.lock().unwrap().push((request.clone(), attempt, at));
                if request.limited {
                    // The upstream answers late: the domain's next fetches booked their
                    // slots meanwhile.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    // Closed between these two readings of the store's clock.
                    let before = clock.now().await;
                    close_for(LONG).await?;
                    let after = clock.now().await;
                    *closed_at.lock().unwrap() = Some((before, after));
                }
                Ok::<_, CloseError>(())
            }
        }))
    };
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            concurrency: 2,
            max_idle: Duration::from_millis(100),
            ..SchedulerOptions::default()
        })
        .start();
    for n in 0..6 {
        queue
            .push(&fetch(n, "d.example", n == 0), Duration::ZERO)
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(5), "the domain closed", || async {
        closed_at.lock().unwrap().is_some().then_some(())
    })
    .await;
    // Give the booked fetches of the closed domain the time to come back for their slots.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pushed = store.now().await;
    for n in 10..13 {
        queue
            .push(&fetch(n, "e.example", false), Duration::ZERO)
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(15), "every job ran", || async {
        (runs.lock().unwrap().len() == 9).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    let (closing, closed) = closed_at.lock().unwrap().unwrap();
    for (request, attempt, at) in runs.lock().unwrap().iter() {
        assert_eq!(*attempt, 0, "{request:?} used an attempt");
        if request.domain == "e.example" {
            let after = at.duration_since(pushed).unwrap_or_default();
            assert!(
                after < Duration::from_millis(1_500),
                "{request:?} waited {after:?} for a place"
            );
        } else if *at > closed + 100 * MS {
            // (A fetch admitted just before the closing may read the clock in its handler just
            // after: those start within milliseconds of it.)
            let after = at.duration_since(closing).unwrap_or_default();
            assert!(
                after + 5 * MS >= LONG,
                "{request:?} ran {after:?} into the closure"
            );
        }
    }
    assert_eq!((report.acked, report.buried), (9, 0), "{report:?}");
}

/// A job of `domain` booked its slot, then the domain closed for 1.1 s: the job, coming for its
/// slot, is sent back to wait for its start (longer than a run waits). Its key, its waiter and
/// how long until its start.
async fn send_a_job_back<S: Clocked>(
    store: &S,
    rate: Rate,
    domain: &str,
) -> (redefer::LockKey, redefer::guard::Waiter, Duration) {
    let key = redefer::LockKey::new(domain).unwrap();
    let queue = redefer::queue::QueueName::new("fetches").unwrap();
    let job = redefer::guard::Waiter::job(&queue, &redefer::queue::JobId::new("job-1").unwrap());
    store.book(&key, rate, &job).await.unwrap();
    store
        .close_for(&key, rate, Duration::from_millis(1_100))
        .await
        .unwrap();
    let sent_back = store.admit(&key, rate, Some(&job)).await.unwrap();
    let Admission::Throttled { opens_in } = sent_back else {
        panic!("the job's start is past its run's longest wait: sent back, not {sent_back:?}");
    };
    (key, job, opens_in)
}

/// A job sent back to wait for its start (its slot fell inside a closure) and claimed late,
/// well after that start (a busy scheduler), is admitted on its booking: on Redis the script
/// once failed there (an expiry of zero for a schedule that had run out) after dropping the
/// booking.
async fn a_job_sent_back_and_claimed_late_keeps_its_booking<S: Clocked>(store: S) {
    let rate = Rate::per_second(10).unwrap();
    let (key, job, opens_in) = send_a_job_back(&store, rate, "late.example").await;
    // Claimed well after its start: past the key's interval and the schedule's life.
    tokio::time::sleep(opens_in + rate.interval() + Duration::from_millis(200)).await;
    let late = store.admit(&key, rate, Some(&job)).await;
    assert!(
        matches!(late, Ok(Admission::Redeemed { wait }) if wait.is_zero()),
        "{late:?}"
    );
}

/// A job sent back to wait for its start and claimed after it, once others took the runs
/// that followed, starts a run after them: never in the same run as another (the rate holds
/// over any span, late jobs included).
async fn a_job_sent_back_and_claimed_late_waits_its_turn<S: Clocked>(store: S) {
    let rate = Rate::new(1, Duration::from_millis(100)).unwrap();
    let (key, job, opens_in) = send_a_job_back(&store, rate, "turn.example").await;
    // The job is claimed late: a request came first and took the run after the job's.
    tokio::time::sleep(opens_in + rate.interval() + Duration::from_millis(20)).await;
    assert_eq!(store.admit(&key, rate, None).await.unwrap(), Admission::Admitted);
    let late = store.admit(&key, rate, Some(&job)).await.unwrap();
    let Admission::Redeemed { wait } = late else {
        panic!("the job keeps its booking: {late:?}");
    };
    assert!(
        wait >= rate.interval() / 2,
        "the late job starts {wait:?} after the request admitted just before it"
    );
}

/// An operator reopens closed keys early (`ThrottleStore::reopen`): a key closed just after
/// its admission admits again at the slot its rate gives (the admission before the closing
/// still counts, not the closing's hour), a key closed while idle admits at once, the listing
/// no longer shows them closed, and a key that is not closed is not reopened.
async fn a_reopened_key_admits_at_the_slot_its_rate_gives<S: Clocked>(store: S) {
    use redefer::LockKey;

    let hour = Duration::from_secs(3_600);
    let rate = Rate::new(1, Duration::from_secs(10)).unwrap();
    let (busy, idle) = (
        LockKey::new("busy.example").unwrap(),
        LockKey::new("idle.example").unwrap(),
    );
    assert_eq!(
        store.reopen(&busy).await.unwrap(),
        None,
        "a key never decided is not closed"
    );
    assert_eq!(store.admit(&busy, rate, None).await.unwrap(), Admission::Admitted);
    assert_eq!(
        store.reopen(&busy).await.unwrap(),
        None,
        "nor is a key only admitted"
    );
    for key in [&busy, &idle] {
        store.close_for(key, rate, hour).await.unwrap();
    }
    let closed = store.list_locks(10).await.unwrap();
    let shown_closed = closed.iter().filter(|lock| lock.closed_for.is_some()).count();
    assert_eq!(shown_closed, 2, "{closed:?}");

    let opens_in = store.reopen(&busy).await.unwrap().expect("a closed key reopened");
    assert!(
        opens_in > Duration::ZERO && opens_in <= rate.interval(),
        "{opens_in:?}"
    );
    match store.admit(&busy, rate, None).await.unwrap() {
        Admission::Throttled { opens_in } => assert!(opens_in <= rate.interval(), "{opens_in:?}"),
        other => panic!("the admission before the closing no longer counts: {other:?}"),
    }
    assert_eq!(store.reopen(&idle).await.unwrap(), Some(Duration::ZERO));
    assert_eq!(store.admit(&idle, rate, None).await.unwrap(), Admission::Admitted);

    let listed = store.list_locks(10).await.unwrap();
    assert!(listed.iter().all(|lock| lock.closed_for.is_none()), "{listed:?}");
    assert_eq!(store.reopen(&busy).await.unwrap(), None, "reopened already");
}

for_each_store!(
    a_reopened_key_admits_at_the_slot_its_rate_gives,
    a_job_sent_back_and_claimed_late_waits_its_turn,
    a_job_sent_back_and_claimed_late_keeps_its_booking,
    booked_jobs_of_a_closed_key_do_not_hold_the_schedulers_places,
    a_closed_key_makes_every_caller_wait_for_its_reopening,
    a_job_waits_for_the_reopening_without_using_an_attempt,
    a_closing_longer_than_a_day_is_refused_and_closes_nothing,
);

/// Outside a throttled handler there is no throttle to close a key of.
#[tokio::test]
async fn closing_outside_a_throttled_handler_is_refused() {
    assert!(matches!(close_for(CLOSED).await, Err(CloseError::NotThrottled)));
    let store = MemoryStore::new();
    // Inside another guard's handler, still outside a throttle's.
    let locked =
        redefer::LockLayer::new(store, |_: &u32| Some("k".to_string())).layer(service_fn(|_: u32| async {
            Ok::<_, std::convert::Infallible>(close_key_for("k", CLOSED).await)
        }));
    let inner = locked.oneshot(1).await.unwrap().done().unwrap();
    assert!(matches!(inner, Err(CloseError::NotThrottled)));
}

/// A closing longer than a day (a century, a timestamp read as seconds) is refused with what
/// was asked, and closes nothing: the key still admits.
async fn a_closing_longer_than_a_day_is_refused_and_closes_nothing<S: Clocked>(store: S) {
    use redefer::throttle::MAX_CLOSE;

    let century = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    let burst = rate().burst(5).unwrap();
    let service = ThrottleLayer::new(store, |_: &u32| Some("api.example".to_string()), burst).layer(
        service_fn(move |n: u32| async move {
            Ok::<_, std::convert::Infallible>(match n {
                0 => close_for(century).await.map(|_| ()),
                _ => close_key_for("other.example", MAX_CLOSE + MS).await.map(|_| ()),
            })
        }),
    );
    for n in 0..2 {
        let refused = service.clone().oneshot(n).await.unwrap().done().unwrap();
        assert!(
            matches!(refused, Err(CloseError::TooLong { max, .. }) if max == MAX_CLOSE),
            "{refused:?}"
        );
    }
    let admitted = service.oneshot(0).await;
    assert!(admitted.is_ok(), "the key was not closed: {admitted:?}");
}
