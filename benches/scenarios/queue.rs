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
use crate::chart::Chart;
use crate::redis_info;
use crate::report::{Table, rate, spread};
use crate::support::RedisServer;

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let jobs = size.pick(20_000, 500);
    let rounds = size.pick(5, 1);
    push(&store, size, rounds).await;
    drain(server, &store, jobs, rounds, size).await;
}

/// Push rates: bulk against one job per call, and one producer against 16.
async fn push(store: &RedisStore, size: Size, rounds: usize) {
    let jobs = size.pick(5_000, 200);
    let setups: [(&str, usize, usize); 4] = [
        ("1, push_many in batches of 1,000", 1000, 1),
        ("1, push_many in batches of 1", 1, 1),
        ("1, push", 0, 1),
        ("16, push", 0, 16),
    ];
    let mut rates = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        for ((label, batch, producers), rates) in setups.iter().zip(&mut rates) {
            let name = format!("push-{round}-{batch}-{producers}");
            let queue = DelayQueue::<u64, _>::new(store.clone(), name).expect("queue");
            // Bulk pushes carry more jobs: the same time per round at their rate.
            let jobs = if *batch > 1 { jobs * 10 } else { jobs };
            let start = Instant::now();
            if *batch > 0 {
                let items: Vec<u64> = (0..jobs as u64).collect();
                for page in items.chunks(*batch) {
                    queue
                        .push_many(page, Duration::from_secs(3600))
                        .await
                        .expect("bulk push");
                }
            } else {
                let tasks: Vec<_> = (0..*producers)
                    .map(|_| {
                        let queue = queue.clone();
                        let each = jobs / producers;
                        tokio::spawn(async move {
                            for n in 0..each {
                                queue
                                    .push(&(n as u64), Duration::from_secs(3600))
                                    .await
                                    .expect("push");
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("producer");
                }
            }
            let _ = label;
            rates.push(rate(jobs / producers * producers, start.elapsed()));
        }
    }
    let mut table = Table::new(
        &format!("Delay queue: push; median [min–max] over {rounds} interleaved rounds"),
        &["producers", "jobs/s", "vs one push per call, per round"],
    );
    for ((label, _, _), rates_of) in setups.iter().zip(&rates) {
        let versus: Vec<f64> = rates_of
            .iter()
            .zip(&rates[2])
            .map(|(r, single)| r / single)
            .collect();
        table.row(vec![
            label.to_string(),
            spread(rates_of, |v| format!("{v:.0}/s")),
            spread(&versus, |v| format!("{v:.2}x")),
        ]);
    }
    table.print();
}

/// Claim + ack of stored due jobs by redefer's schedulers, against the seeds' consumers, with
/// the server's own accounting of its time per job; and the server's time per job of the
/// cheapest queue there is, `ZADD` then `ZPOPMIN`, for scale.
async fn drain(server: &RedisServer, store: &RedisStore, jobs: usize, rounds: usize, size: Size) {
    #[derive(Default, Clone)]
    struct Figures {
        rate: Vec<f64>,
        round_trips: Vec<f64>,
        server_us: Vec<f64>,
    }
    let mut seeds = Figures::default();
    let mut ours = [Figures::default(), Figures::default()];
    let mut plain = Vec::new();
    for round in 0..rounds {
        redis_info::reset(server).await;
        let (baseline, round_trips, _wasted) =
            seeds_baseline(store, &format!("seeds-{round}"), jobs, 4).await;
        seeds.rate.push(baseline);
        seeds.round_trips.push(round_trips as f64 / jobs as f64);
        seeds.server_us.push(
            (redis_info::commandstat(server, "zrangebyscore", "usec").await
                + redis_info::commandstat(server, "zrem", "usec").await)
                / jobs as f64,
        );
        for (figures, schedulers) in ours.iter_mut().zip([1usize, 4]) {
            let (rate, scripts, usec) = drain_with_schedulers(
                server,
                store,
                &format!("drain-{round}-{schedulers}"),
                jobs,
                schedulers,
            )
            .await;
            figures.rate.push(rate);
            figures.round_trips.push(scripts as f64 / jobs as f64);
            figures.server_us.push(usec / jobs as f64);
        }
        plain.push(plain_pair_us(server, store, jobs).await);
    }
    let mut table = Table::new(
        &format!(
            "Delay queue: claim + ack of {jobs} due jobs, no-op handler; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "consumer",
            "jobs/s",
            "round trips per job",
            "Redis time per job",
            "vs seeds' algorithm, per round",
        ],
    );
    let us = |v: f64| format!("{v:.1} µs");
    let two = |v: f64| format!("{v:.2}");
    for (label, figures) in [
        ("seeds' algorithm, 4 consumers", &seeds),
        ("redefer, 1 scheduler of 64 slots", &ours[0]),
        ("redefer, 4 schedulers of 64 slots", &ours[1]),
    ] {
        let versus: Vec<f64> = figures.rate.iter().zip(&seeds.rate).map(|(r, s)| r / s).collect();
        table.row(vec![
            label.into(),
            spread(&figures.rate, |v| format!("{v:.0}/s")),
            spread(&figures.round_trips, two),
            spread(&figures.server_us, us),
            spread(&versus, |v| format!("{v:.2}x")),
        ]);
    }
    table.print();
    let mut chart = Chart::new(
        &format!("Delay queue: claim + ack of {jobs} due jobs, no-op handler"),
        "jobs/s",
    );
    chart.bar("seeds' algorithm, 4 consumers", &seeds.rate);
    chart.bar("redefer, 1 scheduler", &ours[0].rate);
    chart.bar("redefer, 4 schedulers", &ours[1].rate);
    chart.write("drain", server, size);
    let mut chart = Chart::new(
        "Redis time per job: claim + ack against a plain pair",
        "µs of script or command time per job",
    );
    chart.bar("redefer, claim + ack (1 scheduler)", &ours[0].server_us);
    chart.bar("plain ZADD + ZPOPMIN pair", &plain);
    chart.write("redis-time-per-job", server, size);
    let versus: Vec<f64> = ours[0].server_us.iter().zip(&plain).map(|(o, p)| o / p).collect();
    println!(
        "\nRedis time per job of a plain `ZADD` + `ZPOPMIN` pair in the same rounds: {}; redefer's claim + ack (1 scheduler) per job is {} of it.",
        spread(&plain, us),
        spread(&versus, |v| format!("{v:.1}x")),
    );
}

/// The server's µs per job for a plain `ZADD` of each job, then a `ZPOPMIN` of each, pipelined.
async fn plain_pair_us(server: &RedisServer, store: &RedisStore, jobs: usize) -> f64 {
    let key = format!("{}:plain:zset", store.prefix().as_str());
    let mut conn = store.connection();
    redis_info::reset(server).await;
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for n in chunk {
            pipe.zadd(&key, format!("{n:032x}"), 0).ignore();
        }
        let () = pipe.query_async(&mut conn).await.expect("ZADD");
    }
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for _ in chunk {
            pipe.cmd("ZPOPMIN").arg(&key).ignore();
        }
        let () = pipe.query_async(&mut conn).await.expect("ZPOPMIN");
    }
    (redis_info::commandstat(server, "zadd", "usec").await
        + redis_info::commandstat(server, "zpopmin", "usec").await)
        / jobs as f64
}

/// The seeds' consumer: read the first due member, then try to remove it; whoever removes it
/// owns it. Returns jobs/s, round trips, and round trips wasted on a member another took.
async fn seeds_baseline(
    store: &RedisStore,
    name: &str,
    jobs: usize,
    consumers: usize,
) -> (f64, usize, usize) {
    let key = format!("{}:{name}:delayed", store.prefix().as_str());
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
    name: &str,
    jobs: usize,
    schedulers: usize,
) -> (f64, usize, f64) {
    let queue = fill_due(store, name, jobs).await;
    drain_filled(server, store, &queue, jobs, schedulers).await
}

/// A queue `name` holding `jobs` due jobs.
pub async fn fill_due(store: &RedisStore, name: &str, jobs: usize) -> DelayQueue<u64, RedisStore> {
    let queue = DelayQueue::<u64, _>::new(store.clone(), name).expect("queue");
    let items: Vec<u64> = (0..jobs as u64).collect();
    for page in items.chunks(1000) {
        queue.push_many(page, Duration::ZERO).await.expect("push_many");
    }
    queue
}

/// Times `schedulers` schedulers draining the `jobs` due jobs of `queue` (as
/// [`drain_with_schedulers`] returns them), the server's statistics reset first.
pub async fn drain_filled(
    server: &RedisServer,
    store: &RedisStore,
    queue: &DelayQueue<u64, RedisStore>,
    jobs: usize,
    schedulers: usize,
) -> (f64, usize, f64) {
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
            && queue.operator().stats().await.expect("stats") == QueueStats::default()
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
