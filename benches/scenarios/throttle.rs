//! Scenario: the throttle. Its check within the rate against a bare GCRA script (one
//! `EVALSHA` each), and a hot throttled key worked through `Defer` (booked slots) against the
//! same key worked by clients that fail fast and try again after `retry_after`: jobs completed
//! per second and Redis commands per completed job. Interleaved rounds, ratios per round.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redefer::queue::DelayQueue;
use redefer::strategy::Defer;
use redefer::throttle::{Rate, ThrottleLayer};
use redefer::{Error, Outcome, RedisStore, Scheduler, SchedulerOptions};
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::lock::{Keys, uncontended_rate};
use crate::report::{Table, median, rate, spread};
use crate::support::RedisServer;

const BARE_GCRA: &str = include_str!("bare_gcra.lua");

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    check(&store, size).await;
    hot_key(server, &store, size).await;
}

/// Requests within the rate: ThrottleService with a no-op handler against the bare script.
async fn check(store: &RedisStore, size: Size) {
    let rounds = size.pick(5, 1);
    let mut table = Table::new(
        &format!(
            "Throttle check, within the rate: requests/s through ThrottleService with a no-op handler, against a bare GCRA script; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "concurrency",
            "ThrottleService",
            "bare GCRA (one EVALSHA)",
            "throttle / bare",
        ],
    );
    for concurrency in [1usize, 64] {
        let requests = size.pick(if concurrency == 1 { 5_000 } else { 30_000 }, 640);
        let (mut layer, mut bare) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            layer.push(layer_rate(store, concurrency, requests, round).await);
            bare.push(bare_rate(store, concurrency, requests, round).await);
        }
        let ratios: Vec<f64> = layer.iter().zip(&bare).map(|(l, b)| l / b).collect();
        table.row(vec![
            concurrency.to_string(),
            spread(&layer, |v| format!("{v:.0}/s")),
            spread(&bare, |v| format!("{v:.0}/s")),
            spread(&ratios, |v| format!("{v:.2}x")),
        ]);
    }
    table.print();
}

/// A rate no request of the run reaches: every check admits.
fn unreached() -> Rate {
    Rate::per_second(1_000_000)
        .expect("a rate")
        .burst(1_000)
        .expect("a burst")
}

async fn layer_rate(store: &RedisStore, concurrency: usize, requests: usize, round: usize) -> f64 {
    let service = ThrottleLayer::new(
        store.clone(),
        move |task: &usize| Some(format!("check:{round}:{task}")),
        unreached(),
    )
    .layer(service_fn(|_: usize| async { Ok::<_, Infallible>(()) }));
    uncontended_rate(service, concurrency, requests, Keys::OnePerTask).await
}

async fn bare_rate(store: &RedisStore, concurrency: usize, requests: usize, round: usize) -> f64 {
    let script = redis::Script::new(BARE_GCRA);
    let rate_of = unreached();
    let (interval, tolerance) = (
        rate_of.interval().as_micros() as u64,
        rate_of.tolerance().as_micros() as u64,
    );
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let mut conn = store.connection();
            let script = script.clone();
            let key = format!("bare-gcra:{{{round}:{task}}}");
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let wait: i64 = script
                        .key(&key)
                        .arg(interval)
                        .arg(tolerance)
                        .invoke_async(&mut conn)
                        .await
                        .expect("bare GCRA");
                    assert_eq!(wait, 0, "within the rate");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}

/// One hot key: `jobs` requests arrive at once at a key of 200/s. `Defer` books each a slot
/// and a scheduler runs it there; the fail-and-retry clients sleep `retry_after` after each
/// refusal and try again (the best a client can do without booking).
async fn hot_key(server: &RedisServer, store: &RedisStore, size: Size) {
    let rounds = size.pick(5, 1);
    let jobs = size.pick(300, 40);
    let rate = Rate::per_second(200).expect("a rate");
    let mut table = Table::new(
        &format!(
            "A hot throttled key ({jobs} requests at once, 200/s): jobs completed per second and Redis commands per completed job (INFO total_commands_processed: script calls and the commands they run); median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "worked by",
            "jobs completed/s",
            "commands per job",
            "attempts per job",
        ],
    );
    let (mut deferred, mut retried) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        deferred.push(measure(server, || defer_round(store, rate, jobs, round)).await);
        retried.push(measure(server, || retry_round(store, rate, jobs, round)).await);
    }
    for (name, results) in [
        ("Defer (booked slots, a scheduler)", &deferred),
        (
            "FailFast, the client sleeps retry_after and tries again",
            &retried,
        ),
    ] {
        let per_s: Vec<f64> = results
            .iter()
            .map(|r| r.jobs as f64 / r.elapsed.as_secs_f64())
            .collect();
        let commands: Vec<f64> = results.iter().map(|r| r.commands / r.jobs as f64).collect();
        let attempts: Vec<f64> = results
            .iter()
            .map(|r| r.attempts as f64 / r.jobs as f64)
            .collect();
        table.row(vec![
            name.to_string(),
            spread(&per_s, |v| format!("{v:.0}/s")),
            spread(&commands, |v| format!("{v:.1}")),
            spread(&attempts, |v| format!("{v:.2}")),
        ]);
    }
    let ratio = |pick: fn(&Round) -> f64| {
        let values: Vec<f64> = retried
            .iter()
            .zip(&deferred)
            .map(|(r, d)| pick(r) / pick(d))
            .collect();
        median(&values)
    };
    table.row(vec![
        "fail-and-retry / Defer (median of the rounds' ratios)".to_string(),
        format!("{:.2}x", 1.0 / ratio(|r| r.elapsed.as_secs_f64() / r.jobs as f64)),
        format!("{:.1}x", ratio(|r| r.commands / r.jobs as f64)),
        format!("{:.1}x", ratio(|r| r.attempts as f64 / r.jobs as f64)),
    ]);
    table.print();
}

