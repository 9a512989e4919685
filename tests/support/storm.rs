//! A guard in a storm of SIGKILLs (a module of the test binaries that use it, beside
//! `support`): real worker processes (this test binary re-run) schedule
//! deferred jobs through the guard and are killed at random and replaced, beside live callers
//! of the same keys in the test process (two `Retry`, one `FailFast` calling again). What a
//! guard's test supplies: its requests, and its stack over a handler that checks itself in
//! against Redis (its own invariant: no two holders, no writer with company, ...) and, at its
//! end, adds its request's number to `<prefix>:test-done` (counting a second end in
//! `<prefix>:test-twice`).
//!
//! Afterwards the storm has checked that every request ran to its end (no deferral lost, no
//! deadlock) within [`BOUND`], and that a request ran to its end twice only when a kill cut it
//! off between its end and its acknowledgement; the test checks its own counters.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngExt;
use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::{ConflictStrategy, Defer, FailFast, Retry};
use redefer::{Backoff, Error, Outcome, RedisStore, Scheduler, SchedulerOptions};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::support::{RedisServer, Server, WorkerProcess, eventually, store_at, unique_prefix};

/// Deferred jobs, worked by the processes.
pub const JOBS: u64 = 40;
/// Requests of each live caller in the test process.
pub const CALLS: u64 = 10;
/// How long each handler works.
pub const WORK: Duration = Duration::from_millis(150);
/// The guard's TTL: a dead worker's holdings come free this long after their last renewal.
pub const TTL: Duration = Duration::from_secs(1);
/// Every request ends within this (the no-deadlock bound the storm holds the guard to).
pub const BOUND: Duration = Duration::from_secs(90);
/// Jobs each worker runs at once: a kill cuts off at most this many.
pub const CONCURRENCY: usize = 4;
/// Kills during a storm.
pub const KILLS: usize = 5;

/// The environment that makes a worker of this test binary: the server's URL, the prefix.
const WORKER_URL: &str = "REDEFER_STORM_WORKER";
const WORKER_PREFIX: &str = "REDEFER_STORM_PREFIX";

/// A stack of the storm, whatever its strategy.
pub type Stack<R> = BoxCloneSyncService<R, Outcome<()>, Error<String>>;

/// The guard under test: its stack with any strategy, at the storm's [`TTL`].
pub trait Stacks<R>: Send + Sync + 'static {
    /// The guard with `strategy` over the checking handler, on `store`, its test keys under
    /// `prefix`.
    fn stack<C>(&self, store: &RedisStore, prefix: &str, strategy: C) -> Stack<R>
    where
        C: ConflictStrategy<R> + Clone + Send + Sync + 'static;
}

/// The worker's side, to call from a test of its own (named to [`run`]): when this process is a
/// worker, a scheduler of `queue` runs its jobs through the guard with `Defer`, until killed;
/// otherwise it returns at once.
pub async fn worker<R, K>(stacks: K, queue: &str)
where
    R: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Stacks<R>,
{
    let (Ok(url), Ok(prefix)) = (std::env::var(WORKER_URL), std::env::var(WORKER_PREFIX)) else {
        return; // not a worker
    };
    let store = store_at(&url, &prefix).await;
    let queue = DelayQueue::<R, _>::new(store.clone(), queue).unwrap();
    let service = stacks.stack(&store, &prefix, Defer::new(queue.clone()));
    let _scheduler = Scheduler::new(queue, service)
        .options(SchedulerOptions {
            concurrency: CONCURRENCY,
            lease: TTL,
            max_idle: Duration::from_millis(200),
            ..SchedulerOptions::default()
        })
        .start();
    println!("worker ready");
    std::future::pending::<()>().await;
}

/// What a storm leaves for its test's own checks.
pub struct Storm {
    /// The server, with the handlers' counters under `prefix`.
    pub redis: RedisServer,
    pub prefix: String,
}

impl Storm {
    /// The handlers' counter `<prefix>:<name>` (0 when never counted).
    pub async fn counter(&self, name: &str) -> u64 {
        let count: Option<u64> = self
            .redis
            .cmd(redis::cmd("GET").arg(format!("{}:{name}", self.prefix)))
            .await;
        count.unwrap_or(0)
    }
}

