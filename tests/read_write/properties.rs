//! Property test of the read-write lock, against MemoryStore, Redis and Valkey: generated
//! arrivals of readers and writers on one key, with a generated limit of readers (or none),
//! each holding for a generated time; some die holding (their holding is never released and
//! frees only when its lease runs out). At no instant does a writer hold beside anyone, nor
//! more readers than the limit; fences strictly increase in time; every caller that waits in
//! line is served (none starves).
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use redefer::lock::{Acquisition, Holders, LockStore};
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::semaphore::SemaphoreStore;
use redefer::strategy::Retry;
use redefer::{Backoff, Fencing, FencingToken, LockKey, LockToken, MemoryStore, Outcome, current_lock};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use crate::support::{RedisServer, Server};

/// The lease of every holding: a holder that dies frees the key this long after its acquire.
const TTL: Duration = Duration::from_millis(150);

/// One caller: how long after the previous one it arrives, whether it writes, how long it
/// holds the key, whether it dies holding it.
#[derive(Debug, Clone)]
struct Caller {
    gap_ms: u64,
    writes: bool,
    hold_ms: u64,
    dies: bool,
}

#[derive(Debug, Clone)]
struct Load {
    /// The most readers at once; `None`: any number.
    readers: Option<u32>,
    callers: Vec<Caller>,
}

fn load() -> impl Strategy<Value = Load> {
    let caller = (
        0u64..10,
        proptest::bool::weighted(0.3),
        0u64..30,
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(gap_ms, writes, hold_ms, dies)| Caller {
            gap_ms,
            writes,
            hold_ms,
            dies,
        });
    (
        proptest::option::of(1u32..=3),
        proptest::collection::vec(caller, 2..16),
    )
        .prop_map(|(readers, callers)| Load { readers, callers })
}

/// One holding as seen from outside: a subset of the time it really held the key (from the
/// acquire's answer to the release's request, or for a holder that died to its acquire's
/// request plus the TTL), when the caller asked for it, whether it wrote, and its fence.
#[derive(Debug, Clone, Copy)]
struct Holding {
    asked: Instant,
    start: Instant,
    end: Instant,
    writes: bool,
    fence: FencingToken,
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// A request of the load: when it was asked, whether it writes, how long it holds.
type Request = (Instant, bool, u64);

async fn check<St: SemaphoreStore>(store: St, load: Load) -> Result<(), String> {
    let key = LockKey::new(format!("doc-{}", rand::random::<u64>())).unwrap();
    let holdings = Arc::new(Mutex::new(Vec::<Holding>::new()));
    let name = key.as_str().to_string();
    let layer = ReadWriteLayer::new(
        store.clone(),
        move |_: &Request| Some(name.clone()),
        |(_, writes, _): &Request| if *writes { Access::Write } else { Access::Read },
    );
    let layer = match load.readers {
        Some(readers) => layer.readers(readers),
        None => layer,
    };
    let service = layer
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
        .layer(service_fn({
            let holdings = Arc::clone(&holdings);
            move |(asked, writes, hold_ms): Request| {
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
                        writes,
                        fence,
                    });
                    Ok::<_, std::convert::Infallible>(())
                }
            }
        }));
    let limit = load.readers.unwrap_or(u32::MAX);
    let mut calls = Vec::new();
    for caller in load.callers {
        tokio::time::sleep(Duration::from_millis(caller.gap_ms)).await;
        let asked = Instant::now();
        if caller.dies {
            let holders = if caller.writes {
                Holders::Writer(limit)
            } else {
                Holders::Permits(limit)
            };
            let (store, key, holdings) = (store.clone(), key.clone(), Arc::clone(&holdings));
            calls.push(tokio::spawn(async move {
                die_holding(&store, &key, holders, &holdings, asked).await;
                Ok::<_, String>(())
            }));
        } else {
            let service = service.clone();
            calls.push(tokio::spawn(async move {
                let request = service.oneshot((asked, caller.writes, caller.hold_ms));
                match tokio::time::timeout(Duration::from_secs(20), request).await {
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
    never_beside_a_writer(limit, &holdings)?;
    fences_increase(&holdings)
}

/// A caller that takes the key (polling, as a newcomer) and dies holding it: never released,
/// never renewed. Its holding ends when its lease runs out, at the earliest `TTL` after the
/// request that took it.
async fn die_holding<St: LockStore>(
    store: &St,
    key: &LockKey,
    holders: Holders,
    holdings: &Mutex<Vec<Holding>>,
    asked: Instant,
) {
    loop {
        let sent = Instant::now();
        let taken = store
            .acquire(key, LockToken::random(), TTL, holders, None, Fencing::On)
            .await
            .unwrap();
        match taken {
            Acquisition::Acquired(fence) => {
                holdings.lock().unwrap().push(Holding {
                    asked,
                    start: Instant::now(),
                    // The server's clock is read in whole ms.
                    end: sent + TTL - Duration::from_millis(2),
                    writes: matches!(holders, Holders::Writer(_)),
                    fence: fence.expect("fenced"),
                });
                return;
            }
            Acquisition::Held { .. } => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// At no instant a writer beside another holding, nor more than `limit` readers.
fn never_beside_a_writer(limit: u32, holdings: &[Holding]) -> Result<(), String> {
    let mut events: Vec<(Instant, i32, bool)> = holdings
        .iter()
        .flat_map(|holding| {
            [
                (holding.start, 1, holding.writes),
                (holding.end, -1, holding.writes),
            ]
        })
        .collect();
    // At one instant, ends before starts: the intervals are half-open.
    events.sort_by_key(|(at, change, _)| (*at, *change));
    let (mut readers, mut writers) = (0i64, 0i64);
    for (_, change, writes) in events {
        if writes {
            writers += i64::from(change);
        } else {
            readers += i64::from(change);
        }
        if writers > 1 || (writers == 1 && readers > 0) || readers > i64::from(limit) {
            return Err(format!(
                "{writers} writers and {readers} readers held the key at once (limit {limit}): {holdings:?}"
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
fn never_a_writer_beside_anyone_in_memory() {
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
fn never_a_writer_beside_anyone_on_redis() {
    on_server(Server::Redis);
}

#[test]
fn never_a_writer_beside_anyone_on_valkey() {
    on_server(Server::Valkey);
}
