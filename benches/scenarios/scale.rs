//! Scenario 5: push and claim latency as the queue grows, and Redis memory per queued job.

use std::time::{Duration, Instant};

use redefer::RedisStore;
use redefer::queue::DelayQueue;

use crate::Size;
use crate::redis_info;
use crate::report::{Table, percentile, us};
use crate::support::RedisServer;

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let mut latency = Table::new(
        "Scale: latency of one push and one claim (batch 1) with the queue already holding N jobs",
        &["N", "push p50", "push p99", "claim p50", "claim p99"],
    );
    for waiting in size.pick(vec![1_000usize, 100_000, 1_000_000], vec![100, 1_000]) {
        let queue = DelayQueue::<u64, _>::new(store.clone(), format!("scale-{waiting}")).expect("queue");
        fill(&queue, waiting).await;
        let samples = size.pick(1_000, 100);
        let mut pushes = Vec::with_capacity(samples);
        for n in 0..samples {
            let start = Instant::now();
            queue.push(&(n as u64), Duration::ZERO).await.expect("push");
            pushes.push(start.elapsed());
        }
        let mut claims = Vec::with_capacity(samples);
        for _ in 0..samples {
            let start = Instant::now();
            let claimed = queue.claim(1, Duration::from_secs(30)).await.expect("claim");
            claims.push(start.elapsed());
            for job in claimed.jobs {
                queue.ack(&job.lease).await.expect("ack");
            }
        }
        latency.row(vec![
            waiting.to_string(),
            us(percentile(&mut pushes, 0.5)),
            us(percentile(&mut pushes, 0.99)),
            us(percentile(&mut claims, 0.5)),
            us(percentile(&mut claims, 0.99)),
        ]);
    }
    latency.print();

    let mut memory = Table::new(
        "Redis memory per waiting job (used_memory delta / jobs)",
        &["payload", "bytes per job", "of which payload", "overhead"],
    );
    let jobs = size.pick(10_000, 500);
    for payload in [16usize, 256, 4096] {
        let queue = DelayQueue::<String, _>::new(store.clone(), format!("memory-{payload}")).expect("queue");
        let before = redis_info::used_memory(server).await;
        let text = "x".repeat(payload);
        for _ in 0..jobs {
            queue.push(&text, Duration::from_secs(3600)).await.expect("push");
        }
        let per_job = (redis_info::used_memory(server).await.saturating_sub(before)) as f64 / jobs as f64;
        memory.row(vec![
            format!("{payload} B"),
            format!("{per_job:.0}"),
            payload.to_string(),
            format!("{:.0}", per_job - payload as f64),
        ]);
    }
    memory.print();
}

/// Pushes `jobs` jobs due in an hour, from 32 concurrent pushers.
async fn fill(queue: &DelayQueue<u64, RedisStore>, jobs: usize) {
    let pushers: Vec<_> = (0..32)
        .map(|p| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for n in (p..jobs).step_by(32) {
                    queue
                        .push(&(n as u64), Duration::from_secs(3600))
                        .await
                        .expect("fill");
                }
            })
        })
        .collect();
    for pusher in pushers {
        pusher.await.expect("pusher");
    }
}
