//! A semaphore key worked by real worker processes that are SIGKILLed at random while they hold
//! permits: afterwards no deferral is lost, never more than N handlers ran at once (each
//! handler checks that itself, against Redis), and the permits of the dead came free and went
//! to the jobs waiting in line.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngExt;
use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::Defer;
use redefer::{LockLayer, Scheduler, SchedulerOptions, current_job};
use tower::{Layer, service_fn};

use support::{RedisServer, Server, WorkerProcess, eventually, for_each_server, store_at, unique_prefix};

/// Permits per key.
const PERMITS: u32 = 2;
/// Jobs, all on one key.
const JOBS: usize = 24;
/// How long each handler works.
const WORK: Duration = Duration::from_millis(300);
/// The permits' TTL: a dead worker's permit comes free this long after its last renewal.
const TTL: Duration = Duration::from_secs(1);

/// A handler's check-in, atomically on the server's clock: drop the runs whose heartbeat ran
/// out (their process died), note this run until `ARGV[2]` ms from now, and count a violation
/// if more than `ARGV[3]` run. KEYS: the running set, the violations counter.
const CHECK_IN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local running = redis.call('ZCARD', KEYS[1])
if running > tonumber(ARGV[3]) then
  redis.call('INCR', KEYS[2])
end
return running
";

/// The worker's side, run in a child process when `REDEFER_SEMAPHORE_WORKER` names the server:
/// a scheduler on the queue, its jobs run under one of the key's permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_worker_process() {
    let (Ok(url), Ok(prefix)) = (
        std::env::var("REDEFER_SEMAPHORE_WORKER"),
        std::env::var("REDEFER_SEMAPHORE_PREFIX"),
    ) else {
        return; // not the child
    };
    let store = store_at(&url, &prefix).await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "exports").unwrap();
    let check_in = ::redis::Script::new(CHECK_IN);
    let conn = store.connection();
    let (running, violations) = (
        format!("{prefix}:test-running"),
        format!("{prefix}:test-violations"),
    );
    let handler = service_fn(move |n: u64| {
        let (mut conn, check_in) = (conn.clone(), check_in.clone());
        let (running, violations) = (running.clone(), violations.clone());
        async move {
            let run = format!("{n}:{}", rand::random::<u64>());
            // A heartbeat a third of the TTL long, renewed every 50 ms: a dead worker's run
            // leaves the set before its permit comes free, a live one's never does.
            let heartbeat = (TTL / 3).as_millis() as u64;
            let started = tokio::time::Instant::now();
            while started.elapsed() < WORK {
                let _: i64 = check_in
                    .key(&running)
                    .key(&violations)
                    .arg(&run)
                    .arg(heartbeat)
                    .arg(PERMITS)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|error| error.to_string())?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _: i64 = ::redis::cmd("ZREM")
                .arg(&running)
                .arg(&run)
                .query_async(&mut conn)
                .await
                .map_err(|error| error.to_string())?;
            let id = current_job().map(|job| job.id.to_string()).unwrap_or_default();
            println!("handled {id}");
            Ok::<_, String>(())
        }
    });
    let service = LockLayer::new(store.clone(), |_: &u64| Some("tenant:1".to_string()))
        .permits(PERMITS)
        .ttl(TTL)
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    let _scheduler = Scheduler::new(queue, service)
        .options(SchedulerOptions {
            concurrency: 4,
            lease: TTL,
            max_idle: Duration::from_millis(200),
            ..SchedulerOptions::default()
        })
        .start();
    println!("worker ready");
    std::future::pending::<()>().await;
}

/// Adds the jobs `worker` said it handled (so far) to `handled`.
fn report_handled(worker: &WorkerProcess, handled: &mut BTreeSet<String>) {
    for line in worker.lines.try_iter() {
        if let Some(id) = line.split("handled ").nth(1) {
            handled.insert(id.trim().to_string());
        }
    }
}

fn start_worker(url: &str, prefix: &str) -> WorkerProcess {
    WorkerProcess::start(
        &support::test_name(module_path!(), "semaphore_worker_process"),
        &[
            ("REDEFER_SEMAPHORE_WORKER", url),
            ("REDEFER_SEMAPHORE_PREFIX", prefix),
        ],
    )
}

async fn sigkilled_holders_lose_no_deferral_and_never_exceed_n(server: Server) {
    let redis = RedisServer::start_of(server);
    let prefix = unique_prefix();
    let store = store_at(&redis.url(), &prefix).await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "exports").unwrap();
    let mut pushed = BTreeSet::new();
    for n in 0..JOBS as u64 {
        pushed.insert(queue.push(&n, Duration::ZERO).await.unwrap().id.to_string());
    }
    let mut workers: Vec<WorkerProcess> = (0..3).map(|_| start_worker(&redis.url(), &prefix)).collect();
    let mut handled = BTreeSet::new();
    // Five kills at random moments, each of a random worker, replaced by a new one.
    for _ in 0..5 {
        let pause = rand::rng().random_range(300..900);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let doomed = rand::rng().random_range(0..workers.len());
        let mut dead = workers.swap_remove(doomed);
        dead.kill();
        report_handled(&dead, &mut handled);
        workers.push(start_worker(&redis.url(), &prefix));
    }
    eventually(Duration::from_secs(60), "every job handled and acked", || {
        let queue = queue.clone();
        async move { (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(()) }
    })
    .await;
    for mut worker in workers {
        worker.kill();
        report_handled(&worker, &mut handled);
    }
    assert_eq!(handled, pushed, "every deferral ran to its end");
    let violations: Option<u64> = redis
        .cmd(::redis::cmd("GET").arg(format!("{prefix}:test-violations")))
        .await;
    assert_eq!(violations, None, "more than {PERMITS} handlers ran at once");
    let dead: u64 = queue.operator().stats().await.unwrap().dead;
    assert_eq!(dead, 0);
}

for_each_server!(sigkilled_holders_lose_no_deferral_and_never_exceed_n);
