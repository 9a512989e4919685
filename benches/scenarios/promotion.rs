//! Scenario 4: promotion lag (start of handling minus due time) over jobs with spread due
//! times, with the producer in the same process and in another process.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use redefer::queue::DelayQueue;
use redefer::{LockLayer, RedisStore, Scheduler, SchedulerOptions, current_job};
use tokio::sync::Notify;
use tower::{Layer, service_fn};

use crate::Size;
use crate::report::{Table, ms, per_s, percentile, rate};
use crate::support::{RedisServer, store_at};

/// The first argument that makes the bench binary a producer process.
pub const PRODUCER_COMMAND: &str = "__produce";

/// How far ahead of its due time each job is pushed.
const LEAD: Duration = Duration::from_millis(20);

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let jobs = size.pick(10_000, 200);
    let spread = size.pick(Duration::from_secs(2), Duration::from_millis(200));
    let mut table = Table::new(
        &format!("Promotion lag: {jobs} jobs due over {spread:?}, each pushed {LEAD:?} before it is due"),
        &["producer", "p50", "p99", "max", "jobs/s"],
    );
    let same = measure(
        &store,
        "lag-same",
        jobs,
        produce(store.clone(), "lag-same".into(), jobs, spread),
    )
    .await;
    table.row(same.cells("same process"));
    let other = measure(
        &store,
        "lag-other",
        jobs,
        produce_elsewhere(server, &store, "lag-other", jobs, spread),
    )
    .await;
    table.row(other.cells("another process"));
    table.print();
}

/// Lag percentiles and throughput of one run.
pub struct Lags {
    lags: Vec<Duration>,
    jobs_per_s: f64,
}

impl Lags {
    /// p50, p99 and max, formatted.
    pub fn percentiles(&mut self) -> [String; 3] {
        [0.5, 0.99, 1.0].map(|q| ms(percentile(&mut self.lags, q)))
    }

    pub fn jobs_per_s(&self) -> String {
        per_s(self.jobs_per_s)
    }

    fn cells(mut self, label: &str) -> Vec<String> {
        let [p50, p99, max] = self.percentiles();
        vec![label.to_string(), p50, p99, max, self.jobs_per_s()]
    }
}

/// Runs a scheduler (64 slots) on `queue_name` while `producer` pushes `jobs` jobs, and records
/// each job's promotion lag, by the store's clock.
pub async fn measure(
    store: &RedisStore,
    queue_name: &str,
    jobs: usize,
    producer: impl Future<Output = ()>,
) -> Lags {
    let queue = DelayQueue::<u64, _>::new(store.clone(), queue_name).expect("queue");
    let lags = Arc::new(Mutex::new(Vec::with_capacity(jobs)));
    let all_done = Arc::new(Notify::new());
    let (record, done) = (lags.clone(), all_done.clone());
    let service = LockLayer::new(store.clone(), |_: &u64| None::<String>).layer(service_fn(move |_: u64| {
        let lag = current_job()
            .and_then(|job| SystemTime::now().duration_since(job.due).ok())
            .unwrap_or_default();
        let mut lags = record.lock().expect("lags");
        lags.push(lag);
        if lags.len() == jobs {
            done.notify_one();
        }
        async { Ok::<_, Infallible>(()) }
    }));
    let options = SchedulerOptions {
        concurrency: 64,
        batch: 64,
        ..SchedulerOptions::default()
    };
    let scheduler = Scheduler::new(queue, service).options(options).start();
    let start = Instant::now();
    producer.await;
    all_done.notified().await;
    let elapsed = start.elapsed();
    scheduler.shutdown().await;
    let lags = std::mem::take(&mut *lags.lock().expect("lags"));
    Lags {
        lags,
        jobs_per_s: rate(jobs, elapsed),
    }
}

/// Pushes `jobs` jobs at an even pace over `spread`, each due `LEAD` after its push.
pub async fn produce(store: RedisStore, queue_name: String, jobs: usize, spread: Duration) {
    let queue = DelayQueue::<u64, _>::new(store, queue_name).expect("queue");
    let start = tokio::time::Instant::now();
    for n in 0..jobs {
        tokio::time::sleep_until(start + spread.mul_f64(n as f64 / jobs as f64)).await;
        queue.push(&(n as u64), LEAD).await.expect("push");
    }
}

/// The same producer in a process of its own: the bench binary, re-executed.
async fn produce_elsewhere(
    server: &RedisServer,
    store: &RedisStore,
    queue_name: &str,
    jobs: usize,
    spread: Duration,
) {
    let status = tokio::process::Command::new(std::env::current_exe().expect("bench binary"))
        .arg(PRODUCER_COMMAND)
        .arg(server.url())
        .arg(store.prefix().as_str())
        .arg(queue_name)
        .arg(jobs.to_string())
        .arg(spread.as_millis().to_string())
        .status()
        .await
        .expect("start the producer process");
    assert!(status.success(), "producer process failed");
}

/// The producer process: `__produce <url> <prefix> <queue> <jobs> <spread ms>`.
pub fn run_producer(args: &[String]) {
    let [url, prefix, queue, jobs, spread_ms] = args else {
        panic!("usage: {PRODUCER_COMMAND} <url> <prefix> <queue> <jobs> <spread ms>");
    };
    let jobs: usize = jobs.parse().expect("jobs");
    let spread = Duration::from_millis(spread_ms.parse().expect("spread ms"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = store_at(url, prefix).await;
        produce(store, queue.clone(), jobs, spread).await;
    });
}
