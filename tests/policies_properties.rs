//! Property test of a key's line with every policy for what waits mixed, against MemoryStore,
//! Redis and Valkey: generated requests on one or two held keys, each deferred plainly, with a
//! line cap (refusing the newest or dropping the oldest), coalesced (keeping the latest or the
//! first) or after waiting in place (then coalesced). Once the keys are released and the
//! scheduler drains the queue: no request is both run and reported superseded, none runs
//! twice, and every request is run, superseded (its payload replaced by a newer one in its job,
//! or told so), refused, a duplicate, or dead with the reason, and its caller was told which.
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

use crate::support;

use crate::support::Shorthand;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use redefer::guard::{LineCap, SUPERSEDED_BY_NEWER};
use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, JobSet, PendingStore};
use redefer::strategy::{Coalesce, Defer, Retry, Switch};
use redefer::{
    Backoff, Deferred, Error, LockKey, LockLayer, LockToken, MemoryStore, Outcome, Scheduler,
    SchedulerOptions,
};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisServer, Server};

const MS: Duration = Duration::from_millis(1);

/// How a request waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Policy {
    Defer,
    CapRefusingNewest,
    CapDroppingOldest,
    Latest,
    First,
    /// Waits in place a little, then coalesces (keeping the latest by arrival).
    PatientLatest,
}

const POLICIES: [Policy; 6] = [
    Policy::Defer,
    Policy::CapRefusingNewest,
    Policy::CapDroppingOldest,
    Policy::Latest,
    Policy::First,
    Policy::PatientLatest,
];

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    n: usize,
    key: usize,
    policy: Policy,
}

#[derive(Debug, Clone)]
struct Load {
    cap: u64,
    /// Each request: its key (0 or 1), its policy, the pause before it in ms.
    requests: Vec<(usize, Policy, u64)>,
}

