//! The faults an adversary found that need a server of their own (Redis and Valkey): a bad
//! entry in a claim batch, a full server behind locks, an in-flight entry that never expires,
//! a shutdown racing a finished handler, a push whose reply is lost, an evicting server.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::queue::{DelayQueue, Due, JobId, QueueError, QueueStats};
use redefer::strategy::FailFast;
use redefer::{
    Backoff, Fencing, LockLayer, RedisStore, Scheduler, SchedulerOptions, StoreError, current_lock,
};
use tokio::sync::oneshot;
use tower::{Layer, service_fn};

use support::{RedisServer, Server, eventually, for_each_server};

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

async fn an_entry_with_an_empty_id_is_buried_alone_and_the_rest_of_the_batch_is_delivered(kind: Server) {
    let server = RedisServer::start_of(kind);
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
    assert_eq!(queue.operator().stats().await.unwrap().dead, 1);
    for job in &claimed.jobs {
        assert!(queue.ack(&job.lease).await.unwrap());
    }
}

// ------------------------------------------------------------- 2: a full Redis drains

async fn queued_work_drains_behind_locks_when_redis_is_full(kind: Server) {
    let server = RedisServer::start_with_of(
        kind,
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory",
            "4mb",
            "--maxmemory-policy",
            "noeviction",
        ],
    );
    let store = server.store().await;
    // (order, padding): a job's lock key is its order's, the same on every run.
    let queue = DelayQueue::<(u64, String), _>::new(store.clone(), "full").unwrap();
    let padding = "x".repeat(1000);
    let mut pushed = 0u64;
    let refused = loop {
        match queue.push(&(pushed % 256, padding.clone()), Duration::ZERO).await {
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
    let service = LockLayer::new(store.clone(), |(order, _): &(u64, String)| {
        Some(format!("order:{order}"))
    })
    .on_conflict(FailFast)
    .layer(service_fn(move |_: (u64, String)| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok::<_, std::convert::Infallible>(())
        }
    }));
    let scheduler = Scheduler::new(queue.clone(), service).options(quick()).start();
    eventually(Duration::from_secs(30), "the full queue drains", || async {
        (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(report.buried, 0, "{report:?}");
    assert_eq!(report.acked, pushed, "{report:?}");
    assert_eq!(handled.load(Ordering::Relaxed) as u64, pushed);
    // Room is back: pushes work again.
    queue.push(&(0, padding), Duration::ZERO).await.unwrap();
}

/// A full Redis (noeviction) refuses a plain `SET`: the lock's acquire by `SET NX` falls back
/// to the script, which may write when full, with fencing on and off.
async fn locks_are_taken_on_a_full_redis(kind: Server) {
    let server = RedisServer::start_with_of(
        kind,
        &[
            "--save",
            "",
            "--maxmemory",
            "2mb",
            "--maxmemory-policy",
            "noeviction",
        ],
    );
    let store = server.store().await;
    let filler = DelayQueue::<String, _>::new(store.clone(), "filler").unwrap();
    let padding = "x".repeat(1000);
    let mut conn = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Fill with jobs until a push is refused, then with small keys until a plain SET is too:
    // a push is refused with its 1 KB still in the query buffer, so memory may be just under
    // the limit again for a small write.
    while filler.push(&padding, Duration::ZERO).await.is_ok() {}
    let mut full = false;
    for n in 0..100_000 {
        let refused: Result<(), ::redis::RedisError> = ::redis::cmd("SET")
            .arg(format!("fill:{n}"))
            .arg("x")
            .query_async(&mut conn)
            .await;
        if refused.is_err() {
            full = true;
            break;
        }
    }
    assert!(full, "Redis is full: a plain SET is refused");
    for fencing in [Fencing::On, Fencing::Off] {
        let service = LockLayer::new(store.clone(), |order: &u64| Some(format!("order:{order}")))
            .fencing(fencing)
            .layer(service_fn(|_: u64| async {
                Ok::<_, std::convert::Infallible>(current_lock().map(|lock| lock.fence.is_some()))
            }));
        for order in 0..3 {
            let outcome = tower::ServiceExt::oneshot(service.clone(), order).await;
            let fenced = outcome.expect("locked on a full Redis").done().flatten();
            assert_eq!(fenced, Some(fencing == Fencing::On), "{fencing:?}");
        }
    }
}

async fn an_in_flight_entry_with_an_infinite_deadline_is_recovered(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "stuck").unwrap();
    let id = queue.push(&7, Duration::ZERO).await.unwrap().id;
    let taken = queue.claim(1, LEASE).await.unwrap().jobs.remove(0);
    // Another client moves the claim's deadline to +inf.
    let inflight = queue_key(&store, "stuck", "inflight");
    let leases: Vec<String> = server
        .cmd(::redis::cmd("ZRANGE").arg(&inflight).arg(0).arg(-1))
        .await;
    assert_eq!(leases.len(), 1, "one claim, one lease: {leases:?}");
    let _: i64 = server
        .cmd(::redis::cmd("ZADD").arg(&inflight).arg("+inf").arg(&leases[0]))
        .await;
    let again = queue.claim(1, LEASE).await.unwrap();
    assert_eq!(
        again.jobs.iter().map(|job| &job.envelope.id).collect::<Vec<_>>(),
        [&id],
        "recovered at the next claim"
    );
    assert!(again.jobs[0].lease.fence() > taken.lease.fence());
    assert!(queue.ack(&again.jobs[0].lease).await.unwrap());
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

// ------------------------------------------------------------- 3: shutdown and a finished handler

async fn a_handler_that_returned_is_settled_when_the_grace_runs_out_during_its_release(kind: Server) {
    let server = RedisServer::start_of(kind);
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
        queue.operator().stats().await.unwrap(),
        QueueStats::default(),
        "nothing to run again"
    );
}

// ------------------------------------------------------------- 7: what a failed push tells

async fn a_push_without_a_reply_is_unconfirmed_and_a_retry_with_its_id_is_safe(kind: Server) {
    let mut server = RedisServer::start_of(kind);
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
    assert_eq!(queue.operator().stats().await.unwrap().waiting, 1);
    let stored = queue.operator().job(&id).await.unwrap().unwrap();
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

async fn an_evicting_redis_is_refused_when_asked_and_accepted_with_an_error_log_otherwise(kind: Server) {
    let server = RedisServer::start_with_of(kind, &["--save", "", "--maxmemory-policy", "allkeys-lru"]);
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
    let safe = RedisServer::start_of(kind);
    assert!(
        RedisStore::builder()
            .refuse_eviction(true)
            .connect(&safe.url())
            .await
            .is_ok()
    );
}

for_each_server!(
    an_entry_with_an_empty_id_is_buried_alone_and_the_rest_of_the_batch_is_delivered,
    queued_work_drains_behind_locks_when_redis_is_full,
    locks_are_taken_on_a_full_redis,
    an_in_flight_entry_with_an_infinite_deadline_is_recovered,
    a_handler_that_returned_is_settled_when_the_grace_runs_out_during_its_release,
    a_push_without_a_reply_is_unconfirmed_and_a_retry_with_its_id_is_safe,
    an_evicting_redis_is_refused_when_asked_and_accepted_with_an_error_log_otherwise,
);
