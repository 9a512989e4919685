//! The faults an adversary found: a bad entry in a claim batch, a full Redis behind locks, a
//! shutdown racing a finished handler, a paused claimer, a handler that never returns, an
//! in-flight entry that never expires, a push whose reply is lost, an evicting Redis.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::queue::{DelayQueue, Due, JobId, QueueError, QueueStats, QueueStore, RawJobState, RetryPolicy};
use redefer::strategy::FailFast;
use redefer::{
    Backoff, LockLayer, MemoryStore, RedisStore, Scheduler, SchedulerOptions, StoreError, current_job,
};
use tokio::sync::oneshot;
use tower::{Layer, service_fn};

use support::{RedisServer, eventually, for_each_store};

const LEASE: Duration = Duration::from_secs(30);

fn queue_key(store: &RedisStore, queue: &str, set: &str) -> String {
    format!("{}:q:{{{queue}}}:{set}", store.prefix().as_str())
}

fn quick() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(100),
        error_backoff: Backoff::exponential(Duration::from_millis(10), Duration::from_millis(100)),
        ..SchedulerOptions::default()
    }
}

// ------------------------------------------------------------- 1: one bad entry, one burial

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_with_an_empty_id_is_buried_alone_and_the_rest_of_the_batch_is_delivered() {
    let server = RedisServer::start();
    let store = server.store().await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "jobs").unwrap();
    for n in 0..5 {
        queue.push(&n, Duration::ZERO).await.unwrap();
    }
    let _: i64 = server
        .cmd(
            ::redis::cmd("HSET")
                .arg(queue_key(&store, "jobs", "jobs"))
                .arg("")
                .arg("{}"),
        )
        .await;
    let _: i64 = server
        .cmd(
            ::redis::cmd("ZADD")
                .arg(queue_key(&store, "jobs", "delayed"))
                .arg(0)
                .arg(""),
        )
        .await;

    let claimed = queue
        .claim(64, LEASE)
        .await
        .expect("one bad entry never fails the batch");
    assert_eq!(claimed.jobs.len(), 5, "every good job of the batch is delivered");
    let reason: String = server
        .cmd(
            ::redis::cmd("HGET")
                .arg(queue_key(&store, "jobs", "errors"))
                .arg(""),
        )
        .await;
    assert_eq!(reason, "not a job id: up to 128 of A-Z a-z 0-9 _ . -");
    assert_eq!(queue.stats().await.unwrap().dead, 1);
    for job in &claimed.jobs {
        assert!(queue.ack(&job.lease).await.unwrap());
    }
}

