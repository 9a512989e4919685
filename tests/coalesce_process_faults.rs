//! Coalescing under crashes: bursts of deferrals for one held key, run by three worker
//! processes that are SIGKILLed at random moments. Each burst is one job, which runs with the
//! burst's newest payload: once, or (when a kill lands between its start and its ack) again
//! after its lease runs out, never with an older payload, never lost.

use crate::support;

use crate::support::Shorthand;
use std::collections::BTreeMap;
use std::time::Duration;

use rand::RngExt;
use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::Coalesce;
use redefer::{LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions};
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisServer, Server, WorkerProcess, eventually, for_each_server, store_at, unique_prefix};

/// Bursts, and deferrals per burst.
const BURSTS: u64 = 4;
const PER_BURST: u64 = 30;
/// How long a run works: long enough for kills to land in the middle of some.
const WORK: Duration = Duration::from_millis(150);
/// The workers' lease and lock TTL: a killed worker's job comes back after it.
const TTL: Duration = Duration::from_millis(600);

fn account(_: &(u64, u64)) -> Option<String> {
    Some("account:1".to_string())
}

/// The worker's side, run in a child process when `REDEFER_COALESCE_WORKER` names the server:
/// a scheduler whose runs note their start and end in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesce_worker_process() {
    let (Ok(url), Ok(prefix)) = (
        std::env::var("REDEFER_COALESCE_WORKER"),
        std::env::var("REDEFER_COALESCE_PREFIX"),
    ) else {
        return; // not the child
    };
    let store = store_at(&url, &prefix).await;
    let queue = DelayQueue::<(u64, u64), _>::new(store.clone(), "syncs").unwrap();
    let conn = store.connection();
    let handler = service_fn(move |(burst, n): (u64, u64)| {
        let (mut conn, prefix) = (conn.clone(), prefix.clone());
        async move {
            let note = |what: &str| format!("{what} {burst} {n} {}", std::process::id());
            let _: () = ::redis::cmd("RPUSH")
                .arg(format!("{prefix}:test-runs"))
                .arg(note("start"))
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::sleep(WORK).await;
            let _: () = ::redis::cmd("RPUSH")
                .arg(format!("{prefix}:test-runs"))
                .arg(note("end"))
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(())
        }
    });
    let service = LockLayer::new(store.clone(), account)
        .ttl(TTL)
        .on_conflict(Coalesce::latest(queue.clone()))
        .layer(handler);
    let _scheduler = Scheduler::new(queue, service)
        .options(SchedulerOptions {
            lease: TTL,
            max_idle: Duration::from_millis(100),
            ..SchedulerOptions::default()
        })
        .start();
    println!("worker ready");
    std::future::pending::<()>().await;
}

fn start_worker(url: &str, prefix: &str) -> WorkerProcess {
    WorkerProcess::start(
        &support::test_name(module_path!(), "coalesce_worker_process"),
        &[
            ("REDEFER_COALESCE_WORKER", url),
            ("REDEFER_COALESCE_PREFIX", prefix),
        ],
    )
}

async fn each_burst_runs_with_its_newest_payload_under_sigkills(server: Server) {
    let redis = RedisServer::start_of(server);
    let prefix = unique_prefix();
    let store = store_at(&redis.url(), &prefix).await;
    let queue = DelayQueue::<(u64, u64), _>::new(store.clone(), "syncs").unwrap();
    let producer = LockLayer::new(store.clone(), account)
        .ttl(TTL)
        .on_conflict(Coalesce::latest(queue.clone()))
        .layer(service_fn(|_: (u64, u64)| async { Ok::<_, String>(()) }));
    let mut workers: Vec<WorkerProcess> = (0..3).map(|_| start_worker(&redis.url(), &prefix)).collect();
    let key = LockKey::new("account:1").unwrap();
    let mut newest = BTreeMap::new();
    let mut kills = 0;
    for burst in 0..BURSTS {
        let holder = LockToken::random();
        eventually(
            Duration::from_secs(30),
            "the key is free for the next burst",
            || async {
                let acquired = store
                    .try_acquire(&key, holder, Duration::from_secs(30))
                    .await
                    .unwrap();
                matches!(acquired, redefer::lock::Acquisition::Acquired(_)).then_some(())
            },
        )
        .await;
        let calls: Vec<_> = (0..PER_BURST)
            .map(|n| tokio::spawn(producer.clone().oneshot((burst, n))))
            .collect();
        let mut last = (0, 0);
        for (n, call) in calls.into_iter().enumerate() {
            match call.await.unwrap() {
                Ok(Outcome::Deferred(deferred)) => last = last.max((deferred.revision, n as u64)),
                other => panic!("burst {burst}, request {n}: {other:?}"),
            }
        }
        assert_eq!(last.0, PER_BURST, "burst {burst}: not one job");
        newest.insert(burst, last.1);
        assert!(store.release(&key, holder).await.unwrap());
        // A kill at a random moment of the run, of a random worker, replaced at once.
        let pause = rand::rng().random_range(0..2 * WORK.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let doomed = rand::rng().random_range(0..workers.len());
        workers.swap_remove(doomed).kill();
        kills += 1;
        workers.push(start_worker(&redis.url(), &prefix));
        eventually(
            Duration::from_secs(30),
            "the burst's job ran and was acked",
            || async { (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(()) },
        )
        .await;
    }
    for mut worker in workers {
        worker.kill();
    }
    let runs: Vec<String> = redis
        .cmd(
            ::redis::cmd("LRANGE")
                .arg(format!("{prefix}:test-runs"))
                .arg(0)
                .arg(-1),
        )
        .await;
    let mut starts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    for run in &runs {
        let parts: Vec<&str> = run.split(' ').collect();
        let (burst, n): (u64, u64) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
        assert_eq!(
            n, newest[&burst],
            "burst {burst} ran with request {n}, not the newest: {runs:?}"
        );
        let count = if parts[0] == "start" {
            &mut starts
        } else {
            &mut ends
        };
        *count.entry(burst).or_default() += 1;
    }
    for burst in 0..BURSTS {
        assert!(
            ends.get(&burst).copied().unwrap_or(0) >= 1,
            "burst {burst} never finished: {runs:?}"
        );
    }
    // A burst runs again only when a kill cut its run (or its ack) short.
    let extra: u64 = starts.values().map(|n| n - 1).sum();
    assert!(extra <= kills, "{extra} runs again with {kills} kills: {runs:?}");
    assert_eq!(queue.operator().stats().await.unwrap().dead, 0);
}

for_each_server!(each_burst_runs_with_its_newest_payload_under_sigkills);
