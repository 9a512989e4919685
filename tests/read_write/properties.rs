//! Property test of the read-write lock, against MemoryStore, Redis and Valkey: generated
//! arrivals of readers and writers on one key, with a generated limit of readers (or none),
//! each holding for a generated time; some die holding (their holding is never released and
//! frees only when its lease runs out). At no instant does a writer hold beside anyone, nor
//! more readers than the limit; fences strictly increase in time; every caller that waits in
//! line is served (none starves). The holdings and their checks are the semaphore's property
//! test's (`support/holdings.rs`).
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use redefer::lock::{Holders, LockStore};
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::strategy::Retry;
use redefer::{Backoff, LockKey, MemoryStore, Outcome, current_lock};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use crate::holdings::{Holding, TTL, die_holding, fences_increase, never_beside_a_writer, on_server, run};
use crate::support::Server;

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

/// A request of the load: when it was asked, whether it writes, how long it holds.
type Request = (Instant, bool, u64);

async fn check<St: LockStore>(store: St, load: Load) -> Result<(), String> {
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

#[test]
fn never_a_writer_beside_anyone_in_memory() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = MemoryStore::new().with_reservation(Duration::from_millis(300));
    run(store, &runtime, 16, load(), check);
}

#[test]
fn never_a_writer_beside_anyone_on_redis() {
    on_server(Server::Redis, |store, runtime| {
        run(store, runtime, 8, load(), check)
    });
}

#[test]
fn never_a_writer_beside_anyone_on_valkey() {
    on_server(Server::Valkey, |store, runtime| {
        run(store, runtime, 8, load(), check)
    });
}
