//! Two-key transfers over 1,000 accounts, one tenth of them on 10 hot accounts (where they
//! collide): one set of two keys (`LockSetLayer`, taken in one step, waiting in both lines at
//! once) against the same work under two single-key locks taken in sorted order (the outer
//! lock held while the inner one is waited for). Closed loop, 32 transfers at once, 1 ms of
//! work; rounds interleaved, each figure the median and range of the rounds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;
use redefer::lock_set::LockSetLayer;
use redefer::strategy::Retry;
use redefer::{Backoff, LockLayer, RedisStore};
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, median, ms, per_s, percentile, rate, spread};
use crate::support::RedisServer;

const ACCOUNTS: u64 = 1_000;
const HOT: u64 = 10;
const WORK: Duration = Duration::from_millis(1);
const AT_ONCE: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Transfer {
    from: u64,
    to: u64,
}

impl Transfer {
    /// Two distinct accounts: from the hot ten one time in ten, else from the rest.
    fn random() -> Self {
        let mut rng = rand::rng();
        let (low, high) = if rng.random_ratio(1, 10) {
            (0, HOT)
        } else {
            (HOT, ACCOUNTS)
        };
        let from = rng.random_range(low..high);
        let mut to = rng.random_range(low..high - 1);
        if to >= from {
            to += 1;
        }
        Transfer { from, to }
    }

    fn keys(&self) -> [String; 2] {
        [account(self.from), account(self.to)]
    }
}

fn account(n: u64) -> String {
    format!("account:{n:04}")
}

fn retry() -> Retry {
    Retry::new(Backoff::exponential(
        Duration::from_millis(1),
        Duration::from_millis(20),
    ))
    .max_attempts(u32::MAX)
    .max_wait(Duration::from_secs(30))
}

/// What one round measured.
struct Round {
    rate: f64,
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    let load = size.seconds(2);
    let (mut sets, mut sorted) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        sets.push(drive(set_service(&store), load).await);
        sorted.push(drive(sorted_service(&store), load).await);
    }
    let mut table = Table::new(
        &format!(
            "Two-key transfers: {ACCOUNTS} accounts, 1 in 10 on {HOT} hot ones, {AT_ONCE} at once, {WORK:?} of work, {rounds} interleaved rounds of {load:?}"
        ),
        &["how the two keys are taken", "transfers", "p50", "p90", "p99"],
    );
    for (label, rounds) in [
        ("one set (LockSetLayer)", &sets),
        ("two locks in sorted order", &sorted),
    ] {
        let rates: Vec<f64> = rounds.iter().map(|round| round.rate).collect();
        let p50: Vec<f64> = rounds.iter().map(|round| round.p50.as_secs_f64()).collect();
        let p90: Vec<f64> = rounds.iter().map(|round| round.p90.as_secs_f64()).collect();
        let p99: Vec<f64> = rounds.iter().map(|round| round.p99.as_secs_f64()).collect();
        let as_ms = |s: f64| ms(Duration::from_secs_f64(s));
        table.row(vec![
            label.to_string(),
            spread(&rates, per_s),
            spread(&p50, as_ms),
            spread(&p90, as_ms),
            spread(&p99, as_ms),
        ]);
    }
    let ratio = |of: fn(&Round) -> f64| -> Vec<f64> {
        sets.iter()
            .zip(&sorted)
            .map(|(set, two)| of(set) / of(two))
            .collect()
    };
    let times = |r: f64| format!("{r:.2}x");
    table.row(vec![
        "set / sorted, round by round".to_string(),
        spread(&ratio(|round| round.rate), times),
        spread(&ratio(|round| round.p50.as_secs_f64()), times),
        spread(&ratio(|round| round.p90.as_secs_f64()), times),
        spread(&ratio(|round| round.p99.as_secs_f64()), times),
    ]);
    table.print();
    println!(
        "\nMedian throughput ratio set / sorted: {:.2}x.",
        median(&ratio(|round| round.rate))
    );
}

fn handler()
-> impl Service<Transfer, Response = (), Error = std::convert::Infallible, Future: Send> + Clone + Send {
    service_fn(|_: Transfer| async {
        tokio::time::sleep(WORK).await;
        Ok(())
    })
}

fn set_service(
    store: &RedisStore,
) -> impl Service<Transfer, Response: Send, Error: std::fmt::Debug + Send, Future: Send> + Clone + Send + 'static
{
    LockSetLayer::new(store.clone(), |t: &Transfer| Some(t.keys().to_vec()))
        .on_conflict(retry())
        .layer(handler())
}

fn sorted_service(
    store: &RedisStore,
) -> impl Service<Transfer, Response: Send, Error: std::fmt::Debug + Send, Future: Send> + Clone + Send + 'static
{
    let first = |t: &Transfer| Some(account(t.from.min(t.to)));
    let second = |t: &Transfer| Some(account(t.from.max(t.to)));
    let inner = LockLayer::new(store.clone(), second)
        .on_conflict(retry())
        .layer(handler());
    LockLayer::new(store.clone(), first)
        .on_conflict(retry())
        .layer(inner)
}

/// `AT_ONCE` loops of transfers through `service` for `load`.
async fn drive<S>(service: S, load: Duration) -> Round
where
    S: Service<Transfer, Response: Send, Error: std::fmt::Debug + Send, Future: Send>
        + Clone
        + Send
        + 'static,
{
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + load;
    let loops: Vec<_> = (0..AT_ONCE)
        .map(|_| {
            let (service, latencies) = (service.clone(), Arc::clone(&latencies));
            tokio::spawn(async move {
                let mut mine = Vec::new();
                while Instant::now() < end {
                    let started = Instant::now();
                    service
                        .clone()
                        .oneshot(Transfer::random())
                        .await
                        .expect("a transfer ends");
                    mine.push(started.elapsed());
                }
                latencies.lock().expect("latencies").extend(mine);
            })
        })
        .collect();
    let started = Instant::now();
    for one in loops {
        one.await.expect("a loop ends");
    }
    let elapsed = started.elapsed();
    let mut latencies = latencies.lock().expect("latencies").clone();
    Round {
        rate: rate(latencies.len(), elapsed),
        p50: percentile(&mut latencies, 0.5),
        p90: percentile(&mut latencies, 0.9),
        p99: percentile(&mut latencies, 0.99),
    }
}
