//! The scheduler over every store: deferred requests re-injected through the lock layer,
//! retries and burial, several schedulers on one queue, wake-up and shutdown.

use crate::support;

use crate::support::Shorthand;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redefer::lock::{Acquisition, LockStore};
use redefer::queue::{DelayQueue, RetryPolicy};
use redefer::queue::{JobStatus, QueueStats, QueueStore, RawJobState};
use redefer::strategy::Defer;
use redefer::{
    Backoff, LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions, current_job, current_lock,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const LONG: Duration = Duration::from_secs(60);

/// When each job's attempts started: job -> [(attempt, start)].
type AttemptLog = HashMap<u64, Vec<(u32, tokio::time::Instant)>>;

/// A request to charge an order; `job` tells requests apart.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    order: u64,
    job: u64,
}

fn by_order(charge: &Charge) -> Option<String> {
    Some(format!("order:{}", charge.order))
}

fn order_key(order: u64) -> LockKey {
    LockKey::new(format!("order:{order}")).unwrap()
}

fn fast_policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        backoff: Backoff::exponential(Duration::from_millis(10), Duration::from_millis(40)),
        max_attempts,
        ..RetryPolicy::default()
    }
}

fn options() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(200),
        ..SchedulerOptions::default()
    }
}

async fn hold<S: LockStore>(store: &S, order: u64) -> LockToken {
    let token = LockToken::random();
    let acquired = store.try_acquire(&order_key(order), token, LONG).await.unwrap();
    assert!(matches!(acquired, Acquisition::Acquired(_)));
    token
}

async fn wait_for_stats<St: QueueStore>(queue: &DelayQueue<Charge, St>, expected: QueueStats, what: &str) {
    eventually(Duration::from_secs(10), what, || async {
        (queue.operator().stats().await.unwrap() == expected).then_some(())
    })
    .await;
}

async fn a_deferred_request_runs_once_after_the_holder_releases<St: LockStore + QueueStore>(store: St) {
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .retry_policy(fast_policy(50));
    let (handled_tx, mut handled) = mpsc::unbounded_channel();
    let handler = service_fn(move |charge: Charge| {
        let handled_tx = handled_tx.clone();
        async move {
            let fence = current_lock().expect("re-injected under the lock").fence;
            let job = current_job().expect("re-injected as a job");
            handled_tx.send((charge.job, fence, job.id)).unwrap();
            Ok::<_, std::convert::Infallible>(())
        }
    });
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);

    let holder = hold(&store, 1).await;
    let deferred = match service.clone().oneshot(Charge { order: 1, job: 7 }).await {
        Ok(Outcome::Deferred(deferred)) => deferred,
        other => panic!("expected a deferral, got {other:?}"),
    };
    assert_eq!(deferred.attempt, 0);
    let stored = queue
        .operator()
        .job(&deferred.job_id)
        .await
        .unwrap()
        .expect("stored before it was reported");
    assert_eq!(stored.envelope.unwrap().unwrap().payload.job, 7);

    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    assert!(store.release(&order_key(1), holder).await.unwrap());

    let (job, _fence, job_id) = handled.recv().await.unwrap();
    assert_eq!((job, &job_id), (7, &deferred.job_id));
    wait_for_stats(&queue, QueueStats::default(), "the job is acked").await;
    let report = scheduler.shutdown().await;
    assert_eq!(report.acked, 1);
    assert!(handled.try_recv().is_err(), "handled exactly once");
}

