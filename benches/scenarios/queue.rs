//! Scenario 2: delay-queue throughput, push and claim + ack, against the seeds' algorithm
//! (ZRANGEBYSCORE LIMIT 1, then ZREM, per job, 4 competing consumers).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redefer::queue::DelayQueue;
use redefer::queue::QueueStats;
use redefer::{LockLayer, RedisStore, Scheduler, SchedulerOptions};
use tower::{Layer, service_fn};

use crate::Size;
use crate::redis_info;
use crate::report::{Table, per_s, rate, ratio};
use crate::support::RedisServer;

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let jobs = size.pick(20_000, 500);

    let mut push = Table::new("Delay queue: push", &["producers", "jobs/s"]);
    // Bulk: one producer, batches of 1,000 in one script call each, against one push per job.
    for batch in [1usize, 1000] {
        let queue = DelayQueue::<u64, _>::new(store.clone(), format!("bulk-{batch}")).expect("queue");
        let items: Vec<u64> = (0..jobs as u64).collect();
        let start = Instant::now();
        for page in items.chunks(batch) {
            queue
                .push_many(page, Duration::from_secs(3600))
                .await
                .expect("bulk push");
        }
        push.row(vec![
            format!("1, push_many in batches of {batch}"),
            per_s(rate(jobs, start.elapsed())),
        ]);
    }
    for producers in [1usize, 16] {
        let queue = DelayQueue::<u64, _>::new(store.clone(), format!("push-{producers}")).expect("queue");
        let start = Instant::now();
        let tasks: Vec<_> = (0..producers)
            .map(|p| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    for n in 0..jobs / producers {
                        queue
                            .push(&(n as u64), Duration::from_secs(3600))
                            .await
                            .expect("push");
                    }
                    let _ = p;
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("producer");
        }
        push.row(vec![
            producers.to_string(),
            per_s(rate(jobs / producers * producers, start.elapsed())),
        ]);
    }
    push.print();

    redis_info::reset(server).await;
    let (baseline, round_trips, wasted) = seeds_baseline(&store, jobs, 4).await;
    let seeds_cpu = (redis_info::commandstat(server, "zrangebyscore", "usec").await
        + redis_info::commandstat(server, "zrem", "usec").await)
        / jobs as f64;
    let mut drain = Table::new(
        &format!("Delay queue: claim + ack of {jobs} due jobs, no-op handler"),
        &[
            "consumer",
            "jobs/s",
            "round trips per job",
            "wasted round trips",
            "Redis CPU per job",
            "vs seeds' algorithm",
        ],
    );
    drain.row(vec![
        "seeds' algorithm, 4 consumers".into(),
        per_s(baseline),
        format!("{:.2}", round_trips as f64 / jobs as f64),
        wasted.to_string(),
        format!("{seeds_cpu:.1} µs"),
        "1.00x".into(),
    ]);
    for schedulers in [1usize, 4] {
        let (jobs_per_s, round_trips, cpu) = drain_with_schedulers(server, &store, jobs, schedulers).await;
        drain.row(vec![
            format!("redefer, {schedulers} scheduler(s) of 64 slots"),
            per_s(jobs_per_s),
            format!("{:.2}", round_trips as f64 / jobs as f64),
            "0".into(),
            format!("{:.1} µs", cpu / jobs as f64),
            ratio(jobs_per_s, baseline),
        ]);
    }
    drain.print();
}

/// The seeds' consumer: read the first due member, then try to remove it; whoever removes it
/// owns it. Returns jobs/s, round trips, and round trips wasted on a member another took.
async fn seeds_baseline(store: &RedisStore, jobs: usize, consumers: usize) -> (f64, usize, usize) {
    let key = format!("{}:seeds:delayed", store.prefix().as_str());
    let mut conn = store.connection();
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for n in chunk {
            pipe.zadd(&key, format!("job-{n}"), 0).ignore();
        }
        let () = pipe.query_async(&mut conn).await.expect("fill");
    }
    let round_trips = Arc::new(AtomicUsize::new(0));
    let wasted = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let (mut conn, key, round_trips, wasted) = (
                store.connection(),
                key.clone(),
                round_trips.clone(),
                wasted.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .expect("clock")
                        .as_millis() as u64;
                    let first: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                        .arg(&key)
                        .arg("-inf")
                        .arg(now)
                        .arg("LIMIT")
                        .arg(0)
                        .arg(1)
                        .query_async(&mut conn)
                        .await
                        .expect("ZRANGEBYSCORE");
                    round_trips.fetch_add(1, Ordering::Relaxed);
                    let Some(member) = first.into_iter().next() else {
                        return;
                    };
                    let removed: i64 = redis::cmd("ZREM")
                        .arg(&key)
                        .arg(member)
                        .query_async(&mut conn)
                        .await
                        .expect("ZREM");
                    round_trips.fetch_add(1, Ordering::Relaxed);
                    if removed == 0 {
                        wasted.fetch_add(2, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("consumer");
    }
    let elapsed = start.elapsed();
    (
        rate(jobs, elapsed),
        round_trips.load(Ordering::Relaxed),
        wasted.load(Ordering::Relaxed),
    )
}

/// Pushes `jobs` due jobs, then times `schedulers` schedulers draining them. Returns jobs/s,
/// the scripts run (claims and ack batches: one round trip each), and the server's µs in them.
async fn drain_with_schedulers(
    server: &RedisServer,
    store: &RedisStore,
    jobs: usize,
    schedulers: usize,
) -> (f64, usize, f64) {
    let queue = DelayQueue::<u64, _>::new(store.clone(), format!("drain-{schedulers}")).expect("queue");
    let fill: Vec<_> = (0..16)
        .map(|p| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for n in (p..jobs).step_by(16) {
                    queue.push(&(n as u64), Duration::ZERO).await.expect("push");
                }
            })
        })
        .collect();
    for task in fill {
        task.await.expect("fill");
    }
    redis_info::reset(server).await;
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = handled.clone();
    // No lock key: the handler runs at once; this measures the queue and the scheduler.
    let service = LockLayer::new(store.clone(), |_: &u64| None::<String>).layer(service_fn(move |_: u64| {
        counter.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(()) }
    }));
    let options = SchedulerOptions {
        concurrency: 64,
        batch: 64,
        max_idle: Duration::from_millis(50),
        ..SchedulerOptions::default()
    };
    let start = Instant::now();
    let handles: Vec<_> = (0..schedulers)
        .map(|_| {
            Scheduler::new(queue.clone(), service.clone())
                .options(options)
                .start()
        })
        .collect();
    loop {
        if handled.load(Ordering::Relaxed) >= jobs
            && queue.stats().await.expect("stats") == QueueStats::default()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = start.elapsed();
    for handle in handles {
        handle.shutdown().await;
    }
    // The stats polled above to see the end are scripts too; they are counted, which only
    // overstates our cost.
    let scripts = redis_info::commandstat(server, "evalsha", "calls").await as usize;
    let script_usec = redis_info::commandstat(server, "evalsha", "usec").await;
    (rate(jobs, elapsed), scripts, script_usec)
}
