//! A hot key hit by concurrent requests under the three strategies: fail fast, retry, defer.
//!
//! ```text
//! cargo run --example quickstart                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart  # on Redis
//! ```
//!
//! Prints a timeline: who held the lock (with its fencing token), who failed fast and with which
//! retry-after, who waited and then got the lock, who was deferred to the delay queue and when
//! the scheduler re-injected them.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use redefer::lock::LockStore;
use redefer::queue::QueueStore;
use redefer::queue::{DelayQueue, RetryPolicy};
use redefer::strategy::{Defer, Retry};
use redefer::{
    Backoff, Error, LockLayer, MemoryStore, Outcome, RedisStore, Scheduler, SchedulerOptions, current_job,
    current_lock,
};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

/// A request to change one order.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UpdateOrder {
    who: String,
    order: u64,
}

fn order_key(request: &UpdateOrder) -> Option<String> {
    Some(format!("order:{}", request.order))
}

/// How each arrival handles a held lock.
#[derive(Clone, Copy)]
enum Plan {
    FailFast,
    Retry,
    Defer,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("store: Redis at {url}");
            let store = RedisStore::builder()
                .prefix("redefer-quickstart")?
                .connect(&url)
                .await?;
            run(store).await
        }
        Err(_) => {
            println!("store: in-process memory (set REDIS_URL to use Redis)");
            run(MemoryStore::new()).await
        }
    }
}

async fn run<S: LockStore + QueueStore>(store: S) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let log = move |line: String| println!("{:>5} ms  {line}", start.elapsed().as_millis());

    // Changing an order takes 120 ms, under the lock, with the fencing token a real handler
    // would pass to the database so it can refuse writes from a stale holder.
    let handler = service_fn(move |request: UpdateOrder| async move {
        let lock = current_lock().expect("handlers run under the lock");
        let job = current_job().map_or(String::new(), |job| {
            format!(", re-injected, attempt {}", job.attempt)
        });
        log(format!(
            "{:<6} holds {} (fencing token {}{job})",
            request.who,
            lock.key,
            lock.fence.expect("fencing is on by default")
        ));
        tokio::time::sleep(Duration::from_millis(120)).await;
        log(format!("{:<6} done, releasing", request.who));
        Ok::<_, Infallible>(request.who)
    });

    // Deferred requests wait in this queue: 150 ms before the first try, doubling after that.
    let queue = DelayQueue::<UpdateOrder, _>::new(store.clone(), "quickstart")?.retry_policy(RetryPolicy {
        backoff: Backoff::exponential(Duration::from_millis(150), Duration::from_secs(2)),
        max_attempts: 8,
        ..RetryPolicy::default()
    });

    // One stack per strategy, over the same store.
    let lock = LockLayer::new(store, order_key).ttl(Duration::from_secs(1));
    let fail_fast = lock.clone().layer(handler);
    let retry = lock
        .clone()
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(40),
                Duration::from_millis(160),
            ))
            .max_attempts(10)
            .max_wait(Duration::from_secs(2)),
        )
        .layer(handler);
    let deferring = lock.on_conflict(Defer::new(queue.clone())).layer(handler);

    // The scheduler re-injects due requests into the deferring stack: the lock applies again.
    let scheduler = Scheduler::new(queue.clone(), deferring.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(250),
            ..SchedulerOptions::default()
        })
        .start();

    let arrivals = [
        ("alice", 0, Plan::Retry),
        ("bob", 30, Plan::FailFast),
        ("carol", 60, Plan::Retry),
        ("dave", 90, Plan::Defer),
        ("erin", 100, Plan::Defer),
    ];
    let mut calls = Vec::new();
    for (who, at, plan) in arrivals {
        let request = UpdateOrder {
            who: who.to_string(),
            order: 42,
        };
        let (fail_fast, retry, deferring) = (fail_fast.clone(), retry.clone(), deferring.clone());
        calls.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(at)).await;
            let how = match plan {
                Plan::FailFast => "fails fast",
                Plan::Retry => "retries with backoff",
                Plan::Defer => "defers",
            };
            log(format!("{who:<6} arrives ({how} if order:42 is locked)"));
            let result = match plan {
                Plan::FailFast => fail_fast.oneshot(request).await,
                Plan::Retry => retry.oneshot(request).await,
                Plan::Defer => deferring.oneshot(request).await,
            };
            log(format!("{who:<6} {}", describe(result)));
        }));
    }
    for call in calls {
        call.await?;
    }
    // Wait for the deferred requests to be handled.
    while queue.operator().stats().await? != Default::default() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = scheduler.shutdown().await;
    log(format!(
        "scheduler: {} handled, {} back in line (lock still held), {} failed attempts, {} buried",
        report.acked, report.waited, report.retried, report.buried
    ));
    Ok(())
}

fn describe(result: Result<Outcome<String>, Error<Infallible>>) -> String {
    match result {
        Ok(Outcome::Done(_)) => "succeeded".to_string(),
        Ok(Outcome::Duplicate(duplicate)) => format!("a duplicate of {}", duplicate.job_id),
        Ok(Outcome::Deferred(deferred)) => format!(
            "deferred as job {}, due in {} ms",
            &deferred.job_id.as_str()[..8],
            deferred
                .due
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
                .as_millis()
        ),
        // `Outcome` is `#[non_exhaustive]`: outcomes of later versions land here.
        Ok(other) => format!("not run here: {other:?}"),
        Err(Error::Locked { retry_after, .. }) => format!(
            "failed fast, order:42 is locked, retry after {}",
            retry_after.map_or("?".to_string(), |after| format!("{} ms", after.as_millis()))
        ),
        Err(error) => format!("failed: {error}"),
    }
}