/// Waiting is not failing: a job that keeps meeting its lock uses no attempt, and is buried
/// only once it waited `max_lock_wait`.
async fn a_request_that_keeps_meeting_the_lock_waits_then_is_buried<St: LockStore + QueueStore>(store: St) {
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .retry_policy(RetryPolicy {
            max_lock_wait: Duration::from_millis(1500),
            ..fast_policy(1)
        });
    let handler = service_fn(|_: Charge| async { Ok::<_, std::convert::Infallible>(()) });
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    hold(&store, 1).await;
    let Ok(Outcome::Deferred(deferred)) = service.clone().oneshot(Charge { order: 1, job: 1 }).await else {
        panic!("expected a deferral");
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    wait_for_stats(
        &queue,
        QueueStats {
            dead: 1,
            ..QueueStats::default()
        },
        "the job is buried",
    )
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(
        (report.retried, report.buried, report.acked),
        (0, 1, 0),
        "{report:?}"
    );
    let info = queue.operator().job(&deferred.job_id).await.unwrap().unwrap();
    match info.state {
        RawJobState::Dead { reason, .. } => {
            let reason = reason.unwrap_or_default();
            assert!(
                reason.starts_with("waited ") && reason.ends_with(" for lock order:1"),
                "{reason}"
            );
        }
        other => panic!("expected dead, got {other:?}"),
    }
    let envelope = info.envelope.unwrap().unwrap();
    assert_eq!(envelope.id, deferred.job_id, "re-deferred under the same id");
    assert_eq!(envelope.attempt, 0, "waiting used no attempt");
    assert!(
        matches!(
            queue.status(&deferred.job_id).await.unwrap(),
            JobStatus::Dead {
                attempts: Some(0),
                ..
            }
        ),
        "its handler never ran: {:?}",
        queue.status(&deferred.job_id).await.unwrap()
    );
}

/// A job that keeps coming back to a held key (a livelock, or a holder that never lets go) is
/// buried after `max_lock_waits` returns, however little time that took, with the count as its
/// reason; each return is counted in its envelope, none as an attempt.
async fn a_job_that_keeps_meeting_its_key_is_buried_after_max_lock_waits<St: LockStore + QueueStore>(
    store: St,
) {
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .retry_policy(RetryPolicy {
            max_lock_waits: 2,
            ..fast_policy(1)
        });
    let handler = service_fn(|_: Charge| async { Ok::<_, std::convert::Infallible>(()) });
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    // A holder that never lets go, on a short TTL it keeps renewing: the job's fallback, which
    // follows the TTL, brings it back about every second.
    let token = LockToken::random();
    let ttl = Duration::from_millis(300);
    store.try_acquire(&order_key(2), token, ttl).await.unwrap();
    let holder = tokio::spawn({
        let store = store.clone();
        async move {
            while store.extend(&order_key(2), token, ttl).await.unwrap() {
                tokio::time::sleep(ttl / 3).await;
            }
        }
    });
    let Ok(Outcome::Deferred(deferred)) = service.clone().oneshot(Charge { order: 2, job: 1 }).await else {
        panic!("expected a deferral");
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    wait_for_stats(
        &queue,
        QueueStats {
            dead: 1,
            ..QueueStats::default()
        },
        "the job is buried",
    )
    .await;
    let report = scheduler.shutdown().await;
    holder.abort();
    assert_eq!((report.retried, report.buried), (0, 1), "{report:?}");
    let info = queue.operator().job(&deferred.job_id).await.unwrap().unwrap();
    let RawJobState::Dead { reason, .. } = info.state else {
        panic!("expected dead, got {:?}", info.state);
    };
    assert_eq!(reason.as_deref(), Some("met lock order:2 held 3 times"));
    let envelope = info.envelope.unwrap().unwrap();
    assert_eq!((envelope.lock_waits, envelope.attempt), (2, 0));
}

async fn failing_and_panicking_handlers_back_off_and_are_buried<St: LockStore + QueueStore>(store: St) {
    let policy = RetryPolicy {
        backoff: Backoff::exponential(Duration::from_millis(20), Duration::from_secs(1)),
        max_attempts: 4,
        ..RetryPolicy::default()
    };
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .retry_policy(policy);
    let starts: Arc<Mutex<AttemptLog>> = Arc::default();
    let handler = {
        let starts = starts.clone();
        service_fn(move |charge: Charge| {
            let starts = starts.clone();
            async move {
                let attempt = current_job().unwrap().attempt;
                starts
                    .lock()
                    .unwrap()
                    .entry(charge.job)
                    .or_default()
                    .push((attempt, tokio::time::Instant::now()));
                match charge.job {
                    1 => panic!("boom"),
                    2 => Err("bad input"),
                    _ => Ok(()),
                }
            }
        })
    };
    let service = LockLayer::new(store.clone(), by_order).layer(handler);
    let mut ids = Vec::new();
    for job in 1..=3 {
        ids.push(
            queue
                .push(&Charge { order: job, job }, Duration::ZERO)
                .await
                .unwrap()
                .id,
        );
    }
    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    wait_for_stats(
        &queue,
        QueueStats {
            dead: 2,
            ..QueueStats::default()
        },
        "two buried, one acked",
    )
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!((report.acked, report.retried, report.buried), (1, 6, 2));

    let reason = |state: RawJobState| match state {
        RawJobState::Dead { reason, .. } => reason.unwrap(),
        other => panic!("expected dead, got {other:?}"),
    };
    let panicked = queue.operator().job(&ids[0]).await.unwrap().unwrap();
    assert_eq!(reason(panicked.state), "handler panicked: boom after 4 attempts");
    let failed = queue.operator().job(&ids[1]).await.unwrap().unwrap();
    assert_eq!(
        reason(failed.state),
        "inner service failed: bad input after 4 attempts"
    );

    for id in &ids[..2] {
        let status = queue.status(id).await.unwrap();
        assert!(
            matches!(
                status,
                JobStatus::Dead {
                    attempts: Some(4),
                    ..
                }
            ),
            "four runs: {status:?}"
        );
    }

    let starts = starts.lock().unwrap();
    let attempts = &starts[&2];
    assert_eq!(attempts.iter().map(|(a, _)| *a).collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (n, pair) in attempts.windows(2).enumerate() {
        let gap = pair[1].1 - pair[0].1;
        let backoff = policy.backoff.upper_bound(n as u32 + 1);
        assert!(
            gap + Duration::from_millis(3) >= backoff,
            "attempt {} came {gap:?} after, before its backoff {backoff:?}",
            n + 1
        );
    }
}

async fn schedulers_sharing_a_queue_handle_each_job_once<St: LockStore + QueueStore>(store: St) {
    const JOBS: u64 = 300;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let counts: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let running: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let handler = {
        let (counts, running) = (counts.clone(), running.clone());
        service_fn(move |charge: Charge| {
            let (counts, running) = (counts.clone(), running.clone());
            async move {
                assert!(
                    running.lock().unwrap().insert(charge.job),
                    "job {} handled twice at once",
                    charge.job
                );
                tokio::task::yield_now().await;
                running.lock().unwrap().remove(&charge.job);
                *counts.lock().unwrap().entry(charge.job).or_default() += 1;
                Ok::<_, std::convert::Infallible>(())
            }
        })
    };
    let service = LockLayer::new(store.clone(), by_order).layer(handler);
    let schedulers: Vec<_> = (0..3)
        .map(|_| {
            let options = SchedulerOptions {
                concurrency: 4,
                batch: 8,
                ..options()
            };
            Scheduler::new(queue.clone(), service.clone())
                .options(options)
                .start()
        })
        .collect();
    for job in 0..JOBS {
        queue
            .push(&Charge { order: job, job }, Duration::ZERO)
            .await
            .unwrap();
    }
    wait_for_stats(&queue, QueueStats::default(), "every job acked").await;
    let mut acked = 0;
    for scheduler in schedulers {
        acked += scheduler.shutdown().await.acked;
    }
    assert_eq!(acked, JOBS);
    let counts = counts.lock().unwrap();
    assert_eq!(counts.len() as u64, JOBS);
    assert!(
        counts.values().all(|&n| n == 1),
        "a job was handled more than once"
    );
}

async fn a_job_pushed_while_the_scheduler_sleeps_starts_when_due<St: LockStore + QueueStore>(store: St) {
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = service_fn(move |_: Charge| {
        let started_tx = started_tx.clone();
        async move {
            started_tx.send(SystemTime::now()).unwrap();
            Ok::<_, std::convert::Infallible>(())
        }
    });
    let service = LockLayer::new(store.clone(), by_order).layer(handler);
    // A long idle sleep: only a wake-up can explain a prompt start.
    let idle = SchedulerOptions {
        max_idle: Duration::from_secs(30),
        ..SchedulerOptions::default()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(idle).start();
    let due = queue
        .push(&Charge { order: 1, job: 1 }, Duration::from_millis(50))
        .await
        .unwrap()
        .due;
    let start = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("started")
        .unwrap();
    let lag = start.duration_since(due).expect("never before its due time");
    assert!(
        lag < Duration::from_secs(2),
        "started {lag:?} after due, within a generous bound"
    );
    scheduler.shutdown().await;
}

/// A handler that never returns, and the channel that hears each call enter it.
fn stuck_handler() -> (
    impl tower::Service<Charge, Response = (), Error = std::convert::Infallible, Future: Send>
    + Clone
    + Send
    + 'static,
    mpsc::UnboundedReceiver<()>,
) {
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let stuck = service_fn(move |_: Charge| {
        let entered_tx = entered_tx.clone();
        async move {
            entered_tx.send(()).unwrap();
            std::future::pending::<Result<(), std::convert::Infallible>>().await
        }
    });
    (stuck, entered)
}

/// A scheduler whose future is dropped (a `run_until` inside a `select!` that took another
/// branch, say) gives its running jobs back at once, as its shutdown does after the grace:
/// they do not wait in flight for their leases to run out.
async fn a_scheduler_dropped_mid_job_gives_the_job_back_at_once<St: LockStore + QueueStore>(store: St) {
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let (stuck, mut entered) = stuck_handler();
    let scheduler = Scheduler::new(
        queue.clone(),
        LockLayer::new(store.clone(), by_order).layer(stuck),
    )
    .options(SchedulerOptions {
        lease: LONG,
        ..options()
    });
    let running = tokio::spawn(scheduler.run_until(std::future::pending()));
    queue
        .push(&Charge { order: 1, job: 1 }, Duration::ZERO)
        .await
        .unwrap();
    entered.recv().await.unwrap();
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    let expected = QueueStats {
        waiting: 1,
        due: 1,
        ..QueueStats::default()
    };
    eventually(
        Duration::from_secs(5),
        "the job waits again, not in flight under its lease",
        || {
            let operator = queue.operator();
            async move { (operator.stats().await.unwrap() == expected).then_some(()) }
        },
    )
    .await;
}

async fn shutdown_gives_unfinished_jobs_back_for_another_scheduler<St: LockStore + QueueStore>(store: St) {
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let (stuck, mut entered) = stuck_handler();
    let grace = SchedulerOptions {
        shutdown_grace: Duration::from_millis(100),
        ..options()
    };
    let first = Scheduler::new(
        queue.clone(),
        LockLayer::new(store.clone(), by_order).layer(stuck),
    )
    .options(grace)
    .start();
    let id = queue
        .push(&Charge { order: 1, job: 1 }, Duration::ZERO)
        .await
        .unwrap()
        .id;
    entered.recv().await.unwrap();
    let report = first.shutdown().await;
    assert_eq!(report.returned, 1);
    assert_eq!(
        queue.operator().stats().await.unwrap(),
        QueueStats {
            waiting: 1,
            due: 1,
            in_flight: 0,
            dead: 0,
            ..QueueStats::default()
        }
    );
    let returned = queue
        .operator()
        .job(&id)
        .await
        .unwrap()
        .unwrap()
        .envelope
        .unwrap()
        .unwrap();
    assert_eq!(returned.attempt, 0, "giving back is not a failed attempt");

    let (done_tx, mut done) = mpsc::unbounded_channel();
    let working = service_fn(move |charge: Charge| {
        let done_tx = done_tx.clone();
        async move {
            done_tx.send(charge.job).unwrap();
            Ok::<_, std::convert::Infallible>(())
        }
    });
    let second = Scheduler::new(
        queue.clone(),
        LockLayer::new(store.clone(), by_order).layer(working),
    )
    .options(options())
    .start();
    assert_eq!(done.recv().await, Some(1));
    wait_for_stats(&queue, QueueStats::default(), "acked by the second scheduler").await;
    second.shutdown().await;
}

async fn a_configured_stack_retries_then_defers<St: LockStore + QueueStore>(store: St) {
    let mut config: redefer::Config = toml::from_str(
        r#"
        [strategy]
        then = "defer"
        retry = { max_attempts = 2, backoff = { initial = "1ms", cap = "2ms" } }
        [queue]
        name = "configured"
        retry = { backoff = { initial = "10ms", cap = "40ms" } }
        [scheduler]
        max_idle = "200ms"
        "#,
    )
    .unwrap();
    // A prefix of this test's own; the configured stack moves the store to it.
    config.prefix = format!("configured-{:08x}", rand::random::<u32>());
    let queue = config.queue::<Charge, _>(store).unwrap();
    let store = queue.store().clone();
    let (handled_tx, mut handled) = mpsc::unbounded_channel();
    let handler = service_fn(move |charge: Charge| {
        let handled_tx = handled_tx.clone();
        async move {
            handled_tx.send(charge.job).unwrap();
            Ok::<_, std::convert::Infallible>(())
        }
    });
    let service = config
        .lock_layer(store.clone(), by_order, queue.clone())
        .unwrap()
        .layer(handler);
    let holder = hold(&store, 1).await;
    assert!(matches!(
        service.clone().oneshot(Charge { order: 1, job: 5 }).await,
        Ok(Outcome::Deferred(_))
    ));
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(config.scheduler)
        .start();
    store.release(&order_key(1), holder).await.unwrap();
    assert_eq!(handled.recv().await, Some(5));
    wait_for_stats(&queue, QueueStats::default(), "acked").await;
    scheduler.shutdown().await;
}

/// A job whose handler blocks its worker thread for three lease TTLs keeps its lease (and its
/// lock): no other claimer receives it meanwhile, and it runs once.
async fn a_handler_blocking_its_thread_keeps_the_job_lease<St: LockStore + QueueStore>(store: St) {
    let ttl = Duration::from_millis(300);
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = service_fn(move |charge: Charge| {
        let started_tx = started_tx.clone();
        async move {
            started_tx.send(charge.job).unwrap();
            std::thread::sleep(ttl * 3);
            Ok::<_, std::convert::Infallible>(())
        }
    });
    let service = LockLayer::new(store.clone(), by_order).ttl(ttl).layer(handler);
    queue
        .push(&Charge { order: 1, job: 7 }, Duration::ZERO)
        .await
        .unwrap();
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            lease: ttl,
            ..options()
        })
        .start();
    assert_eq!(started.recv().await, Some(7));
    let began = tokio::time::Instant::now();
    // Another claimer, on the test's own thread, tries to take the job while the handler runs.
    while began.elapsed() < ttl * 3 {
        let claimed = queue.claim(10, LONG).await.unwrap();
        assert!(
            claimed.jobs.is_empty(),
            "another claimer received the job {:?} after the handler began",
            began.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for_stats(&queue, QueueStats::default(), "the job is acked").await;
    let report = scheduler.shutdown().await;
    assert_eq!(report.acked, 1);
    assert!(started.try_recv().is_err(), "the job ran once");
}

/// The same on a quiet runtime: the test does nothing while the handler blocks (it awaits the
/// handler's own signal), so no other worker is woken to drive the timers; the job's lease and
/// lock are renewed anyway (by the watchdog's start), and the job is acked after its one run.
///
/// The handler signals only once it returns: a signal before the block (as the test above
/// sends) changes which worker drives the timers often enough that, without the watchdog,
/// this test stopped failing.
async fn a_handler_blocking_its_thread_on_a_quiet_runtime_keeps_the_job_lease<St: LockStore + QueueStore>(
    store: St,
) {
    let ttl = Duration::from_millis(300);
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let (ran_tx, mut ran) = mpsc::unbounded_channel();
    let handler = service_fn(move |charge: Charge| {
        let ran_tx = ran_tx.clone();
        async move {
            std::thread::sleep(ttl * 3);
            ran_tx.send(charge.job).unwrap();
            Ok::<_, std::convert::Infallible>(())
        }
    });
    let service = LockLayer::new(store.clone(), by_order).ttl(ttl).layer(handler);
    queue
        .push(&Charge { order: 1, job: 7 }, Duration::ZERO)
        .await
        .unwrap();
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            lease: ttl,
            ..options()
        })
        .start();
    assert_eq!(ran.recv().await, Some(7));
    wait_for_stats(&queue, QueueStats::default(), "the job is acked").await;
    let report = scheduler.shutdown().await;
    assert_eq!((report.acked, report.lease_lost), (1, 0), "{report:?}");
    assert!(ran.try_recv().is_err(), "the job ran once");
}

for_each_store!(
    a_deferred_request_runs_once_after_the_holder_releases,
    a_request_that_keeps_meeting_the_lock_waits_then_is_buried,
    a_job_that_keeps_meeting_its_key_is_buried_after_max_lock_waits,
    failing_and_panicking_handlers_back_off_and_are_buried,
    schedulers_sharing_a_queue_handle_each_job_once,
    a_job_pushed_while_the_scheduler_sleeps_starts_when_due,
    shutdown_gives_unfinished_jobs_back_for_another_scheduler,
    a_scheduler_dropped_mid_job_gives_the_job_back_at_once,
    a_configured_stack_retries_then_defers,
    a_handler_blocking_its_thread_keeps_the_job_lease,
    a_handler_blocking_its_thread_on_a_quiet_runtime_keeps_the_job_lease,
);
