//! Scenario 1: the lock layer, uncontended, fencing on and off, against a bare redis-rs loop
//! issuing `SET NX PX` and a token-checked release, and the same layer with 4 permits per key
//! (the semaphore) against the mutex: interleaved rounds, ratios per round.

use std::convert::Infallible;
use std::time::Instant;

use redefer::lock::LockStore;
use redefer::semaphore::Permits;
use redefer::{Fencing, LockKey, LockLayer, LockToken, Outcome, RedisStore};
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::Size;
use crate::chart::Chart;
use crate::report::{Table, rate, spread};
use crate::support::RedisServer;

const RELEASE: &str = include_str!("bare_release.lua");

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    let mut table = Table::new(
        &format!(
            "Lock layer, uncontended: requests/s through LockService with a no-op handler; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "concurrency",
            "LockService, fencing on",
            "LockService, fencing off",
            "LockService, 4 permits per key (semaphore)",
            "bare redis-rs loop (SET NX PX, EVALSHA release)",
            "fencing on / bare",
            "fencing off / bare",
            "semaphore / mutex (fencing on)",
        ],
    );
    let mut chart = Chart::new("Lock layer, uncontended, no-op handler", "requests/s");
    for concurrency in [1usize, 64] {
        let requests = size.pick(if concurrency == 1 { 5_000 } else { 30_000 }, 640);
        let (mut on, mut off, mut semaphore, mut bare) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            on.push(layer_rate(store.clone(), Fencing::On, concurrency, requests).await);
            off.push(layer_rate(store.clone(), Fencing::Off, concurrency, requests).await);
            semaphore
                .push(layer_rate(Permits::new(store.clone(), 4), Fencing::On, concurrency, requests).await);
            bare.push(bare_rate(&store, concurrency, requests).await);
        }
        chart.group(&format!("concurrency {concurrency}"));
        chart.bar("LockService, fencing on", &on);
        chart.bar("LockService, fencing off", &off);
        chart.bar("LockService, 4 permits per key", &semaphore);
        chart.bar("bare loop (SET NX PX, EVALSHA release)", &bare);
        let semaphore_ratios: Vec<f64> = semaphore.iter().zip(&on).map(|(s, m)| s / m).collect();
        let ratios = |layer: &[f64]| -> Vec<f64> { layer.iter().zip(&bare).map(|(l, b)| l / b).collect() };
        let per_s = |v: f64| format!("{v:.0}/s");
        let times = |v: f64| format!("{v:.2}x");
        table.row(vec![
            concurrency.to_string(),
            spread(&on, per_s),
            spread(&off, per_s),
            spread(&semaphore, per_s),
            spread(&bare, per_s),
            spread(&ratios(&on), times),
            spread(&ratios(&off), times),
            spread(&semaphore_ratios, times),
        ]);
    }
    table.print();
    chart.write("lock", server, size);
}

/// Each of `concurrency` tasks locks a key of its own, `requests / concurrency` times.
pub async fn layer_rate<St: LockStore>(
    store: St,
    fencing: Fencing,
    concurrency: usize,
    requests: usize,
) -> f64 {
    let service = LockLayer::new(store, |task: &usize| Some(format!("bench:{task}")))
        .fencing(fencing)
        .layer(service_fn(|_: usize| async { Ok::<_, Infallible>(()) }));
    uncontended_rate(service, concurrency, requests).await
}

/// Requests per second through a guard's `service` when each of `concurrency` tasks sends its
/// own task number (a key of its own), `requests / concurrency` times: every one must be done,
/// none deferred.
pub async fn uncontended_rate<S>(service: S, concurrency: usize, requests: usize) -> f64
where
    S: Service<usize, Response = Outcome<()>> + Clone + Send + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let service = service.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let outcome = service.clone().oneshot(task).await.expect("uncontended");
                    assert!(outcome.done().is_some(), "uncontended: never deferred");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}

/// The same two round trips with no middleware: `SET key token NX PX`, then the release script.
pub async fn bare_rate(store: &RedisStore, concurrency: usize, requests: usize) -> f64 {
    let release = redis::Script::new(RELEASE);
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let mut conn = store.connection();
            let key = store.lock_redis_key(&LockKey::new(format!("bare:{task}")).expect("valid key"));
            let release = release.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let token = LockToken::random();
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(token)
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async(&mut conn)
                        .await
                        .expect("SET");
                    assert!(set.is_some(), "uncontended");
                    let released: i64 = release
                        .key(&key)
                        .arg(token)
                        .invoke_async(&mut conn)
                        .await
                        .expect("release");
                    assert_eq!(released, 1);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}