/// A storm on `server`: [`JOBS`] requests from `request` pushed to `queue` and worked by three
/// worker processes (the test `worker_test`, which calls [`worker`]) killed [`KILLS`] times at
/// random and replaced, beside three live callers of [`CALLS`] requests each.
pub async fn run<R, K>(
    server: Server,
    worker_test: &str,
    queue: &str,
    stacks: K,
    request: fn(u64) -> R,
) -> Storm
where
    R: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Stacks<R>,
{
    let redis = RedisServer::start_of(server);
    let prefix = unique_prefix();
    let store = store_at(&redis.url(), &prefix).await;
    let queue = DelayQueue::<R, _>::new(store.clone(), queue).unwrap();
    let started = tokio::time::Instant::now();
    for n in 0..JOBS {
        queue.push(&request(n), Duration::ZERO).await.unwrap();
    }
    let start_worker = || {
        WorkerProcess::start(
            worker_test,
            &[(WORKER_URL, &redis.url()), (WORKER_PREFIX, &prefix)],
        )
    };
    let mut workers: Vec<WorkerProcess> = (0..3).map(|_| start_worker()).collect();
    // Live callers beside the jobs: two retrying, one failing fast and calling again.
    let retry = Retry::new(Backoff::exponential(
        Duration::from_millis(5),
        Duration::from_millis(100),
    ))
    .max_attempts(u32::MAX)
    .max_wait(BOUND);
    let mut callers = Vec::new();
    for caller in 0..3u64 {
        let (retrying, failing) = (
            stacks.stack(&store, &prefix, retry.clone()),
            stacks.stack(&store, &prefix, FailFast),
        );
        callers.push(tokio::spawn(async move {
            for call in 0..CALLS {
                let request = request(1_000 * (caller + 1) + call);
                if caller < 2 {
                    let outcome = retrying
                        .clone()
                        .oneshot(request)
                        .await
                        .expect("a retrying call ends");
                    assert!(outcome.done().is_some(), "a retrying call runs");
                    continue;
                }
                loop {
                    match failing.clone().oneshot(request.clone()).await {
                        Ok(_) => break,
                        Err(Error::Locked { retry_after, .. }) => {
                            tokio::time::sleep(retry_after.unwrap_or(WORK).min(Duration::from_millis(200)))
                                .await;
                        }
                        Err(error) => panic!("a fail-fast call failed: {error:?}"),
                    }
                }
            }
        }));
    }
    // Kills at random moments, each of a random worker, replaced by a new one.
    for _ in 0..KILLS {
        let pause = rand::rng().random_range(300..900);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let doomed = rand::rng().random_range(0..workers.len());
        workers.swap_remove(doomed).kill();
        workers.push(start_worker());
    }
    for caller in callers {
        tokio::time::timeout(BOUND, caller)
            .await
            .expect("every live call ends within the bound")
            .unwrap();
    }
    eventually(
        BOUND.saturating_sub(started.elapsed()),
        "every job ran and was acked",
        || {
            let queue = queue.clone();
            async move { (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(()) }
        },
    )
    .await;
    for mut worker in workers {
        worker.kill();
    }
    let done: BTreeSet<u64> = redis
        .cmd(redis::cmd("SMEMBERS").arg(format!("{prefix}:test-done")))
        .await;
    let expected: BTreeSet<u64> = (0..JOBS)
        .chain((0..3).flat_map(|caller| (0..CALLS).map(move |call| 1_000 * (caller + 1) + call)))
        .collect();
    assert_eq!(done, expected, "every request ran to its end");
    assert_eq!(queue.operator().stats().await.unwrap().dead, 0);
    let storm = Storm { redis, prefix };
    let twice = storm.counter("test-twice").await;
    assert!(
        twice <= (KILLS * CONCURRENCY) as u64,
        "{twice} requests ran to their end twice, more than the kills could cut off"
    );
    println!(
        "{} requests ended within {:?} (bound {BOUND:?}) under {KILLS} kills; {twice} ran to their end twice",
        expected.len(),
        started.elapsed()
    );
    storm
}
