//! Overlapping sets of keys, all arriving at once: 300 sets of 1 to 4 of 8 keys, each holding
//! its keys for 10 ms of work. Deferred (`Defer`, run by two schedulers on one queue, as two
//! processes would) against the same sets from callers that wait in place (`Retry`). What it
//! measures is how busy the keys are kept while a backlog waits: the keys' held time (each
//! run holds its set for the work) over 8 keys × the time until the last set ran. A set's
//! keys can't be busier than the lines allow: the ideal is what the sets' order permits,
//! which neither mode can beat; the ratio between the two modes is the figure.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use redefer::lock_set::LockSetLayer;
use redefer::queue::DelayQueue;
use redefer::strategy::{Defer, Retry};
use redefer::{Backoff, Outcome, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, ms, percentile, spread};
use crate::support::RedisServer;

const KEYS: usize = 8;
const WORK: Duration = Duration::from_millis(10);

/// One request: the keys it holds together.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    keys: Vec<String>,
}

/// `count` sets of 1 to 4 distinct keys of `KEYS`, the same for a given `seed`.
fn sets(count: usize, seed: u64) -> Vec<Job> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let mut keys: Vec<String> = (0..KEYS).map(|n| format!("acct:{n}")).collect();
            keys.shuffle(&mut rng);
            keys.truncate(rng.random_range(1..=4));
            Job { keys }
        })
        .collect()
}

/// What one round measured.
struct Round {
    /// The keys' held time over `KEYS` × the time until the last set ran.
    busy: f64,
    /// From the arrival of every set to its run's end.
    p50: Duration,
    p99: Duration,
    /// How many times a deferred set was run by a scheduler and met a key taken (0 in place).
    waits: u64,
}

/// When each set ended, and the keys' held time, recorded by the handler.
#[derive(Default)]
struct Runs {
    ended: Vec<Duration>,
    held: Duration,
}

pub async fn run(server: &RedisServer, size: Size) {
    let rounds = size.pick(5, 1);
    let count = size.pick(300, 30);
    let (mut deferred, mut retrying) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let jobs = sets(count, round as u64);
        deferred.push(deferring(server, &jobs).await);
        retrying.push(waiting_in_place(server, &jobs).await);
    }
    let mut table = Table::new(
        &format!(
            "{count} sets of 1-4 of {KEYS} keys at once, {WORK:?} of work each; median [min-max] over {rounds} interleaved rounds"
        ),
        &[
            "the sets",
            "keys busy",
            "p50",
            "p99",
            "runs that met a key taken, per set",
        ],
    );
    let percent = |v: f64| format!("{:.0}%", v * 100.0);
    let as_ms = |s: f64| ms(Duration::from_secs_f64(s));
    for (label, rounds) in [
        ("deferred (Defer, two schedulers)", &deferred),
        ("waiting in place (Retry)", &retrying),
    ] {
        let busy: Vec<f64> = rounds.iter().map(|round| round.busy).collect();
        let p50: Vec<f64> = rounds.iter().map(|round| round.p50.as_secs_f64()).collect();
        let p99: Vec<f64> = rounds.iter().map(|round| round.p99.as_secs_f64()).collect();
        let waits: Vec<f64> = rounds
            .iter()
            .map(|round| round.waits as f64 / count as f64)
            .collect();
        table.row(vec![
            label.to_string(),
            spread(&busy, percent),
            spread(&p50, as_ms),
            spread(&p99, as_ms),
            spread(&waits, |w| format!("{w:.1}")),
        ]);
    }
    let ratio: Vec<f64> = deferred
        .iter()
        .zip(&retrying)
        .map(|(d, r)| d.busy / r.busy)
        .collect();
    table.row(vec![
        "deferred / in place, round by round".to_string(),
        spread(&ratio, |r| format!("{r:.2}x")),
        String::new(),
        String::new(),
        String::new(),
    ]);
    table.print();
}

