//! Fair shares across tenants (issue 38): one queue, one scheduler, jobs pushed in groups.
//!
//! - **A small tenant beside a backlog**: tenant A has 100,000 due jobs (then 1,000,000) and
//!   tenant B pushes 100 jobs while A drains: how long after its due time each of B's jobs
//!   starts (the goal: p99 <= 20 ms), grouped, and the same queue without groups (B's jobs
//!   then wait in due order behind A's).
//! - **A drain over 1,000 groups** against the same drain without groups, rounds interleaved
//!   (the goal: >= 0.8x).
//! - **Weights**: two saturated groups of weights 3 and 1: the share of the first 8,000 runs
//!   the heavy one gets (the goal: 3:1, within 5 %).

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redefer::queue::{DelayQueue, JobGroup, QueueStats};
use redefer::{LockLayer, RedisStore, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tower::{Layer, service_fn};

use crate::Size;
use crate::report::{Table, median, ms, per_s, percentile, rate, spread};
use crate::support::{RedisServer, StoreClock};

/// The small tenant's jobs, pushed while the large one drains.
const SMALL_JOBS: usize = 100;
const ROUNDS: usize = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Work {
    tenant: u32,
    /// When the job was due, in µs since the epoch by the server's clock (tenant B's only).
    due_us: u64,
}

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    backlog(&store, size).await;
    drain_over_groups(&store, size).await;
    weights(&store, size).await;
}

fn options() -> SchedulerOptions {
    SchedulerOptions {
        concurrency: 64,
        batch: 64,
        max_idle: Duration::from_millis(50),
        ..SchedulerOptions::default()
    }
}

fn group(name: String) -> JobGroup {
    JobGroup::new(name).expect("a group name")
}

/// Pushes `count` jobs of `tenant` due now, in `tenant`'s group when `grouped`.
async fn fill(queue: &DelayQueue<Work, RedisStore>, tenant: u32, count: usize, grouped: bool) {
    let handle = if grouped {
        queue.in_group(group(format!("tenant-{tenant}")))
    } else {
        queue.clone()
    };
    let page = vec![Work { tenant, due_us: 0 }; 1000];
    let mut left = count;
    while left > 0 {
        let n = left.min(page.len());
        handle
            .push_many(&page[..n], Duration::ZERO)
            .await
            .expect("a push");
        left -= n;
    }
}

fn micros(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}

/// Tenant A's `backlog` due jobs drain while tenant B pushes `SMALL_JOBS`, one every 2 ms:
/// each of B's jobs' wait from its due time to its start (server clock), and A's drain time.
async fn small_beside_backlog(
    store: &RedisStore,
    round: usize,
    backlog: usize,
    grouped: bool,
) -> (Vec<Duration>, Duration) {
    let name = format!("tenants-{round}-{backlog}-{grouped}");
    let queue = DelayQueue::<Work, _>::new(store.clone(), name.as_str()).expect("a queue");
    fill(&queue, 0, backlog, grouped).await;
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let handled = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(store.clone(), |_: &Work| None::<String>).layer(service_fn({
        let (waits, handled, clock) = (Arc::clone(&waits), Arc::clone(&handled), store.clone());
        move |work: Work| {
            let (waits, handled, clock) = (Arc::clone(&waits), Arc::clone(&handled), clock.clone());
            async move {
                if work.tenant == 1 {
                    let started = micros(clock.now().await);
                    let wait = Duration::from_micros(started.saturating_sub(work.due_us));
                    waits.lock().expect("waits").push(wait);
                }
                handled.fetch_add(1, Ordering::Relaxed);
                Ok::<_, Infallible>(())
            }
        }
    }));
    let start = Instant::now();
    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    // B's jobs come once A's drain is under way, one every 2 ms.
    while handled.load(Ordering::Relaxed) < backlog / 20 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let small = if grouped {
        queue.in_group(group("tenant-1".to_string()))
    } else {
        queue.clone()
    };
    let mut ticks = tokio::time::interval(Duration::from_millis(2));
    for _ in 0..SMALL_JOBS {
        ticks.tick().await;
        // Due now by the server's clock: the push answers the due time it stored.
        let due_us = micros(store.now().await);
        small
            .push(&Work { tenant: 1, due_us }, Duration::ZERO)
            .await
            .expect("a push");
    }
    let total = backlog + SMALL_JOBS;
    while handled.load(Ordering::Relaxed) < total {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let drained = start.elapsed();
    scheduler.shutdown().await;
    assert_eq!(
        queue.operator().stats().await.expect("stats"),
        QueueStats::default()
    );
    let waits = waits.lock().expect("waits").clone();
    (waits, drained)
}

async fn backlog(store: &RedisStore, size: Size) {
    let mut table = Table::new(
        "A small tenant beside a large one's backlog: tenant B's 100 jobs (one every 2 ms, due at \
         once) from due to start, one scheduler (concurrency 64)",
        &[
            "tenant A's backlog",
            "queue",
            "rounds",
            "B's wait p50",
            "B's wait p99",
            "B's wait max",
            "A's drain",
        ],
    );
    for (backlog, rounds) in size.pick(vec![(100_000, ROUNDS), (1_000_000, 1)], vec![(2_000, 1)]) {
        for grouped in [true, false] {
            let mut waits = Vec::new();
            let mut drains = Vec::new();
            for round in 0..rounds {
                let (mut round_waits, drained) = small_beside_backlog(store, round, backlog, grouped).await;
                waits.append(&mut round_waits);
                drains.push(drained.as_secs_f64());
            }
            table.row(vec![
                format!("{backlog}"),
                if grouped {
                    "in groups"
                } else {
                    "no groups (due order)"
                }
                .to_string(),
                format!("{rounds}"),
                ms(percentile(&mut waits, 0.50)),
                ms(percentile(&mut waits, 0.99)),
                ms(percentile(&mut waits, 1.0)),
                spread(&drains, |s| format!("{s:.2} s")),
            ]);
        }
    }
    table.print();
}

/// Times one scheduler draining `jobs` due jobs spread over `groups` groups (0: no groups).
async fn drain(store: &RedisStore, round: usize, jobs: usize, groups: usize) -> f64 {
    let name = format!("spread-{round}-{groups}");
    let queue = DelayQueue::<Work, _>::new(store.clone(), name.as_str()).expect("a queue");
    if groups == 0 {
        fill(&queue, 0, jobs, false).await;
    } else {
        // Each group's share, pushed group by group.
        for tenant in 0..groups {
            fill(&queue, tenant as u32, jobs / groups, true).await;
        }
    }
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&handled);
    let service =
        LockLayer::new(store.clone(), |_: &Work| None::<String>).layer(service_fn(move |_: Work| {
            counter.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>(()) }
        }));
    let start = Instant::now();
    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    while handled.load(Ordering::Relaxed) < jobs {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = start.elapsed();
    scheduler.shutdown().await;
    rate(jobs, elapsed)
}

