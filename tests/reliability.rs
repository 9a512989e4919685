//! The faults an adversary found, on every store: a store error under a job, a paused
//! claimer, a handler that never returns, job fencing tokens. Those that need a server of
//! their own are in `reliability_faults.rs`.

use crate::support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::queue::{DelayQueue, QueueStats, QueueStore, RawJobState, RetryPolicy};
use redefer::{Backoff, LockLayer, MemoryStore, Scheduler, SchedulerOptions, current_job};
use tokio::sync::oneshot;
use tower::{Layer, service_fn};

use support::{RedisServer, eventually, for_each_store};

const LEASE: Duration = Duration::from_secs(30);

fn quick() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(100),
        error_backoff: Backoff::exponential(Duration::from_millis(10), Duration::from_millis(100)),
        ..SchedulerOptions::default()
    }
}

// ------------------------------------------------------------- 2: a store error uses no attempt

/// The lock store is down while jobs come due: each run fails on the store, goes back with a
/// backoff, keeps its attempt, and is never buried; when the store is back, all run at attempt 0.
async fn a_store_error_under_a_job_uses_no_attempt_and_buries_nothing<St: QueueStore>(store: St) {
    let mut locks = RedisServer::start();
    let lock_store = locks.fast_failing_store().await;
    locks.kill();
    let queue = DelayQueue::<u64, _>::new(store, "store-errors")
        .unwrap()
        .retry_policy(RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        });
    let tried = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let (tried_by, seen) = (Arc::clone(&tried), Arc::clone(&attempts));
    let service = LockLayer::new(lock_store, move |job: &u64| {
        tried_by.fetch_add(1, Ordering::Relaxed);
        Some(format!("job:{job}"))
    })
    .layer(service_fn(move |job: u64| {
        let seen = Arc::clone(&seen);
        async move {
            let attempt = current_job().map(|current| current.attempt);
            seen.lock().unwrap().push((job, attempt));
            Ok::<_, std::convert::Infallible>(())
        }
    }));
    for job in 0..3 {
        queue.push(&job, Duration::ZERO).await.unwrap();
    }
    let scheduler = Scheduler::new(queue.clone(), service).options(quick()).start();
    // Every job meets the dead store at least twice: with one attempt allowed, a counted
    // failure would have buried it.
    eventually(
        Duration::from_secs(10),
        "runs meet the dead lock store",
        || async { (tried.load(Ordering::Relaxed) >= 6).then_some(()) },
    )
    .await;
    assert_eq!(
        queue.operator().stats().await.unwrap().dead,
        0,
        "nothing buried for a store error"
    );
    locks.restart();
    eventually(
        Duration::from_secs(20),
        "the jobs run once the store is back",
        || async { (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(()) },
    )
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(
        (report.acked, report.buried, report.retried),
        (3, 0, 0),
        "{report:?}"
    );
    assert!(report.postponed >= 3, "{report:?}");
    let attempts = attempts.lock().unwrap();
    assert_eq!(
        attempts.iter().map(|(job, _)| *job).collect::<HashSet<_>>(),
        HashSet::from([0, 1, 2])
    );
    assert!(
        attempts.iter().all(|(_, attempt)| *attempt == Some(0)),
        "no attempt was used: {attempts:?}"
    );
}

// ------------------------------------------------------------- 5: a per-attempt time limit

async fn a_handler_that_never_returns_fails_as_timed_out<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u64, _>::new(store, "hangs")
        .unwrap()
        .retry_policy(RetryPolicy {
            max_attempts: 2,
            backoff: Backoff::exponential(Duration::from_millis(10), Duration::from_millis(10)),
            ..RetryPolicy::default()
        });
    let service =
        LockLayer::new(MemoryStore::new(), |_: &u64| Some("hang".to_string())).layer(service_fn(|_: u64| {
            std::future::pending::<Result<(), std::convert::Infallible>>()
        }));
    let id = queue.push(&1, Duration::ZERO).await.unwrap().id;
    let options = SchedulerOptions {
        time_limit: Duration::from_millis(200),
        ..quick()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
    let reason = eventually(Duration::from_secs(10), "the job is buried", || async {
        match queue.operator().job(&id).await.unwrap()?.state {
            RawJobState::Dead { reason, .. } => reason,
            _ => None,
        }
    })
    .await;
    assert_eq!(reason, "timed out after 200ms after 2 attempts");
    let report = scheduler.shutdown().await;
    assert_eq!((report.retried, report.buried), (1, 1), "{report:?}");
}

