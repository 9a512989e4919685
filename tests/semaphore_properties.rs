//! Property test of the semaphore, against MemoryStore, Redis and Valkey: generated arrivals of
//! callers on one key with a generated limit N, each holding for a generated time; some die
//! holding (their permit is never released and frees only when its lease runs out). Never more
//! than N hold the key at any instant, fences strictly increase in time, and every caller that
//! waits in line is served (none starves).
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use redefer::lock::{Acquisition, LockStore};
use redefer::semaphore::{Permits, SemaphoreStore};
use redefer::strategy::Retry;
use redefer::{Backoff, FencingToken, LockKey, LockLayer, LockToken, MemoryStore, Outcome, current_lock};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisServer, Server};

/// The lease of every permit: a holder that dies frees its permit this long after its acquire.
const TTL: Duration = Duration::from_millis(150);

/// One caller: how long after the previous one it arrives, how long it holds the key, whether
/// it dies holding it.
#[derive(Debug, Clone)]
struct Caller {
    gap_ms: u64,
    hold_ms: u64,
    dies: bool,
}

#[derive(Debug, Clone)]
struct Load {
    permits: u32,
    callers: Vec<Caller>,
}

fn load() -> impl Strategy<Value = Load> {
    let caller =
        (0u64..10, 0u64..30, proptest::bool::weighted(0.15)).prop_map(|(gap_ms, hold_ms, dies)| Caller {
            gap_ms,
            hold_ms,
            dies,
        });
    (1u32..=4, proptest::collection::vec(caller, 2..16))
        .prop_map(|(permits, callers)| Load { permits, callers })
}

/// One holding as seen from outside: a subset of the time the permit was really held (from the
/// acquire's answer to the release's request, or for a holder that died to its acquire's
/// request plus the TTL), when the caller asked for it, and its fence.
#[derive(Debug, Clone, Copy)]
struct Holding {
    asked: Instant,
    start: Instant,
    end: Instant,
    fence: FencingToken,
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

async fn check<St: SemaphoreStore>(store: St, load: Load) -> Result<(), String> {
    let key = LockKey::new(format!("tenant-{}", rand::random::<u64>())).unwrap();
    let holdings = Arc::new(Mutex::new(Vec::<Holding>::new()));
    let service = {
        let holdings = Arc::clone(&holdings);
        let name = key.as_str().to_string();
        LockLayer::new(store.clone(), move |_: &(Instant, u64)| Some(name.clone()))
            .permits(load.permits)
            .ttl(TTL)
            // Waits in line until served: a starving caller fails the case by its timeout.
            .on_conflict(
                Retry::new(Backoff::exponential(
                    Duration::from_millis(5),
                    Duration::from_millis(50),
                ))
                .max_attempts(u32::MAX)
                .max_wait(Duration::from_secs(60)),
            )
            .layer(service_fn(move |(asked, hold_ms): (Instant, u64)| {
                let holdings = Arc::clone(&holdings);
                async move {
                    let start = Instant::now();
                    let fence = current_lock().and_then(|lock| lock.fence).expect("fenced");
                    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                    let end = Instant::now();
                    holdings.lock().unwrap().push(Holding {
                        asked,
                        start,
                        end,
                        fence,
                    });
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let permits = Permits::new(store.clone(), load.permits);
    let mut calls = Vec::new();
    for caller in load.callers {
        tokio::time::sleep(Duration::from_millis(caller.gap_ms)).await;
        let asked = Instant::now();
        if caller.dies {
            let (permits, key, holdings) = (permits.clone(), key.clone(), Arc::clone(&holdings));
            calls.push(tokio::spawn(async move {
                die_holding(&permits, &key, &holdings, asked).await;
                Ok::<_, String>(())
            }));
        } else {
            let service = service.clone();
            calls.push(tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(20), service.oneshot((asked, caller.hold_ms)))
                    .await
                {
                    Ok(Ok(Outcome::Done(()))) => Ok(()),
                    Ok(other) => Err(format!("a waiting caller ended with {other:?}")),
                    Err(_) => Err("a waiting caller starved: not served within 20 s".to_string()),
                }
            }));
        }
    }
    for call in calls {
        call.await.map_err(|panic| panic.to_string())??;
    }
    let holdings = holdings.lock().unwrap().clone();
    at_most(load.permits, &holdings)?;
    fences_increase(&holdings)
}

/// A caller that takes a permit (polling, as a newcomer) and dies holding it: never released,
/// never renewed. Its holding ends when its lease runs out, at the earliest `TTL` after the
/// request that took it.
async fn die_holding<St: SemaphoreStore>(
    permits: &Permits<St, u32>,
    key: &LockKey,
    holdings: &Mutex<Vec<Holding>>,
    asked: Instant,
) {
    loop {
        let sent = Instant::now();
        match permits.try_acquire(key, LockToken::random(), TTL).await.unwrap() {
            Acquisition::Acquired(fence) => {
                holdings.lock().unwrap().push(Holding {
                    asked,
                    start: Instant::now(),
                    // The server's clock is read in whole ms.
                    end: sent + TTL - Duration::from_millis(2),
                    fence: fence.expect("fenced"),
                });
                return;
            }
            Acquisition::Held { .. } => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Never more than `permits` holdings at one instant.
fn at_most(permits: u32, holdings: &[Holding]) -> Result<(), String> {
    let mut events: Vec<(Instant, i32)> = holdings
        .iter()
        .flat_map(|holding| [(holding.start, 1), (holding.end, -1)])
        .collect();
    // At one instant, ends before starts: the intervals are half-open.
    events.sort();
    let mut now = 0;
    for (_, change) in events {
        now += change;
        if now > permits as i32 {
            return Err(format!(
                "{now} held the key at once with {permits} permits: {holdings:?}"
            ));
        }
    }
    Ok(())
}

/// A holding asked for after another ended has a higher fence; no two share one.
fn fences_increase(holdings: &[Holding]) -> Result<(), String> {
    for a in holdings {
        for b in holdings {
            if a.end <= b.asked && a.fence >= b.fence {
                return Err(format!("{b:?} began after {a:?} ended, with a fence no higher"));
            }
            if !std::ptr::eq(a, b) && a.fence == b.fence {
                return Err(format!("two holdings share fence {}", a.fence));
            }
        }
    }
    Ok(())
}

fn run<St: SemaphoreStore>(store: St, runtime: &tokio::runtime::Runtime, default_cases: u32) {
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
fn never_more_than_n_hold_a_key_in_memory() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    run(
        MemoryStore::new().with_reservation(Duration::from_millis(300)),
        &runtime,
        16,
    );
}

fn on_server(server: Server) {
    if !server.available() {
        return;
    }
    let redis = RedisServer::start_of(server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(redis.store())
        .with_reservation(Duration::from_millis(300));
    run(store, &runtime, 8);
}

#[test]
fn never_more_than_n_hold_a_key_on_redis() {
    on_server(Server::Redis);
}

#[test]
fn never_more_than_n_hold_a_key_on_valkey() {
    on_server(Server::Valkey);
}
