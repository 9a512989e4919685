//! Coalescing: a key keeps one waiting job, the latest request's or the first's, on every store
//! and behind every guard (a lock, a throttle).

use crate::support;

use crate::support::Shorthand;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, Keep, PendingStore, QueueStats};
use redefer::store::ListLocks;
use redefer::strategy::{Coalesce, Retry, Switch};
use redefer::throttle::{Rate, ThrottleLayer, ThrottleStore};
use redefer::{
    Backoff, Deferred, Error, LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const MS: Duration = Duration::from_millis(1);

/// A sync of one account, numbered by the caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sync {
    account: u64,
    n: u32,
}

trait Store: PendingStore + LockStore + ThrottleStore + ListLocks {}

impl<S: PendingStore + LockStore + ThrottleStore + ListLocks> Store for S {}

fn account_key(sync: &Sync) -> Option<String> {
    Some(format!("account:{}", sync.account))
}

fn scheduler_options() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(100),
        ..SchedulerOptions::default()
    }
}

async fn waiting<S: Store>(queue: &DelayQueue<Sync, S>) -> u64 {
    queue.operator().stats().await.unwrap().waiting
}

/// 1,000 requests deferred at once while their key is held leave one job (on a queue of three
/// shards), carrying the payload of the request stored last (the highest revision): it runs
/// once, with that payload, after the holder releases.
async fn a_thousand_deferrals_for_a_held_key_leave_one_job_that_runs_once_with_the_last<S: Store>(store: S) {
    let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs")
        .unwrap()
        .shards(3)
        .unwrap();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let service = {
        let runs = Arc::clone(&runs);
        LockLayer::new(store.clone(), account_key)
            .on_conflict(Coalesce::latest(queue.clone()))
            .layer(service_fn(move |sync: Sync| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.lock().unwrap().push(sync.n);
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let key = LockKey::new("account:1").unwrap();
    let holder = LockToken::random();
    store
        .try_acquire(&key, holder, Duration::from_secs(30))
        .await
        .unwrap();

    let calls: Vec<_> = (0..1_000)
        .map(|n| tokio::spawn(service.clone().oneshot(Sync { account: 1, n })))
        .collect();
    let mut deferrals: Vec<(u32, Deferred)> = Vec::new();
    for (n, call) in calls.into_iter().enumerate() {
        match call.await.unwrap() {
            Ok(Outcome::Deferred(deferred)) => deferrals.push((n as u32, deferred)),
            other => panic!("request {n}: {other:?}"),
        }
    }
    let job = deferrals[0].1.job_id.clone();
    assert!(deferrals.iter().all(|(_, d)| d.job_id == job && !d.duplicate));
    // Each request was stored once, in turn: revisions 1 to 1,000, each once.
    let mut revisions: Vec<u64> = deferrals.iter().map(|(_, d)| d.revision).collect();
    revisions.sort_unstable();
    assert_eq!(revisions, (1..=1_000).collect::<Vec<u64>>());
    let last = deferrals
        .iter()
        .find(|(_, d)| d.revision == 1_000)
        .map(|(n, _)| *n)
        .unwrap();
    assert_eq!(waiting(&queue).await, 1, "more than one job for the key");
    let stored = queue.operator().job(&job).await.unwrap().unwrap();
    assert_eq!(stored.envelope.unwrap().unwrap().payload.n, last);

    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(scheduler_options())
        .start();
    assert!(store.release(&key, holder).await.unwrap());
    eventually(Duration::from_secs(20), "the job ran", || async {
        (queue.operator().stats().await.unwrap() == QueueStats::default() && !runs.lock().unwrap().is_empty())
            .then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(*runs.lock().unwrap(), [last], "{report:?}");
}

/// `Coalesce::first` keeps the first request: the later ones are told they were dropped as
/// duplicates of its job, whose payload stays the first's.
async fn keep_first_drops_the_later_requests_as_duplicates<S: Store>(store: S) {
    let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs").unwrap();
    let service = LockLayer::new(store.clone(), account_key)
        .on_conflict(Coalesce::first(queue.clone()))
        .layer(service_fn(|_: Sync| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let key = LockKey::new("account:2").unwrap();
    store
        .try_acquire(&key, LockToken::random(), Duration::from_secs(30))
        .await
        .unwrap();
    let mut deferrals = Vec::new();
    for n in 0..50 {
        let outcome = service.clone().oneshot(Sync { account: 2, n }).await.unwrap();
        deferrals.push(outcome.deferred().cloned().unwrap());
    }
    assert!(!deferrals[0].duplicate);
    assert!(
        deferrals[1..]
            .iter()
            .all(|d| d.duplicate && d.job_id == deferrals[0].job_id)
    );
    assert!(deferrals.iter().all(|d| d.revision == 1), "{deferrals:?}");
    assert_eq!(waiting(&queue).await, 1);
    let stored = queue.operator().job(&deferrals[0].job_id).await.unwrap().unwrap();
    assert_eq!(stored.envelope.unwrap().unwrap().payload.n, 0);
    // Another key has a job of its own.
    let other = Keep::First;
    let elsewhere = queue
        .push_pending(
            &LockKey::new("account:3").unwrap(),
            &Sync { account: 3, n: 0 },
            redefer::queue::Due::In(Duration::from_secs(60)),
            other,
        )
        .await
        .unwrap();
    assert!(!elsewhere.joined && elsewhere.id != deferrals[0].job_id);
}

/// A request deferred while the key's job runs starts a new job: one running, one waiting.
/// The burst that arrived during the run makes exactly one more run, with its last payload.
async fn a_request_deferred_while_the_job_runs_starts_a_new_one<S: Store>(store: S) {
    let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs").unwrap();
    let runs = Arc::new(Mutex::new(Vec::new()));
    // The first run waits for a permit the test hands out once the burst is stored.
    let gate = Arc::new(Semaphore::new(0));
    let service = {
        let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
        LockLayer::new(store.clone(), account_key)
            .on_conflict(Coalesce::latest(queue.clone()))
            .layer(service_fn(move |sync: Sync| {
                let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
                async move {
                    runs.lock().unwrap().push(sync.n);
                    if sync.n == 1 {
                        gate.acquire().await.unwrap().forget();
                    }
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let key = LockKey::new("account:4").unwrap();
    let holder = LockToken::random();
    store
        .try_acquire(&key, holder, Duration::from_secs(30))
        .await
        .unwrap();
    let first = service.clone().oneshot(Sync { account: 4, n: 1 }).await.unwrap();
    let first = first.deferred().cloned().unwrap();
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(scheduler_options())
        .start();
    assert!(store.release(&key, holder).await.unwrap());
    eventually(Duration::from_secs(10), "the first job runs", || async {
        (runs.lock().unwrap().len() == 1).then_some(())
    })
    .await;
    // It holds the key: these wait, in one new job.
    let mut burst = Vec::new();
    for n in 2..=5 {
        let outcome = service.clone().oneshot(Sync { account: 4, n }).await.unwrap();
        burst.push(outcome.deferred().cloned().unwrap());
    }
    assert!(burst.iter().all(|d| d.job_id == burst[0].job_id));
    assert_ne!(burst[0].job_id, first.job_id, "joined the running job");
    assert_eq!(burst[3].revision, 4);
    gate.add_permits(1);
    eventually(Duration::from_secs(10), "the burst ran", || async {
        (runs.lock().unwrap().len() == 2 && queue.operator().stats().await.unwrap() == QueueStats::default())
            .then_some(())
    })
    .await;
    scheduler.shutdown().await;
    assert_eq!(*runs.lock().unwrap(), [1, 5]);
}

/// "Latest" is by arrival: a caller that waited in place, then falls through to
/// `Coalesce::latest` after a newer request was deferred, replaces nothing and is told it was
/// superseded, with the job that carries the newer one; that job keeps the newer payload.
async fn a_retrying_caller_overtaken_by_a_newer_deferral_is_told_it_was_superseded<S: Store>(store: S) {
    let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs").unwrap();
    let patient = Retry::new(Backoff::exponential(20 * MS, 50 * MS))
        .max_attempts(u32::MAX)
        .max_wait(300 * MS)
        .then(Coalesce::latest(queue.clone()));
    let service = LockLayer::new(store.clone(), account_key)
        .on_conflict(Switch::when(|s: &Sync| s.n == 0, patient).otherwise(Coalesce::latest(queue.clone())))
        .layer(service_fn(|_: Sync| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let key = LockKey::new("account:6").unwrap();
    store
        .try_acquire(&key, LockToken::random(), Duration::from_secs(30))
        .await
        .unwrap();
    let older = tokio::spawn(service.clone().oneshot(Sync { account: 6, n: 0 }));
    tokio::time::sleep(50 * MS).await;
    let newer = service.clone().oneshot(Sync { account: 6, n: 1 }).await.unwrap();
    let newer = newer.deferred().cloned().unwrap();
    match older.await.unwrap() {
        Err(Error::Superseded { key, by }) => {
            assert_eq!((key.as_str(), &by), ("account:6", &newer.job_id));
        }
        other => panic!("the older caller was told {other:?}"),
    }
    let job = queue.operator().job(&newer.job_id).await.unwrap().unwrap();
    assert_eq!(job.envelope.unwrap().unwrap().payload.n, 1);
    assert_eq!(waiting(&queue).await, 1);
}

/// Over a throttle's rate, the first deferral books the key's next slot; the ones that join its
/// job book nothing more: the key's schedule holds one booking, not one per request.
async fn coalesced_deferrals_over_a_rate_book_one_slot<S: Store>(store: S) {
    let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs").unwrap();
    let rate = Rate::per_second(1).unwrap();
    let service = ThrottleLayer::new(store.clone(), account_key, rate)
        .on_conflict(Coalesce::latest(queue.clone()))
        .layer(service_fn(|_: Sync| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let admitted = service.clone().oneshot(Sync { account: 5, n: 0 }).await.unwrap();
    assert!(admitted.done().is_some());
    let mut deferrals = Vec::new();
    for n in 1..=20 {
        let outcome = service.clone().oneshot(Sync { account: 5, n }).await.unwrap();
        deferrals.push(outcome.deferred().cloned().unwrap());
    }
    assert!(deferrals.iter().all(|d| d.job_id == deferrals[0].job_id));
    assert_eq!(waiting(&queue).await, 1);
    let locks = store.list_locks(100).await.unwrap();
    let throttle = locks
        .iter()
        .find(|info| info.key.as_str() == "account:5")
        .unwrap_or_else(|| panic!("{locks:?}"));
    assert_eq!(throttle.waiters, 1, "{throttle:?}");
    // The job is due at that slot, about one interval after the admission.
    let due = deferrals[0].due;
    let ahead = due
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(ahead <= rate.interval(), "{ahead:?}");
}

for_each_store!(
    a_thousand_deferrals_for_a_held_key_leave_one_job_that_runs_once_with_the_last,
    keep_first_drops_the_later_requests_as_duplicates,
    a_request_deferred_while_the_job_runs_starts_a_new_one,
    coalesced_deferrals_over_a_rate_book_one_slot,
    a_retrying_caller_overtaken_by_a_newer_deferral_is_told_it_was_superseded,
);

/// Requests at their first conflict are ordered by their pushes, not by the clock: one pushed
/// after another replaces its payload even when the clock stepped back in between (a host's
/// time set back), and is not told that a newer request waits. On the queue's model
/// (`queue_pending.lua` does the same steps; `tests/queue_model.rs`), whose clock a test sets.
#[test]
fn a_first_conflict_pushed_later_is_the_latest_though_the_clock_stepped_back() {
    use redefer::queue::model::QueueModel;
    use redefer::queue::{Counters, JobId, PendingJob, PendingPush, PendingRules};

    let mut model = QueueModel::default();
    let key = LockKey::new("account:1").unwrap();
    let job = JobId::new("job-1").unwrap();
    let rules = PendingRules {
        keep: Keep::Latest,
        debounce: None,
        counters: Counters::Off,
        arrived_ago: Duration::ZERO,
    };
    let now = 1_800_000_000_000;
    let due = now + 60_000;
    let push = |envelope: &[u8], rules| PendingJob {
        key: &key,
        id: &job,
        envelope: envelope.to_vec(),
        group: None,
        rules,
    };
    let first = model.push_pending(push(b"1", rules), due, now);
    assert!(matches!(first, PendingPush::Stored { .. }), "{first:?}");
    // The clock stepped back 5 ms before the next request's push.
    let second = model.push_pending(push(b"2", rules), due, now - 5);
    assert!(
        matches!(second, PendingPush::Joined { revision: 2, .. }),
        "{second:?}"
    );
    // A caller that waited in place is still ordered by when it arrived.
    let waited = PendingRules {
        arrived_ago: Duration::from_millis(10),
        ..rules
    };
    let older = model.push_pending(push(b"3", waited), due, now);
    assert!(matches!(older, PendingPush::Newer { .. }), "{older:?}");
}
