//! Property test of the handoff, against MemoryStore and a real Redis: generated arrivals of
//! deferring, retrying and fail-fast requests on a few keys, with generated hold times and
//! scheduler crashes. Mutual exclusion holds; every deferred request runs (exactly once
//! without a crash, at least once across crashes); a key's deferred requests run in arrival
//! order when no crash broke a reservation; no waiter starves.
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, QueueStore, RetryPolicy};
use redefer::strategy::{Defer, FailFast, Retry};
use redefer::{Backoff, LockLayer, MemoryStore, Outcome, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use support::RedisServer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Defer,
    Retry,
    FailFast,
}

/// One request: on which key, how it meets a held lock, how long after the previous request it
/// arrives (requests run concurrently), how long its handler holds the key.
#[derive(Debug, Clone)]
struct Arrival {
    key: usize,
    kind: Kind,
    gap_ms: u64,
    hold_ms: u64,
}

#[derive(Debug, Clone)]
struct Contention {
    arrivals: Vec<Arrival>,
    /// When the scheduler crashes (its task aborted mid-run) and another one starts.
    crash_after_ms: Option<u64>,
}

fn contention() -> impl Strategy<Value = Contention> {
    let kind = prop_oneof![3 => Just(Kind::Defer), 1 => Just(Kind::Retry), 1 => Just(Kind::FailFast)];
    let arrival = (0usize..3, kind, 0u64..10, 0u64..40).prop_map(|(key, kind, gap_ms, hold_ms)| Arrival {
        key,
        kind,
        gap_ms,
        hold_ms,
    });
    (
        proptest::collection::vec(arrival, 1..25),
        proptest::option::weighted(0.3, 0u64..150),
    )
        .prop_map(|(arrivals, crash_after_ms)| Contention {
            arrivals,
            crash_after_ms,
        })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    n: usize,
    key: usize,
    hold_ms: u64,
}

#[derive(Default)]
struct Ledger {
    /// Keys whose handler runs now.
    busy: HashSet<usize>,
    /// Every run: request n, in start order.
    runs: Vec<usize>,
    /// Per key, the deferred requests: n, when it was sent, when its deferral was reported.
    deferred: HashMap<usize, Vec<(usize, Instant, Instant)>>,
    violations: Vec<String>,
}

/// Marks a key free again when dropped.
struct Busy {
    ledger: Arc<Mutex<Ledger>>,
    key: usize,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .busy
            .remove(&self.key);
    }
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