fn load() -> impl Strategy<Value = Load> {
    let request = (0usize..2, proptest::sample::select(POLICIES.to_vec()), 0u64..4);
    (1u64..4, proptest::collection::vec(request, 1..24)).prop_map(|(cap, requests)| Load { cap, requests })
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// What a caller was told.
#[derive(Debug, Clone)]
enum Told {
    Deferred(Deferred),
    Refused,
    Superseded(redefer::queue::JobId),
}

async fn check<St: PendingStore + LockStore>(store: St, load: Load) -> Result<(), String> {
    let run_id = rand::random::<u64>();
    let queue = DelayQueue::<Request, _>::new(store.clone(), format!("mixed-{run_id}")).unwrap();
    let cap = LineCap::new(load.cap);
    let policy = |wanted: Policy| move |request: &Request| request.policy == wanted;
    let patient = Retry::new(Backoff::exponential(5 * MS, 10 * MS))
        .max_attempts(u32::MAX)
        .max_wait(30 * MS)
        .then(Coalesce::latest(queue.clone()));
    let strategy = Switch::when(policy(Policy::Defer), Defer::new(queue.clone())).otherwise(
        Switch::when(
            policy(Policy::CapRefusingNewest),
            Defer::new(queue.clone()).max_waiting(cap),
        )
        .otherwise(
            Switch::when(
                policy(Policy::CapDroppingOldest),
                Defer::new(queue.clone()).max_waiting(cap.drop_oldest()),
            )
            .otherwise(
                Switch::when(policy(Policy::Latest), Coalesce::latest(queue.clone())).otherwise(
                    Switch::when(policy(Policy::First), Coalesce::first(queue.clone())).otherwise(patient),
                ),
            ),
        ),
    );
    let ran: Arc<Mutex<Vec<usize>>> = Arc::default();
    let service = {
        let ran = Arc::clone(&ran);
        LockLayer::new(store.clone(), move |request: &Request| {
            Some(format!("k{run_id}:{}", request.key))
        })
        .on_conflict(strategy)
        .layer(service_fn(move |request: Request| {
            ran.lock().unwrap().push(request.n);
            async { Ok::<_, std::convert::Infallible>(()) }
        }))
    };
    // Both keys held by someone else while the requests arrive.
    let keys: Vec<LockKey> = (0..2)
        .map(|key| LockKey::new(format!("k{run_id}:{key}")).unwrap())
        .collect();
    let holders: Vec<LockToken> = (0..2).map(|_| LockToken::random()).collect();
    for (key, holder) in keys.iter().zip(&holders) {
        store
            .try_acquire(key, *holder, Duration::from_secs(60))
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut calls = Vec::new();
    for (n, (key, policy, pause)) in load.requests.iter().copied().enumerate() {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let call = service.clone().oneshot(Request { n, key, policy });
        calls.push(tokio::spawn(call));
    }
    let mut told = BTreeMap::new();
    for (n, call) in calls.into_iter().enumerate() {
        let answer = match call.await.map_err(|e| e.to_string())? {
            Ok(Outcome::Deferred(deferred)) => Told::Deferred(deferred),
            Err(Error::LineFull { .. }) => Told::Refused,
            Err(Error::Superseded { by, .. }) => Told::Superseded(by),
            other => return Err(format!("request {n} was told {other:?}")),
        };
        told.insert(n, answer);
    }
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(50),
            ..SchedulerOptions::default()
        })
        .start();
    for (key, holder) in keys.iter().zip(&holders) {
        store.release(key, *holder).await.map_err(|e| e.to_string())?;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let stats = queue.operator().stats().await.map_err(|e| e.to_string())?;
        if stats.waiting == 0 && stats.in_flight == 0 {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the queue did not drain: {stats:?}"));
        }
        tokio::time::sleep(5 * MS).await;
    }
    scheduler.shutdown().await;

    let ran = ran.lock().unwrap().clone();
    let ran_once: BTreeSet<usize> = ran.iter().copied().collect();
    if ran_once.len() != ran.len() {
        return Err(format!("a request ran twice: {ran:?}"));
    }
    let mut dead = BTreeSet::new();
    for entry in queue
        .operator()
        .list(JobSet::Dead, 1000)
        .await
        .map_err(|e| e.to_string())?
    {
        if entry.reason.as_deref() != Some(SUPERSEDED_BY_NEWER) {
            return Err(format!("a job died for another reason: {entry:?}"));
        }
        let envelope = entry
            .envelope
            .and_then(Result::ok)
            .ok_or("an undecodable dead job")?;
        dead.insert(envelope.payload.n);
    }
    // The payload each job ran with: the highest revision deferred into it.
    let deferred: BTreeMap<usize, &Deferred> = told
        .iter()
        .filter_map(|(n, told)| match told {
            Told::Deferred(d) => Some((*n, d)),
            _ => None,
        })
        .collect();
    for (n, told) in &told {
        let fates = [ran_once.contains(n), dead.contains(n)];
        match told {
            Told::Refused | Told::Superseded(_) => {
                if fates.iter().any(|fate| *fate) {
                    return Err(format!(
                        "request {n} was told {told:?} but ran or died: {fates:?}"
                    ));
                }
                // The job named as carrying the newer request ran it (or it died).
                if let Told::Superseded(by) = told {
                    let carried = deferred
                        .iter()
                        .any(|(m, other)| other.job_id == *by && (ran_once.contains(m) || dead.contains(m)));
                    if !carried {
                        return Err(format!(
                            "request {n} was superseded by job {by}, which ran nothing"
                        ));
                    }
                }
            }
            Told::Deferred(d) if d.duplicate => {
                if fates.iter().any(|fate| *fate) {
                    return Err(format!("request {n}, a duplicate, ran or died"));
                }
                // The job it joined ran or died, with the first request's payload.
                let carrier = deferred.iter().any(|(m, other)| {
                    other.job_id == d.job_id && !other.duplicate && (ran_once.contains(m) || dead.contains(m))
                });
                if !carrier {
                    return Err(format!("request {n}'s job {} neither ran nor died", d.job_id));
                }
            }
            Told::Deferred(d) => {
                if ran_once.contains(n) && dead.contains(n) {
                    return Err(format!("request {n} both ran and died"));
                }
                if ran_once.contains(n) || dead.contains(n) {
                    continue;
                }
                // Neither ran nor died: replaced in its job by a newer request, which did.
                let newer = deferred.iter().any(|(m, other)| {
                    other.job_id == d.job_id
                        && other.revision > d.revision
                        && (ran_once.contains(m) || dead.contains(m))
                });
                if !newer {
                    return Err(format!(
                        "request {n} ({d:?}) vanished: ran {ran:?}, dead {dead:?}"
                    ));
                }
            }
        }
    }
    for n in &ran_once {
        if !matches!(told.get(n), Some(Told::Deferred(d)) if !d.duplicate) {
            return Err(format!("request {n} ran but was told {:?}", told.get(n)));
        }
    }
    Ok(())
}

fn run<St: PendingStore + LockStore>(store: St, runtime: &tokio::runtime::Runtime, default_cases: u32) {
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases(default_cases)));
    runner
        .run(&load(), |load| {
            runtime
                .block_on(check(store.clone(), load))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn every_request_is_run_superseded_refused_or_dead_in_memory() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    run(MemoryStore::new(), &runtime, 24);
}

fn on_server(server: Server) {
    if !server.available() {
        return;
    }
    let redis = RedisServer::start_of(server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(redis.store());
    run(store, &runtime, 12);
}

#[test]
fn every_request_is_run_superseded_refused_or_dead_on_redis() {
    on_server(Server::Redis);
}

#[test]
fn every_request_is_run_superseded_refused_or_dead_on_valkey() {
    on_server(Server::Valkey);
}
