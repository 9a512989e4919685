//! A hot key freed by its TTL (issue 76): six producers defer through the lock layer for 2 s
//! behind one key that another client takes by the seeds' protocol (`SET key value NX PX 120`
//! every 150 ms) and lets expire, as a holder that dies does, or overwrites (`SET` without
//! `NX`, which leaves our holders about 30 ms of every 150: fewer are deferred there); one
//! scheduler drains through the same stack. A key freed by its TTL hands no turn to anyone: what it measures is how soon
//! the waiting jobs learn of it. The figures: the drain (from the producers' end until every
//! reported deferral ran), the jobs handled per second of it, and how often a job went back to
//! its queue (the scheduler's `waited`) per deferral. The pair of `deferred_sets`, which
//! measures how busy the keys are kept when every turn is handed over by a release.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redefer::queue::DelayQueue;
use redefer::strategy::Defer;
use redefer::{LockLayer, Outcome, Scheduler};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, spread};
use crate::support::RedisServer;

const PRODUCERS: u64 = 6;
/// Each producer's pause between its calls, with the key taken politely and overwritten.
const PAUSE: Duration = Duration::from_millis(10);
const PAUSE_OVERWRITTEN: Duration = Duration::from_millis(60);
const WORK: Duration = Duration::from_millis(1);
const FOREIGN_TTL_MS: u64 = 120;
const FOREIGN_EVERY: Duration = Duration::from_millis(150);

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Debit {
    id: u64,
}

/// What one round measured.
struct Round {
    deferred: usize,
    drain: Duration,
    waits: u64,
}

pub async fn run(server: &RedisServer, size: Size) {
    let rounds = size.pick(5, 1);
    let producing = size.seconds(2);
    let (mut polite, mut overwritten) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        polite.push(round(server, producing, false).await);
        overwritten.push(round(server, producing, true).await);
    }
    let mut table = Table::new(
        &format!(
            "{PRODUCERS} producers deferring for {producing:?} behind a key another client takes (PX {FOREIGN_TTL_MS} every {FOREIGN_EVERY:?}); median [min-max] over {rounds} interleaved rounds"
        ),
        &[
            "the other client",
            "deferred",
            "drain",
            "handled per s of drain",
            "back to the queue per job",
        ],
    );
    for (label, measured) in [("NX, lets it expire", &polite), ("overwrites it", &overwritten)] {
        let deferred: Vec<f64> = measured.iter().map(|round| round.deferred as f64).collect();
        let drain: Vec<f64> = measured.iter().map(|round| round.drain.as_secs_f64()).collect();
        let rate: Vec<f64> = measured
            .iter()
            .map(|round| round.deferred as f64 / round.drain.as_secs_f64().max(0.001))
            .collect();
        let waits: Vec<f64> = measured
            .iter()
            .map(|round| round.waits as f64 / round.deferred.max(1) as f64)
            .collect();
        table.row(vec![
            label.to_string(),
            spread(&deferred, |d| format!("{d:.0}")),
            spread(&drain, |s| format!("{s:.2} s")),
            spread(&rate, |r| format!("{r:.0}")),
            spread(&waits, |w| format!("{w:.2}")),
        ]);
    }
    table.print();
}

/// One round: the other client overwriting the key, or taking it only when free.
async fn round(server: &RedisServer, producing: Duration, overwrite: bool) -> Round {
    let store = server.store().await;
    let lock_key = format!("{}:lock:{{hot}}", store.prefix().as_str());
    let queue = DelayQueue::<Debit, _>::new(store.clone(), "debits").expect("a queue name");
    let handled = Arc::new(Mutex::new(HashSet::new()));
    let handler = service_fn({
        let handled = Arc::clone(&handled);
        move |debit: Debit| {
            let handled = Arc::clone(&handled);
            async move {
                tokio::time::sleep(WORK).await;
                handled.lock().expect("handled").insert(debit.id);
                Ok::<_, std::convert::Infallible>(())
            }
        }
    });
    let service = LockLayer::new(store.clone(), |_: &Debit| Some("hot".to_owned()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    let scheduler = Scheduler::new(queue, service.clone()).start();

    let stop = Arc::new(AtomicBool::new(false));
    let other_client = tokio::spawn({
        let (stop, url) = (Arc::clone(&stop), server.url());
        async move {
            let client = redis::Client::open(url).expect("a URL");
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .expect("a connection");
            let mut ticks = tokio::time::interval(FOREIGN_EVERY);
            while !stop.load(Ordering::SeqCst) {
                ticks.tick().await;
                let mut set = redis::cmd("SET");
                set.arg(&lock_key)
                    .arg("another-client")
                    .arg("PX")
                    .arg(FOREIGN_TTL_MS);
                if !overwrite {
                    set.arg("NX");
                }
                let _: Result<Option<String>, _> = set.query_async(&mut connection).await;
            }
        }
    });
    let deferred = Arc::new(Mutex::new(HashSet::new()));
    let pause = if overwrite { PAUSE_OVERWRITTEN } else { PAUSE };
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let (service, deferred) = (service.clone(), Arc::clone(&deferred));
            tokio::spawn(async move {
                let started = Instant::now();
                let mut id = producer << 32;
                while started.elapsed() < producing {
                    id += 1;
                    if let Ok(Outcome::Deferred(_)) = service.clone().oneshot(Debit { id }).await {
                        deferred.lock().expect("deferred").insert(id);
                    }
                    tokio::time::sleep(pause).await;
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("a producer ends");
    }
    let deferred = deferred.lock().expect("deferred").clone();
    let produced = Instant::now();
    let deadline = produced + Duration::from_secs(120);
    while !deferred.is_subset(&handled.lock().expect("handled")) {
        assert!(Instant::now() < deadline, "every deferral runs within 2 min");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = produced.elapsed();
    stop.store(true, Ordering::SeqCst);
    other_client.await.expect("the other client ends");
    let waits = scheduler.shutdown().await.waited;
    Round {
        deferred: deferred.len(),
        drain,
        waits,
    }
}