async fn drain_over_groups(store: &RedisStore, size: Size) {
    let jobs = size.pick(100_000, 5_000);
    let groups = 1_000;
    let (mut grouped, mut ungrouped) = (Vec::new(), Vec::new());
    for round in 0..size.pick(ROUNDS, 1) {
        ungrouped.push(drain(store, round, jobs, 0).await);
        grouped.push(drain(store, round, jobs, groups).await);
    }
    let ratios: Vec<f64> = grouped.iter().zip(&ungrouped).map(|(g, u)| g / u).collect();
    let mut table = Table::new(
        &format!("A drain of {jobs} due jobs, one scheduler (concurrency 64, batch 64), rounds interleaved"),
        &["queue", "jobs/s (median [range])"],
    );
    table.row(vec!["no groups".to_string(), spread(&ungrouped, per_s)]);
    table.row(vec![format!("{groups} groups"), spread(&grouped, per_s)]);
    table.row(vec![
        "in groups / no groups, round by round".to_string(),
        spread(&ratios, |r| format!("{r:.2}x")),
    ]);
    table.print();
    println!(
        "\nMedian drain ratio, {groups} groups / no groups: {:.2}x.",
        median(&ratios)
    );
}

/// The heavy group's share of the first `counted` runs, two saturated groups of weights 3 and 1.
async fn weighted_round(store: &RedisStore, round: usize, each: usize, counted: usize) -> f64 {
    let queue = DelayQueue::<Work, _>::new(store.clone(), format!("weights-{round}")).expect("a queue");
    let page = vec![Work { tenant: 0, due_us: 0 }; 1000];
    let light_page = vec![Work { tenant: 1, due_us: 0 }; 1000];
    let heavy = queue.in_group(group("heavy".to_string()).weight(3).expect("a weight in range"));
    let light = queue.in_group(group("light".to_string()));
    for _ in 0..each / 1000 {
        heavy.push_many(&page, Duration::ZERO).await.expect("a push");
        light
            .push_many(&light_page, Duration::ZERO)
            .await
            .expect("a push");
    }
    let runs: Arc<Mutex<Vec<u32>>> = Arc::default();
    let recorded = Arc::clone(&runs);
    let service =
        LockLayer::new(store.clone(), |_: &Work| None::<String>).layer(service_fn(move |work: Work| {
            recorded.lock().expect("runs").push(work.tenant);
            async { Ok::<_, Infallible>(()) }
        }));
    let scheduler = Scheduler::new(queue.clone(), service).options(options()).start();
    while runs.lock().expect("runs").len() < counted {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    scheduler.shutdown().await;
    let runs = runs.lock().expect("runs").clone();
    let heavy = runs[..counted].iter().filter(|tenant| **tenant == 0).count();
    heavy as f64 / (counted - heavy) as f64
}

async fn weights(store: &RedisStore, size: Size) {
    let (each, counted) = size.pick((20_000, 8_000), (2_000, 800));
    let mut ratios = Vec::new();
    for round in 0..size.pick(ROUNDS, 1) {
        ratios.push(weighted_round(store, round, each, counted).await);
    }
    let mut table = Table::new(
        &format!(
            "Weights: groups of weights 3 and 1, {each} due jobs each, the first {counted} runs of one scheduler"
        ),
        &["runs of the heavy group per run of the light one (median [range])"],
    );
    table.row(vec![spread(&ratios, |r| format!("{r:.3}"))]);
    table.print();
}