/// The handler: the set's work, recorded.
fn worker(
    runs: &Arc<Mutex<Runs>>,
    started: Instant,
) -> impl tower::Service<Job, Response = (), Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static
{
    let runs = Arc::clone(runs);
    service_fn(move |job: Job| {
        let runs = Arc::clone(&runs);
        async move {
            tokio::time::sleep(WORK).await;
            let mut runs = runs.lock().expect("runs");
            runs.ended.push(started.elapsed());
            runs.held += WORK * job.keys.len() as u32;
            Ok(())
        }
    })
}

/// What the handler recorded, as a round.
fn round_of(runs: &Mutex<Runs>, count: usize) -> Round {
    let runs = runs.lock().expect("runs");
    assert_eq!(runs.ended.len(), count, "every set ran once");
    let mut ended = runs.ended.clone();
    let last = ended.iter().copied().max().unwrap_or_default();
    Round {
        busy: runs.held.as_secs_f64() / (KEYS as f64 * last.as_secs_f64()),
        p50: percentile(&mut ended, 0.5),
        p99: percentile(&mut ended, 0.99),
        waits: 0,
    }
}

/// Every job through `service` at once, each call in a task of its own.
fn all_at_once<S>(service: &S, jobs: &[Job]) -> Vec<tokio::task::JoinHandle<Result<S::Response, S::Error>>>
where
    S: tower::Service<Job, Future: Send> + Clone + Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    jobs.iter()
        .cloned()
        .map(|job| {
            let service = service.clone();
            tokio::spawn(async move { service.oneshot(job).await })
        })
        .collect()
}

/// Every set at once, deferred when it meets a key held; two schedulers run the waiting ones.
async fn deferring(server: &RedisServer, jobs: &[Job]) -> Round {
    let store = server.store().await;
    let queue = DelayQueue::<Job, _>::new(store.clone(), "sets").expect("a queue name");
    let runs = Arc::new(Mutex::new(Runs::default()));
    let started = Instant::now();
    let service = LockSetLayer::new(store.clone(), |job: &Job| Some(job.keys.clone()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(worker(&runs, started));
    let options = SchedulerOptions {
        concurrency: 64,
        ..SchedulerOptions::default()
    };
    let schedulers: Vec<_> = (0..2)
        .map(|_| {
            Scheduler::new(queue.clone(), service.clone())
                .options(options)
                .start()
        })
        .collect();
    let calls = all_at_once(&service, jobs);
    for call in calls {
        match call.await.expect("a call ends") {
            Ok(Outcome::Done(()) | Outcome::Deferred(_)) => {}
            other => panic!("a set ends done or deferred: {other:?}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while runs.lock().expect("runs").ended.len() < jobs.len() {
        assert!(Instant::now() < deadline, "every deferred set runs within 2 min");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut waits = 0;
    for scheduler in schedulers {
        waits += scheduler.shutdown().await.waited;
    }
    Round {
        waits,
        ..round_of(&runs, jobs.len())
    }
}

/// Every set at once from a caller that waits in its lines until served.
async fn waiting_in_place(server: &RedisServer, jobs: &[Job]) -> Round {
    let store = server.store().await;
    let runs = Arc::new(Mutex::new(Runs::default()));
    let started = Instant::now();
    let retry = Retry::new(Backoff::exponential(
        Duration::from_millis(5),
        Duration::from_millis(200),
    ))
    .max_attempts(u32::MAX)
    .max_wait(Duration::from_secs(120));
    let service = LockSetLayer::new(store, |job: &Job| Some(job.keys.clone()))
        .on_conflict(retry)
        .layer(worker(&runs, started));
    let calls = all_at_once(&service, jobs);
    for call in calls {
        let outcome = call.await.expect("a call ends");
        assert!(matches!(outcome, Ok(Outcome::Done(()))), "{outcome:?}");
    }
    round_of(&runs, jobs.len())
}