/// What one round of the hot key did.
struct Round {
    jobs: usize,
    elapsed: Duration,
    /// Commands the server processed meanwhile.
    commands: f64,
    /// Requests sent through the throttle (first tries and retries).
    attempts: usize,
}

async fn measure<F, Fut>(server: &RedisServer, round: F) -> Round
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = (usize, Duration, usize)>,
{
    let before = commands_processed(server).await;
    let (jobs, elapsed, attempts) = round().await;
    let commands = commands_processed(server).await - before - 1.0; // this INFO itself
    Round {
        jobs,
        elapsed,
        commands,
        attempts,
    }
}

async fn commands_processed(server: &RedisServer) -> f64 {
    let info: String = server.cmd(redis::cmd("INFO").arg("stats")).await;
    info.lines()
        .find_map(|line| line.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has total_commands_processed")
}

async fn defer_round(store: &RedisStore, rate: Rate, jobs: usize, round: usize) -> (usize, Duration, usize) {
    let queue = DelayQueue::<usize, _>::new(store.clone(), format!("hot-{round}")).expect("a queue name");
    let done = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (done, all_done) = (Arc::clone(&done), Arc::clone(&all_done));
        service_fn(move |_: usize| {
            let (done, all_done) = (Arc::clone(&done), Arc::clone(&all_done));
            async move {
                if done.fetch_add(1, Ordering::Relaxed) + 1 == jobs {
                    all_done.notify_one();
                }
                Ok::<_, Infallible>(())
            }
        })
    };
    let throttled = ThrottleLayer::new(
        store.clone(),
        move |_: &usize| Some(format!("hot:defer:{round}")),
        rate,
    )
    .on_conflict(Defer::new(queue.clone()))
    .layer(handler);
    // Counted at the throttle's door: the requests and the re-injected jobs alike.
    let counted = Arc::clone(&attempts);
    let service = tower::util::MapRequest::new(throttled, move |n: usize| {
        counted.fetch_add(1, Ordering::Relaxed);
        n
    });
    let scheduler = Scheduler::new(queue, service.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(100),
            ..SchedulerOptions::default()
        })
        .start();
    let start = Instant::now();
    let finished = all_done.notified();
    let sends: Vec<_> = (0..jobs)
        .map(|n| tokio::spawn(service.clone().oneshot(n)))
        .collect();
    for send in sends {
        match send.await.expect("send task") {
            Ok(Outcome::Done(())) | Ok(Outcome::Deferred(_)) => {}
            Ok(other) => panic!("no request has an id here: {other:?}"),
            Err(error) => panic!("a hot-key request failed: {error}"),
        }
    }
    finished.await;
    let elapsed = start.elapsed();
    scheduler.shutdown().await;
    (jobs, elapsed, attempts.load(Ordering::Relaxed))
}

async fn retry_round(store: &RedisStore, rate: Rate, jobs: usize, round: usize) -> (usize, Duration, usize) {
    let attempts = Arc::new(AtomicUsize::new(0));
    let service = ThrottleLayer::new(
        store.clone(),
        move |_: &usize| Some(format!("hot:retry:{round}")),
        rate,
    )
    .layer(service_fn(|_: usize| async { Ok::<_, Infallible>(()) }));
    let start = Instant::now();
    let clients: Vec<_> = (0..jobs)
        .map(|n| {
            let (service, attempts) = (service.clone(), Arc::clone(&attempts));
            tokio::spawn(async move {
                loop {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    match service.clone().oneshot(n).await {
                        Ok(_) => return,
                        Err(Error::Throttled { retry_after, .. }) => tokio::time::sleep(retry_after).await,
                        Err(error) => panic!("a hot-key request failed: {error}"),
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client task");
    }
    (jobs, start.elapsed(), attempts.load(Ordering::Relaxed))
}
