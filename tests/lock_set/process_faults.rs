//! Sets of keys worked by real worker processes SIGKILLed at random while they hold sets, beside
//! live callers of the same sets in this process: random overlapping sets of 1 to 4 of 6 keys,
//! in random orders, deferred jobs (`Defer`) in the workers, `Retry` and `FailFast` callers
//! here. Afterwards: no key ever had two handlers inside (each handler checks that itself,
//! against Redis, for every key of its set), every request ran to its end (no deadlock, within
//! the bound below), and a request ran to its end twice only when a kill cut it off between its
//! end and its acknowledgement.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngExt;
use rand::seq::SliceRandom;
use redefer::lock_set::LockSetLayer;
use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::{ConflictStrategy, Defer, FailFast, Retry};
use redefer::{Backoff, Error, Outcome, RedisStore, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};

use crate::support::{RedisServer, Server, WorkerProcess, eventually, store_at, unique_prefix};

/// The keys the sets are drawn from.
const KEYS: usize = 6;
/// Deferred jobs, worked by the processes.
const JOBS: u64 = 40;
/// Requests of each live caller in this process.
const CALLS: u64 = 10;
/// How long each handler works.
const WORK: Duration = Duration::from_millis(150);
/// The keys' TTL: a dead worker's keys come free this long after their last renewal.
const TTL: Duration = Duration::from_secs(1);
/// Every request ends within this (the no-deadlock bound the test holds the guard to).
const BOUND: Duration = Duration::from_secs(90);
/// Jobs each worker runs at once: a kill cuts off at most this many.
const CONCURRENCY: usize = 4;
/// Kills during a run.
const KILLS: usize = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Transfer {
    n: u64,
    keys: Vec<String>,
}

/// A set of 1 to 4 of the keys, in a random order.
fn random_set(n: u64) -> Transfer {
    let mut keys: Vec<String> = (0..KEYS).map(|k| format!("acct:{k}")).collect();
    keys.shuffle(&mut rand::rng());
    keys.truncate(rand::rng().random_range(1..=4));
    Transfer { n, keys }
}

/// A handler's check-in, atomically: for each key of its set (`KEYS[3..]`, a running set each),
/// drop the runs whose heartbeat ran out (their process died), note this run until `ARGV[2]`
/// ms from now, and count a violation (`KEYS[1]`) when another run is inside.
const CHECK_IN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  redis.call('ZADD', KEYS[i], now + tonumber(ARGV[2]), ARGV[1])
  if redis.call('ZCARD', KEYS[i]) > 1 then
    redis.call('INCR', KEYS[1])
  end
end
return 0
";

/// Leaves the running sets (`KEYS[3..]`) and notes the request done (`KEYS[2]`); counts a
/// second end of one request in `KEYS[1]`.
const DONE: &str = r"
for i = 3, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[1])
end
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then
  redis.call('INCR', KEYS[1])
end
return 0
";

/// A stack of this test, whatever its strategy.
type Stack = BoxCloneSyncService<Transfer, Outcome<()>, Error<String>>;

/// The stack every process runs: the set's handler checks in for `WORK`, then notes itself
/// done.
fn stack<C: ConflictStrategy<Transfer> + Clone + Send + Sync + 'static>(
    store: &RedisStore,
    prefix: &str,
    strategy: C,
) -> Stack {
    let conn = store.connection();
    let prefix = prefix.to_string();
    let handler = service_fn(move |transfer: Transfer| {
        let (mut conn, prefix) = (conn.clone(), prefix.clone());
        async move {
            let run = format!("{}:{}", transfer.n, rand::random::<u64>());
            let running: Vec<String> = transfer
                .keys
                .iter()
                .map(|key| format!("{prefix}:test-in:{key}"))
                .collect();
            // A heartbeat a third of the TTL long, renewed every 50 ms: a dead worker's run
            // leaves the sets before its keys come free, a live one's never does.
            let heartbeat = (TTL / 3).as_millis() as u64;
            let started = tokio::time::Instant::now();
            while started.elapsed() < WORK {
                let script = ::redis::Script::new(CHECK_IN);
                let mut check_in = script.prepare_invoke();
                check_in.key(format!("{prefix}:test-violations")).key("unused");
                for key in &running {
                    check_in.key(key);
                }
                let _: i64 = check_in
                    .arg(&run)
                    .arg(heartbeat)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|error| error.to_string())?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let script = ::redis::Script::new(DONE);
            let mut done = script.prepare_invoke();
            done.key(format!("{prefix}:test-twice"))
                .key(format!("{prefix}:test-done"));
            for key in &running {
                done.key(key);
            }
            let _: i64 = done
                .arg(&run)
                .arg(transfer.n)
                .invoke_async(&mut conn)
                .await
                .map_err(|error| error.to_string())?;
            Ok::<_, String>(())
        }
    });
    let keys: fn(&Transfer) -> Option<Vec<String>> = |transfer| Some(transfer.keys.clone());
    Stack::new(
        LockSetLayer::new(store.clone(), keys)
            .ttl(TTL)
            .on_conflict(strategy)
            .layer(handler),
    )
}

/// The worker's side, run in a child process when `REDEFER_SET_WORKER` names the server: a
/// scheduler on the queue, its jobs run under their sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_set_worker_process() {
    let (Ok(url), Ok(prefix)) = (
        std::env::var("REDEFER_SET_WORKER"),
        std::env::var("REDEFER_SET_PREFIX"),
    ) else {
        return; // not the child
    };
    let store = store_at(&url, &prefix).await;
    let queue = DelayQueue::<Transfer, _>::new(store.clone(), "transfers").unwrap();
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
        "process_faults::lock_set_worker_process",
        &[("REDEFER_SET_WORKER", url), ("REDEFER_SET_PREFIX", prefix)],
    )
}

async fn sigkilled_set_holders_never_overlap_and_every_request_ends(server: Server) {
    let redis = RedisServer::start_of(server);
    let prefix = unique_prefix();
    let store = store_at(&redis.url(), &prefix).await;
    let queue = DelayQueue::<Transfer, _>::new(store.clone(), "transfers").unwrap();
    let started = tokio::time::Instant::now();
    for n in 0..JOBS {
        queue.push(&random_set(n), Duration::ZERO).await.unwrap();
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
                let transfer = random_set(1_000 * (caller + 1) + call);
                if caller < 2 {
                    let outcome = retrying
                        .clone()
                        .oneshot(transfer)
                        .await
                        .expect("a retrying call ends");
                    assert!(outcome.done().is_some(), "a retrying call runs");
                    continue;
                }
                loop {
                    match failing.clone().oneshot(transfer.clone()).await {
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
    assert_eq!(violations, None, "a key had two handlers inside");
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

crate::support::for_each_server!(sigkilled_set_holders_never_overlap_and_every_request_ends);