// ------------------------------------------------------------- 6: no entry in flight forever

async fn a_job_s_fencing_token_rises_with_every_claim<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u64, _>::new(store, "fenced")
        .unwrap()
        .retry_policy(RetryPolicy {
            backoff: Backoff::exponential(Duration::ZERO, Duration::ZERO),
            ..RetryPolicy::default()
        });
    let id = queue.push(&1, Duration::ZERO).await.unwrap().id;
    queue.push(&2, Duration::ZERO).await.unwrap();
    let mut last = 0;
    for round in 0..4 {
        let claimed = queue.claim(10, LEASE).await.unwrap();
        let mine = claimed.jobs.iter().find(|job| job.envelope.id == id).unwrap();
        assert!(
            mine.lease.fence().0 > last,
            "round {round}: {:?} after {last}",
            mine.lease.fence()
        );
        last = mine.lease.fence().0;
        for job in &claimed.jobs {
            queue.fail(&job.lease, "again").await.unwrap();
        }
    }
}

// ------------------------------------------------------------- 4: a paused claimer

/// The claimer's runtime is frozen (as by SIGSTOP) past the job's lease while its handler is
/// ready to finish; another claimer takes the job. Resumed, the first must not poll its handler.
#[test]
fn a_paused_claimer_never_polls_its_handler_after_the_lease_ran_out() {
    let store = MemoryStore::new();
    let lease = Duration::from_millis(300);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let queue = DelayQueue::<u64, _>::new(store.clone(), "paused").unwrap();
    let id = runtime.block_on(queue.push(&1, Duration::ZERO)).unwrap().id;

    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (finish_tx, finish) = oneshot::channel::<()>();
    let finish = Arc::new(Mutex::new(Some(finish)));
    let completed = Arc::new(AtomicBool::new(false));
    let first_fence = Arc::new(Mutex::new(None));
    let (done, fence) = (Arc::clone(&completed), Arc::clone(&first_fence));
    let service = LockLayer::new(store.clone(), |_: &u64| None::<String>).layer(service_fn(move |_: u64| {
        let (entered_tx, finish, done, fence) = (
            entered_tx.clone(),
            Arc::clone(&finish),
            Arc::clone(&done),
            Arc::clone(&fence),
        );
        async move {
            *fence.lock().unwrap() = current_job().map(|job| job.fence);
            let _ = entered_tx.send(());
            let waiting = finish.lock().unwrap().take();
            if let Some(waiting) = waiting {
                let _ = waiting.await;
            }
            done.store(true, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(())
        }
    }));
    let (stop_tx, stop) = oneshot::channel::<()>();
    let options = SchedulerOptions { lease, ..quick() };
    let scheduler_queue = queue.clone();
    let claimer = std::thread::spawn(move || {
        runtime.block_on(async move {
            let scheduler = Scheduler::new(scheduler_queue, service).options(options).start();
            let _ = stop.await;
            scheduler.shutdown().await
        })
    });
    entered.recv().unwrap();

    // Freeze the claimer's runtime: a task that blocks its only thread, after making the
    // handler ready to finish, until another claimer has taken the job.
    let (frozen_tx, frozen) = std::sync::mpsc::channel();
    let (taken_tx, taken) = std::sync::mpsc::channel::<()>();
    handle.spawn(async move {
        finish_tx.send(()).unwrap();
        frozen_tx.send(()).unwrap();
        let _ = taken.recv();
    });
    frozen.recv().unwrap();
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let second = other.block_on(eventually(
        Duration::from_secs(5),
        "the job's lease runs out and another claimer takes it",
        || async { queue.claim(1, LEASE).await.unwrap().jobs.pop() },
    ));
    assert_eq!(second.envelope.id, id);
    taken_tx.send(()).unwrap();

    stop_tx.send(()).unwrap();
    let report = claimer.join().unwrap();
    assert!(
        !completed.load(Ordering::SeqCst),
        "the paused claimer's handler finished on a job another claimer holds"
    );
    assert_eq!(report.lease_lost, 1, "{report:?}");
    let first = first_fence.lock().unwrap().expect("the handler saw its job");
    assert!(
        second.lease.fence() > first,
        "the newer run has the higher job fence"
    );
    assert!(other.block_on(queue.ack(&second.lease)).unwrap());
}

for_each_store!(
    a_store_error_under_a_job_uses_no_attempt_and_buries_nothing,
    a_handler_that_never_returns_fails_as_timed_out,
    a_job_s_fencing_token_rises_with_every_claim,
);
