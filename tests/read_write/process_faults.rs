//! Readers and writers worked by real worker processes SIGKILLed at random while they hold
//! keys, beside live callers of the same keys in this process: requests that read or write one
//! of two documents at random (a quarter write), deferred jobs (`Defer`) in the workers,
//! `Retry` and `FailFast` callers here. Afterwards: a writer never had anyone beside it (each
//! handler checks that itself, against Redis), readers did share, every request ran to its end
//! (no deferral lost, no deadlock, within the bound below), and a request ran to its end twice
//! only when a kill cut it off between its end and its acknowledgement.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngExt;
use redefer::queue::{DelayQueue, QueueStats};
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::strategy::{ConflictStrategy, Defer, FailFast, Retry};
use redefer::{Backoff, Error, Outcome, RedisStore, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};

use crate::support::{RedisServer, Server, WorkerProcess, eventually, store_at, unique_prefix};

/// The documents the requests read and write.
const DOCS: u64 = 2;
/// Deferred jobs, worked by the processes.
const JOBS: u64 = 40;
/// Requests of each live caller in this process.
const CALLS: u64 = 10;
/// How long each handler works.
const WORK: Duration = Duration::from_millis(150);
/// The keys' TTL: a dead worker's holdings come free this long after their last renewal.
const TTL: Duration = Duration::from_secs(1);
/// Every request ends within this (the no-deadlock bound the test holds the guard to).
const BOUND: Duration = Duration::from_secs(90);
/// Jobs each worker runs at once: a kill cuts off at most this many.
const CONCURRENCY: usize = 4;
/// Kills during a run.
const KILLS: usize = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    n: u64,
    doc: String,
    writes: bool,
}

/// A read (three in four) or a write of a random document.
fn random_request(n: u64) -> Request {
    Request {
        n,
        doc: format!("doc:{}", rand::rng().random_range(0..DOCS)),
        writes: rand::rng().random_bool(0.25),
    }
}

/// A handler's check-in, atomically: drop the runs of its document whose heartbeat ran out
/// (their process died) from its readers (`KEYS[2]`) and writers (`KEYS[3]`), note this run
/// (`ARGV[1]`) among its own until `ARGV[2]` ms from now, and count a violation (`KEYS[1]`)
/// when a writer (`ARGV[3]` = '1') is not alone or a reader is beside a writer; count a reader
/// beside readers in `KEYS[4]`.
const CHECK_IN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local writes = ARGV[3] == '1'
redis.call('ZADD', writes and KEYS[3] or KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local readers, writers = redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])
if (writes and readers + writers > 1) or (not writes and writers > 0) then
  redis.call('INCR', KEYS[1])
end
if not writes and readers > 1 then
  redis.call('INCR', KEYS[4])
end
return 0
";

/// Leaves the running set (`KEYS[3]`) and notes the request done (`KEYS[2]`); counts a second
/// end of one request in `KEYS[1]`.
const DONE: &str = r"
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then
  redis.call('INCR', KEYS[1])
end
return 0
";

/// A stack of this test, whatever its strategy.
type Stack = BoxCloneSyncService<Request, Outcome<()>, Error<String>>;

/// The stack every process runs: the handler checks in for `WORK`, then notes itself done.
fn stack<C: ConflictStrategy<Request> + Clone + Send + Sync + 'static>(
    store: &RedisStore,
    prefix: &str,
    strategy: C,
) -> Stack {
    let conn = store.connection();
    let prefix = prefix.to_string();
    let handler = service_fn(move |request: Request| {
        let (mut conn, prefix) = (conn.clone(), prefix.clone());
        async move {
            let run = format!("{}:{}", request.n, rand::random::<u64>());
            let readers = format!("{prefix}:test-readers:{}", request.doc);
            let writers = format!("{prefix}:test-writers:{}", request.doc);
            let mine = if request.writes { &writers } else { &readers };
            // A heartbeat a third of the TTL long, renewed every 50 ms: a dead worker's run
            // leaves the sets before its holding comes free, a live one's never does.
            let heartbeat = (TTL / 3).as_millis() as u64;
            let started = tokio::time::Instant::now();
            while started.elapsed() < WORK {
                let _: i64 = ::redis::Script::new(CHECK_IN)
                    .key(format!("{prefix}:test-violations"))
                    .key(&readers)
                    .key(&writers)
                    .key(format!("{prefix}:test-shared"))
                    .arg(&run)
                    .arg(heartbeat)
                    .arg(if request.writes { "1" } else { "0" })
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|error| error.to_string())?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _: i64 = ::redis::Script::new(DONE)
                .key(format!("{prefix}:test-twice"))
                .key(format!("{prefix}:test-done"))
                .key(mine)
                .arg(&run)
                .arg(request.n)
                .invoke_async(&mut conn)
                .await
                .map_err(|error| error.to_string())?;
            Ok::<_, String>(())
        }
    });
    let doc: fn(&Request) -> Option<String> = |request| Some(request.doc.clone());
    let access: fn(&Request) -> Access = |request| {
        if request.writes {
            Access::Write
        } else {
            Access::Read
        }
    };
    Stack::new(
        ReadWriteLayer::new(store.clone(), doc, access)
            .ttl(TTL)
            .on_conflict(strategy)
            .layer(handler),
    )
}

