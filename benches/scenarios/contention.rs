//! Scenario 6: a hot key under a steady stream of requests while other keys get traffic too,
//! all through one service with 16 slots (tower's ConcurrencyLimit). Sleep-retry keeps the hot
//! key's waiters in their slots; defer hands them to the queue. The other keys feel the
//! difference: this is the seeds' argument, measured.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redefer::queue::QueueStats;
use redefer::queue::{DelayQueue, RetryPolicy};
use redefer::strategy::{ConflictStrategy, Defer, Retry};
use redefer::{Backoff, Error, LockLayer, Outcome, RedisStore, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::limit::ConcurrencyLimitLayer;
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, ms, per_s, percentile, rate};
use crate::support::RedisServer;

/// A request to change one order; order 0 is the hot one.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Change {
    order: u64,
}

const HOT_PERIOD: Duration = Duration::from_micros(2_500); // 400 requests/s on one key
const COLD_PERIOD: Duration = Duration::from_millis(1); // 1,000 requests/s over 1,000 keys
const WORK: Duration = Duration::from_millis(5); // so the hot key serves at most 200/s

#[derive(Default)]
struct Observed {
    cold: Vec<Duration>,
    hot_done: usize,
    hot_deferred: usize,
    hot_refused: usize,
}

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let load = size.seconds(3);
    let mut table = Table::new(
        &format!(
            "Contention: one hot key at 400 req/s, other keys at 1,000 req/s, {WORK:?} of work under the lock, 16 slots, {load:?}"
        ),
        &[
            "hot-key strategy",
            "other keys done",
            "other keys p50",
            "other keys p99",
            "hot: done at once",
            "hot: deferred",
            "hot: refused",
        ],
    );

    let retry = Retry::new(Backoff {
        initial: Duration::from_millis(5),
        factor: 2.0,
        cap: Duration::from_millis(50),
        jitter: 0.5,
    })
    .max_attempts(u32::MAX)
    .max_wait(Duration::from_secs(2));
    let observed = drive(&store, retry, load).await;
    table.row(cells("sleep-retry (up to 2 s)", &observed, load));

    let queue = DelayQueue::<Change, _>::new(store.clone(), "contention")
        .expect("queue")
        .retry_policy(RetryPolicy {
            backoff: Backoff::exponential(Duration::from_millis(50), Duration::from_secs(1)),
            max_attempts: 100,
            ..RetryPolicy::default()
        });
    let handler = service_fn(|_: Change| async {
        tokio::time::sleep(WORK).await;
        Ok::<_, std::convert::Infallible>(())
    });
    let locked = LockLayer::new(store.clone(), order_key)
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    let scheduler = Scheduler::new(queue.clone(), locked)
        .options(SchedulerOptions {
            concurrency: 4,
            ..SchedulerOptions::default()
        })
        .start();
    let observed = drive(&store, Defer::new(queue.clone()), load).await;
    table.row(cells("defer", &observed, load));
    // The deferred hot requests are handled afterwards, one at a time under the lock.
    let deadline = Instant::now() + Duration::from_secs(60);
    while queue.operator().stats().await.expect("stats") != QueueStats::default() && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = scheduler.shutdown().await;
    table.print();
    println!(
        "\nAfter the load, the scheduler handled {} deferred hot requests ({} re-deferrals while the key was busy, {} failed attempts, {} buried).",
        report.acked, report.waited, report.retried, report.buried
    );
}

fn order_key(change: &Change) -> Option<String> {
    Some(format!("order:{}", change.order))
}

fn cells(label: &str, observed: &Observed, load: Duration) -> Vec<String> {
    let mut cold = observed.cold.clone();
    vec![
        label.to_string(),
        per_s(rate(cold.len(), load)),
        ms(percentile(&mut cold, 0.5)),
        ms(percentile(&mut cold, 0.99)),
        observed.hot_done.to_string(),
        observed.hot_deferred.to_string(),
        observed.hot_refused.to_string(),
    ]
}

/// Open-loop load through a 16-slot service whose lock layer uses `strategy`.
async fn drive<C>(store: &RedisStore, strategy: C, load: Duration) -> Observed
where
    C: ConflictStrategy<Change> + Clone,
{
    let handler = service_fn(|_: Change| async {
        tokio::time::sleep(WORK).await;
        Ok::<_, std::convert::Infallible>(())
    });
    let service = ConcurrencyLimitLayer::new(16).layer(
        LockLayer::new(store.clone(), order_key)
            .on_conflict(strategy)
            .layer(handler),
    );
    let observed = Arc::new(Mutex::new(Observed::default()));
    let arrivals = |period: Duration, hot: bool| {
        let (service, observed) = (service.clone(), observed.clone());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let end = tokio::time::Instant::now() + load;
            let mut requests = Vec::new();
            let mut n = 0u64;
            while tokio::time::Instant::now() < end {
                ticks.tick().await;
                n += 1;
                let order = if hot { 0 } else { 1 + n % 1000 };
                let (mut service, observed) = (service.clone(), observed.clone());
                requests.push(tokio::spawn(async move {
                    let start = Instant::now();
                    let result = match service.ready().await {
                        Ok(ready) => ready.call(Change { order }).await,
                        Err(error) => Err(error),
                    };
                    let took = start.elapsed();
                    let mut observed = observed.lock().expect("observed");
                    match (hot, result) {
                        (false, Ok(_)) => observed.cold.push(took),
                        (true, Ok(Outcome::Done(()))) => observed.hot_done += 1,
                        (true, Ok(Outcome::Deferred(_))) => observed.hot_deferred += 1,
                        (true, Err(Error::Locked { .. })) => observed.hot_refused += 1,
                        (true, Ok(other)) => panic!("no request has an id here: {other:?}"),
                        (_, Err(error)) => panic!("unexpected failure: {error}"),
                    }
                }));
            }
            for request in requests {
                request.await.expect("request task");
            }
        })
    };
    let hot = arrivals(HOT_PERIOD, true);
    let cold = arrivals(COLD_PERIOD, false);
    hot.await.expect("hot arrivals");
    cold.await.expect("cold arrivals");
    Arc::try_unwrap(observed)
        .ok()
        .expect("all requests finished")
        .into_inner()
        .expect("observed")
}