// ------------------------------------------------------------- 2: a full Redis drains

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_work_drains_behind_locks_when_redis_is_full() {
    let server = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory",
        "4mb",
        "--maxmemory-policy",
        "noeviction",
    ]);
    let store = server.store().await;
    let queue = DelayQueue::<String, _>::new(store.clone(), "full").unwrap();
    let payload = "x".repeat(1000);
    let mut pushed = 0u64;
    let refused = loop {
        match queue.push(&payload, Duration::ZERO).await {
            Ok(_) => pushed += 1,
            Err(error) => break error,
        }
        assert!(pushed < 100_000, "4 MB never filled");
    };
    assert!(
        matches!(refused, QueueError::Full(_)),
        "a push into a full Redis is refused as Full: {refused:?}"
    );
    assert!(pushed > 100, "only {pushed} jobs fit");

    let handled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&handled);
    let service = LockLayer::new(store.clone(), |_: &String| {
        Some(format!("order:{}", rand::random::<u8>()))
    })
    .on_conflict(FailFast)
    .layer(service_fn(move |_: String| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok::<_, std::convert::Infallible>(())
        }
    }));
    let scheduler = Scheduler::new(queue.clone(), service).options(quick()).start();
    eventually(Duration::from_secs(30), "the full queue drains", || async {
        (queue.stats().await.unwrap() == QueueStats::default()).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(report.buried, 0, "{report:?}");
    assert_eq!(report.acked, pushed, "{report:?}");
    assert_eq!(handled.load(Ordering::Relaxed) as u64, pushed);
    // Room is back: pushes work again.
    queue.push(&payload, Duration::ZERO).await.unwrap();
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
        queue.stats().await.unwrap().dead,
        0,
        "nothing buried for a store error"
    );
    locks.restart();
    eventually(
        Duration::from_secs(20),
        "the jobs run once the store is back",
        || async { (queue.stats().await.unwrap() == QueueStats::default()).then_some(()) },
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
        match queue.job(&id).await.unwrap()?.state {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_entry_with_an_infinite_deadline_is_recovered() {
    let server = RedisServer::start();
    let store = server.store().await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "stuck").unwrap();
    let id = queue.push(&7, Duration::ZERO).await.unwrap().id;
    let taken = queue.claim(1, LEASE).await.unwrap().jobs.remove(0);
    // Another client moves the deadline to +inf and drops the lease.
    let _: i64 = server
        .cmd(
            ::redis::cmd("ZADD")
                .arg(queue_key(&store, "stuck", "inflight"))
                .arg("+inf")
                .arg(id.as_str()),
        )
        .await;
    let _: i64 = server
        .cmd(
            ::redis::cmd("HDEL")
                .arg(queue_key(&store, "stuck", "leases"))
                .arg(id.as_str()),
        )
        .await;
    let again = queue.claim(1, LEASE).await.unwrap();
    assert_eq!(
        again.jobs.iter().map(|job| &job.envelope.id).collect::<Vec<_>>(),
        [&id],
        "recovered at the next claim"
    );
    assert!(again.jobs[0].lease.fence() > taken.lease.fence());
    assert!(queue.ack(&again.jobs[0].lease).await.unwrap());
    assert_eq!(queue.stats().await.unwrap(), QueueStats::default());
}

// ------------------------------------------------------------- 3: shutdown and a finished handler

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_returned_is_settled_when_the_grace_runs_out_during_its_release() {
    let server = RedisServer::start();
    let store = server.store().await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "graceful").unwrap();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (finish_tx, finish) = oneshot::channel::<()>();
    let finish = Arc::new(Mutex::new(Some(finish)));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let service = LockLayer::new(store.clone(), |_: &u64| Some("graceful".to_string())).layer(service_fn(
        move |_: u64| {
            let (entered_tx, finish, counted) =
                (entered_tx.clone(), Arc::clone(&finish), Arc::clone(&counted));
            async move {
                let _ = entered_tx.send(());
                let waiting = finish.lock().unwrap().take();
                if let Some(waiting) = waiting {
                    let _ = waiting.await;
                }
                counted.fetch_add(1, Ordering::Relaxed);
                Ok::<_, std::convert::Infallible>(())
            }
        },
    ));
    queue.push(&1, Duration::ZERO).await.unwrap();
    let options = SchedulerOptions {
        shutdown_grace: Duration::from_millis(200),
        ..quick()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
    entered.recv().await.unwrap();
    // Writes stall for longer than the grace: the lock release after the handler hangs.
    let _: String = server
        .cmd(::redis::cmd("CLIENT").arg("PAUSE").arg(1000).arg("WRITE"))
        .await;
    let shutdown = tokio::spawn(scheduler.shutdown());
    finish_tx.send(()).unwrap();
    let report = shutdown.await.unwrap();
    assert_eq!((report.acked, report.returned), (1, 0), "{report:?}");
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    assert_eq!(
        queue.stats().await.unwrap(),
        QueueStats::default(),
        "nothing to run again"
    );
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

// ------------------------------------------------------------- 7: what a failed push tells

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_without_a_reply_is_unconfirmed_and_a_retry_with_its_id_is_safe() {
    let mut server = RedisServer::start();
    let store = server.fast_failing_store().await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "unconfirmed").unwrap();
    let id = JobId::new("webhook-42").unwrap();
    let _: String = server
        .cmd(::redis::cmd("CLIENT").arg("PAUSE").arg(800).arg("WRITE"))
        .await;
    let first = queue.push_with_id(id.clone(), &42, Due::In(Duration::ZERO)).await;
    assert!(matches!(first, Err(QueueError::Unconfirmed(_))), "{first:?}");
    // It may have been stored (the server ran it when the pause ended) or not (the client
    // gave up the connection first). Pushing again with the same id is safe either way: it
    // stores the job, or finds it stored; one job results.
    let again = eventually(
        Duration::from_secs(5),
        "a retried push gets an answer",
        || async {
            match queue.push_with_id(id.clone(), &42, Due::In(Duration::ZERO)).await {
                Err(QueueError::Unconfirmed(_)) => None,
                answered => Some(answered),
            }
        },
    )
    .await;
    assert!(
        matches!(again, Ok(_) | Err(QueueError::DuplicateId(_))),
        "{again:?}"
    );
    assert_eq!(queue.stats().await.unwrap().waiting, 1);
    let stored = queue.job(&id).await.unwrap().unwrap();
    assert_eq!(stored.envelope.unwrap().unwrap().payload, 42);

    // A server that is down: the first push may find the old connection broken mid-write
    // (Unconfirmed: the client cannot tell); once the client reconnects, the refused
    // connection proves that nothing was written, and the error says so.
    server.kill();
    let refused = eventually(Duration::from_secs(5), "a push is refused outright", || async {
        match queue.push(&1, Duration::ZERO).await {
            Err(QueueError::Unconfirmed(_)) => None,
            other => Some(other),
        }
    })
    .await;
    match refused {
        Err(QueueError::Store(error)) => assert!(!error.outcome_unknown(), "{error}"),
        other => panic!("expected a store error that wrote nothing, got {other:?}"),
    }
}

// ------------------------------------------------------------- 8: an evicting Redis

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_refused_when_asked_and_accepted_with_an_error_log_otherwise() {
    let server = RedisServer::start_with(&["--save", "", "--maxmemory-policy", "allkeys-lru"]);
    let refused = RedisStore::builder()
        .refuse_eviction(true)
        .connect(&server.url())
        .await;
    match refused {
        Err(StoreError::EvictionPolicy { policy }) => assert_eq!(policy, "allkeys-lru"),
        other => panic!("expected EvictionPolicy, got {other:?}"),
    }
    assert!(RedisStore::builder().connect(&server.url()).await.is_ok());
    // A safe server passes the check.
    let safe = RedisServer::start();
    assert!(
        RedisStore::builder()
            .refuse_eviction(true)
            .connect(&safe.url())
            .await
            .is_ok()
    );
}

for_each_store!(
    a_store_error_under_a_job_uses_no_attempt_and_buries_nothing,
    a_handler_that_never_returns_fails_as_timed_out,
    a_job_s_fencing_token_rises_with_every_claim,
);