/// The worker's side, run in a child process when `REDEFER_RW_WORKER` names the server: a
/// scheduler on the queue, its jobs run under their documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_worker_process() {
    let (Ok(url), Ok(prefix)) = (
        std::env::var("REDEFER_RW_WORKER"),
        std::env::var("REDEFER_RW_PREFIX"),
    ) else {
        return; // not the child
    };
    let store = store_at(&url, &prefix).await;
    let queue = DelayQueue::<Request, _>::new(store.clone(), "documents").unwrap();
    let service = stack(&store, &prefix, Defer::new(queue.clone()));
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

fn start_worker(url: &str, prefix: &str) -> WorkerProcess {
    WorkerProcess::start(
        "process_faults::read_write_worker_process",
        &[("REDEFER_RW_WORKER", url), ("REDEFER_RW_PREFIX", prefix)],
    )
}

async fn sigkilled_readers_and_writers_never_meet_and_every_request_ends(server: Server) {
    let redis = RedisServer::start_of(server);
    let prefix = unique_prefix();
    let store = store_at(&redis.url(), &prefix).await;
    let queue = DelayQueue::<Request, _>::new(store.clone(), "documents").unwrap();
    let started = tokio::time::Instant::now();
    for n in 0..JOBS {
        queue.push(&random_request(n), Duration::ZERO).await.unwrap();
    }
    let mut workers: Vec<WorkerProcess> = (0..3).map(|_| start_worker(&redis.url(), &prefix)).collect();
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
            stack(&store, &prefix, retry.clone()),
            stack(&store, &prefix, FailFast),
        );
        callers.push(tokio::spawn(async move {
            for call in 0..CALLS {
                let request = random_request(1_000 * (caller + 1) + call);
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
        workers.push(start_worker(&redis.url(), &prefix));
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
        .cmd(::redis::cmd("SMEMBERS").arg(format!("{prefix}:test-done")))
        .await;
    let expected: BTreeSet<u64> = (0..JOBS)
        .chain((0..3).flat_map(|caller| (0..CALLS).map(move |call| 1_000 * (caller + 1) + call)))
        .collect();
    assert_eq!(done, expected, "every request ran to its end");
    let violations: Option<u64> = redis
        .cmd(::redis::cmd("GET").arg(format!("{prefix}:test-violations")))
        .await;
    assert_eq!(violations, None, "a writer had company");
    let shared: Option<u64> = redis
        .cmd(::redis::cmd("GET").arg(format!("{prefix}:test-shared")))
        .await;
    assert!(shared.unwrap_or(0) > 0, "readers never shared a document");
    let twice: Option<u64> = redis
        .cmd(::redis::cmd("GET").arg(format!("{prefix}:test-twice")))
        .await;
    let twice = twice.unwrap_or(0);
    assert!(
        twice <= (KILLS * CONCURRENCY) as u64,
        "{twice} requests ran to their end twice, more than the kills could cut off"
    );
    assert_eq!(queue.operator().stats().await.unwrap().dead, 0);
    println!(
        "{} requests ended within {:?} (bound {BOUND:?}) under {KILLS} kills; {twice} ran to their end twice",
        expected.len(),
        started.elapsed()
    );
}

crate::support::for_each_server!(sigkilled_readers_and_writers_never_meet_and_every_request_ends);
