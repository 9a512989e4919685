//! Property test of the semaphore, against MemoryStore, Redis and Valkey: generated arrivals of
//! callers on one key with a generated limit N, each holding for a generated time; some die
//! holding (their permit is never released and frees only when its lease runs out). Never more
//! than N hold the key at any instant, fences strictly increase in time, and every caller that
//! waits in line is served (none starves).
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

use crate::holdings;
use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use redefer::lock::{Holders, LockStore};
use redefer::strategy::Retry;
use redefer::{Backoff, LockKey, LockLayer, MemoryStore, Outcome, current_lock};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use holdings::{Holding, TTL, die_holding, fences_increase, never_beside_a_writer, on_server, run};
use support::Server;

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

async fn check<St: LockStore>(store: St, load: Load) -> Result<(), String> {
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
                        writes: false,
                        fence,
                    });
                    Ok::<_, std::convert::Infallible>(())
                }
            }))
    };
    let mut calls = Vec::new();
    for caller in load.callers {
        tokio::time::sleep(Duration::from_millis(caller.gap_ms)).await;
        let asked = Instant::now();
        if caller.dies {
            let (store, key, holdings) = (store.clone(), key.clone(), Arc::clone(&holdings));
            let holders = Holders::Permits(load.permits);
            calls.push(tokio::spawn(async move {
                die_holding(&store, &key, holders, &holdings, asked).await;
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
    // A semaphore's holders are readers of its key.
    never_beside_a_writer(load.permits, &holdings)?;
    fences_increase(&holdings)
}

#[test]
fn never_more_than_n_hold_a_key_in_memory() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = MemoryStore::new().with_reservation(Duration::from_millis(300));
    run(store, &runtime, 16, load(), check);
}

#[test]
fn never_more_than_n_hold_a_key_on_redis() {
    on_server(Server::Redis, |store, runtime| {
        run(store, runtime, 8, load(), check)
    });
}

#[test]
fn never_more_than_n_hold_a_key_on_valkey() {
    on_server(Server::Valkey, |store, runtime| {
        run(store, runtime, 8, load(), check)
    });
}