async fn check<St: LockStore + QueueStore>(store: St, load: Contention) -> Result<(), String> {
    let queue = DelayQueue::<Request, _>::new(store.clone(), format!("contention-{}", rand::random::<u64>()))
        .unwrap()
        .retry_policy(RetryPolicy {
            backoff: Backoff::exponential(Duration::from_millis(5), Duration::from_millis(20)),
            ..RetryPolicy::default()
        });
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let prefix = format!("key-{}-", rand::random::<u32>());
    let handler = {
        let ledger = Arc::clone(&ledger);
        service_fn(move |request: Request| {
            let ledger = Arc::clone(&ledger);
            async move {
                {
                    let mut ledger = ledger.lock().unwrap();
                    if !ledger.busy.insert(request.key) {
                        ledger.violations.push(format!(
                            "request {} ran while key {} was busy",
                            request.n, request.key
                        ));
                    }
                    ledger.runs.push(request.n);
                }
                // The key is free again when the handler ends, or is dropped (a crash, a lost lock).
                let _busy = Busy {
                    ledger: Arc::clone(&ledger),
                    key: request.key,
                };
                tokio::time::sleep(Duration::from_millis(request.hold_ms)).await;
                Ok::<_, std::convert::Infallible>(())
            }
        })
    };
    let key_of = move |request: &Request| Some(format!("{prefix}{}", request.key));
    let layer = LockLayer::new(store.clone(), key_of.clone()).ttl(Duration::from_secs(5));
    let deferring = layer
        .clone()
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler.clone());
    let retrying = layer
        .clone()
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(50),
                Duration::from_millis(200),
            ))
            .max_wait(Duration::from_secs(5)),
        )
        .layer(handler.clone());
    let failing = layer.on_conflict(FailFast).layer(handler);

    let options = SchedulerOptions {
        lease: Duration::from_millis(300),
        max_idle: Duration::from_millis(100),
        shutdown_grace: Duration::from_secs(5),
        ..SchedulerOptions::default()
    };
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let start_scheduler = {
        let (queue, deferring) = (queue.clone(), deferring.clone());
        move |stop: tokio::sync::watch::Receiver<bool>| {
            let scheduler = Scheduler::new(queue.clone(), deferring.clone()).options(options);
            tokio::spawn(scheduler.run_until(async move {
                let mut stop = stop;
                let _ = stop.wait_for(|stop| *stop).await;
            }))
        }
    };
    let mut scheduler = start_scheduler(stop.clone());
    let crashed = load.crash_after_ms.is_some();
    let crash = load.crash_after_ms.map(|after| {
        let first = std::mem::replace(&mut scheduler, tokio::spawn(async { Default::default() }));
        let restart = start_scheduler.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            first.abort();
            // The new scheduler's task, in a tuple so that this task does not yield a future.
            (restart(stop),)
        })
    });

    // Each request is sent at its own time, concurrently with the others.
    let mut at = Duration::ZERO;
    let mut senders = Vec::new();
    for (n, arrival) in load.arrivals.iter().cloned().enumerate() {
        at += Duration::from_millis(arrival.gap_ms);
        let (deferring, retrying, failing, ledger) = (
            deferring.clone(),
            retrying.clone(),
            failing.clone(),
            Arc::clone(&ledger),
        );
        senders.push(tokio::spawn(async move {
            tokio::time::sleep(at).await;
            let request = Request {
                n,
                key: arrival.key,
                hold_ms: arrival.hold_ms,
            };
            let sent = Instant::now();
            let outcome = match arrival.kind {
                Kind::Defer => deferring.oneshot(request).await,
                Kind::Retry => retrying.oneshot(request).await,
                Kind::FailFast => failing.oneshot(request).await,
            };
            if let Ok(Outcome::Deferred(_)) = outcome {
                let reported = Instant::now();
                ledger
                    .lock()
                    .unwrap()
                    .deferred
                    .entry(arrival.key)
                    .or_default()
                    .push((n, sent, reported));
            }
        }));
    }
    for sender in senders {
        sender.await.map_err(|e| e.to_string())?;
    }
    if let Some(crash) = crash {
        scheduler = crash.await.map_err(|e| e.to_string())?.0;
    }

    let deferred: HashSet<usize> = ledger
        .lock()
        .unwrap()
        .deferred
        .values()
        .flatten()
        .map(|(n, _, _)| *n)
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ran: HashSet<usize> = ledger.lock().unwrap().runs.iter().copied().collect();
        if deferred.is_subset(&ran) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let starved: Vec<_> = deferred.difference(&ran).collect();
            return Err(format!(
                "deferred requests never ran (starved or lost): {starved:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    let _ = scheduler.await;

    let ledger = ledger.lock().unwrap();
    if !ledger.violations.is_empty() {
        return Err(ledger.violations.join("; "));
    }
    let mut runs_of: HashMap<usize, usize> = HashMap::new();
    for n in &ledger.runs {
        *runs_of.entry(*n).or_default() += 1;
    }
    if !crashed && let Some((n, runs)) = runs_of.iter().find(|(_, runs)| **runs > 1) {
        return Err(format!("request {n} ran {runs} times without a crash"));
    }
    if !crashed {
        // Two deferrals of one key whose calls did not overlap arrived in a known order: the
        // first reported before the second was sent. They must first run in that order.
        let first_run = |n: usize| ledger.runs.iter().position(|run| *run == n);
        for (key, deferrals) in &ledger.deferred {
            for (a, _, a_reported) in deferrals {
                for (b, b_sent, _) in deferrals {
                    if a_reported < b_sent && first_run(*a) > first_run(*b) {
                        return Err(format!(
                            "key {key}: request {a} arrived before {b} but ran after it"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn run<St: LockStore + QueueStore>(store: St, runtime: &tokio::runtime::Runtime, default_cases: u32) {
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases(default_cases)));
    runner
        .run(&contention(), |load| {
            runtime
                .block_on(check(store.clone(), load))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn contended_keys_go_to_their_waiters_in_order_in_memory() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    run(
        MemoryStore::new().with_reservation(Duration::from_millis(300)),
        &runtime,
        16,
    );
}

#[test]
fn contended_keys_go_to_their_waiters_in_order_on_redis() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(server.store())
        .with_reservation(Duration::from_millis(300));
    run(store, &runtime, 8);
}
