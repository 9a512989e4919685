//! A hot key hit by concurrent requests, under the two waiting strategies of the lock layer.
//!
//! ```text
//! cargo run --example quickstart                            # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart   # on Redis
//! ```
//!
//! Prints a timeline: who held the lock (with its fencing token), who failed fast and with which
//! retry-after, who waited and then got the lock.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use redefer::store::LockStore;
use redefer::strategy::Retry;
use redefer::{Backoff, Error, LockLayer, MemoryStore, Outcome, RedisStore, current_lock};
use tower::{Layer, ServiceExt, service_fn};

/// A request to change one order.
#[derive(Debug, Clone)]
struct UpdateOrder {
    who: String,
    order: u64,
}

fn order_key(request: &UpdateOrder) -> Option<String> {
    Some(format!("order:{}", request.order))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("store: Redis at {url}");
            run(RedisStore::builder()
                .prefix("redefer-quickstart")?
                .connect(&url)
                .await?)
            .await;
        }
        Err(_) => {
            println!("store: in-process memory (set REDIS_URL to use Redis)");
            run(MemoryStore::new()).await;
        }
    }
    Ok(())
}

async fn run<S: LockStore>(store: S) {
    let start = Instant::now();
    let log = move |line: String| println!("{:>5} ms  {line}", start.elapsed().as_millis());

    // The handler: changing an order takes 120 ms, under the lock, with the fencing token that a
    // real handler would pass to the database so it can refuse writes from a stale holder.
    let handler = service_fn(move |request: UpdateOrder| async move {
        let lock = current_lock().expect("handlers run under the lock");
        log(format!(
            "{:<6} holds {} (fencing token {})",
            request.who, lock.key, lock.fence
        ));
        tokio::time::sleep(Duration::from_millis(120)).await;
        log(format!("{:<6} done, releasing", request.who));
        Ok::<_, Infallible>(request.who)
    });

    // One stack per strategy, over the same store: people clicking get an answer at once,
    // background updates wait their turn.
    let lock = LockLayer::new(store, order_key).ttl(Duration::from_secs(1));
    let fail_fast = lock.clone().layer(handler);
    let patient = lock
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(40),
                Duration::from_millis(160),
            ))
            .max_attempts(10)
            .max_wait(Duration::from_secs(2)),
        )
        .layer(handler);

    let arrivals = [
        ("alice", 0, true),
        ("bob", 30, false),
        ("carol", 60, true),
        ("dave", 90, false),
    ];
    let mut calls = Vec::new();
    for (who, at, waits) in arrivals {
        let request = UpdateOrder {
            who: who.to_string(),
            order: 42,
        };
        let (fail_fast, patient) = (fail_fast.clone(), patient.clone());
        calls.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(at)).await;
            log(format!(
                "{who:<6} arrives ({})",
                if waits {
                    "retries with backoff"
                } else {
                    "fails fast"
                }
            ));
            let result = if waits {
                patient.oneshot(request).await
            } else {
                fail_fast.oneshot(request).await
            };
            match result {
                Ok(Outcome::Done(who)) => log(format!("{who:<6} succeeded")),
                Ok(Outcome::Deferred(deferred)) => {
                    log(format!("{who:<6} deferred as job {}", deferred.job_id))
                }
                Err(Error::Locked { retry_after, .. }) => log(format!(
                    "{who:<6} failed fast: order:42 is locked, retry after {}",
                    retry_after.map_or("?".to_string(), |after| format!("{} ms", after.as_millis()))
                )),
                Err(error) => log(format!("{who:<6} failed: {error}")),
            }
        }));
    }
    for call in calls {
        call.await.expect("request task");
    }
}
