//! What stays in Redis: a service that touches thousands of distinct keys through every guard
//! and policy (a fenced mutex, a semaphore, a throttle, defer, coalesce, debounce,
//! idempotency) leaves, once its work is done, only keys that expire within a minute, and a
//! number of keys that live on (the queues' and the registry's) that does not depend on how
//! many keys it touched. Counted by `RedisStore::footprint`, the command operators run.

use crate::support;

use std::convert::Infallible;
use std::time::Duration;

use redefer::debounce::{Debounce, DebounceLayer};
use redefer::idempotency::IdempotencyLayer;
use redefer::queue::QueueRegistry;
use redefer::queue::{DelayQueue, Retention};
use redefer::store::footprint::Footprint;
use redefer::store::lifetimes::{IDLE_KEY_TTL, Lifetime};
use redefer::strategy::{Coalesce, Defer};
use redefer::throttle::{Rate, ThrottleLayer};
use redefer::{LockLayer, RedisStore, Scheduler, SchedulerHandle, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};

use support::{TestRedis, eventually};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Work {
    key: u64,
    n: u32,
}

const MS: Duration = Duration::from_millis(1);

fn scheduler_options() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(100),
        ..SchedulerOptions::default()
    }
}

/// A handler that takes a little time, so that requests on one key meet.
async fn handler(_: Work) -> Result<(), Infallible> {
    tokio::time::sleep(2 * MS).await;
    Ok(())
}

type Store = RedisStore;

fn queue(store: &Store, name: &str) -> DelayQueue<Work, Store> {
    DelayQueue::new(store.clone(), name).unwrap()
}

/// Sends `copies` requests at once for each of `keys` keys through `service`, and waits for
/// all of them; any error is a failure of the test.
async fn send<S>(service: S, keys: std::ops::Range<u64>, copies: u32)
where
    S: tower::Service<Work, Future: Send, Error: std::fmt::Debug + Send, Response: Send>
        + Clone
        + Send
        + 'static,
{
    for chunk in keys.collect::<Vec<_>>().chunks(200) {
        let calls: Vec<_> = chunk
            .iter()
            .flat_map(|&key| (0..copies).map(move |n| Work { key, n }))
            .map(|work| tokio::spawn(service.clone().oneshot(work)))
            .collect();
        for call in calls {
            call.await.unwrap().expect("every request is run or deferred");
        }
    }
}

/// Touches `keys` distinct keys through each guard and policy; returns once every queue is
/// empty (every deferred job ran).
async fn touch_every_guard(store: &Store, keys: u64) {
    let mut schedulers: Vec<SchedulerHandle> = Vec::new();
    let mut queues = Vec::new();

    // A fenced mutex per order that defers: three requests per key at once.
    let orders = queue(store, "orders");
    let locked = LockLayer::new(store.clone(), |w: &Work| Some(format!("order:{}", w.key)))
        .ttl(Duration::from_secs(2))
        .on_conflict(Defer::new(orders.clone()))
        .layer(service_fn(handler));
    queues.push(orders.clone());
    schedulers.push(
        Scheduler::new(orders.clone(), locked.clone())
            .options(scheduler_options())
            .start(),
    );
    send(locked, 0..keys, 2).await;

    // A semaphore of two per tenant that defers.
    let tenants = queue(store, "tenants");
    let permits = LockLayer::new(store.clone(), |w: &Work| Some(format!("tenant:{}", w.key)))
        .permits(2)
        .on_conflict(Defer::new(tenants.clone()))
        .layer(service_fn(handler));
    queues.push(tenants.clone());
    schedulers.push(
        Scheduler::new(tenants.clone(), permits.clone())
            .options(scheduler_options())
            .start(),
    );
    send(permits, 0..keys / 4, 3).await;

    // A throttle per customer that books its slots.
    let customers = queue(store, "customers");
    let throttled = ServiceBuilder::new()
        .layer(
            ThrottleLayer::new(
                store.clone(),
                |w: &Work| Some(format!("customer:{}", w.key)),
                Rate::per_second(20).unwrap(),
            )
            .on_conflict(Defer::new(customers.clone()))
            .over_guard(),
        )
        .layer(LockLayer::new(store.clone(), |w: &Work| {
            Some(format!("customer-order:{}", w.key))
        }))
        .service(service_fn(handler));
    queues.push(customers.clone());
    schedulers.push(
        Scheduler::new(customers.clone(), throttled.clone())
            .options(scheduler_options())
            .start(),
    );
    send(throttled, 0..keys / 4, 2).await;

    // Coalesced syncs: while the key is held, later ones join the waiting job.
    let syncs = queue(store, "syncs");
    let coalesced = LockLayer::new(store.clone(), |w: &Work| Some(format!("account:{}", w.key)))
        .on_conflict(Coalesce::latest(syncs.clone()))
        .layer(service_fn(handler));
    queues.push(syncs.clone());
    schedulers.push(
        Scheduler::new(syncs.clone(), coalesced.clone())
            .options(scheduler_options())
            .start(),
    );
    send(coalesced, 0..keys / 4, 3).await;

    // A debounced reindex per document.
    let reindex = queue(store, "reindex");
    let debounced = DebounceLayer::new(
        reindex.clone(),
        |w: &Work| Some(format!("doc:{}", w.key)),
        Debounce::new(20 * MS, 200 * MS).unwrap(),
    )
    .layer(service_fn(handler));
    queues.push(reindex.clone());
    schedulers.push(
        Scheduler::new(reindex.clone(), debounced.clone())
            .options(scheduler_options())
            .start(),
    );
    send(debounced, 0..keys / 4, 2).await;

    // Idempotent deliveries, kept as finished for a second.
    let hooks = queue(store, "hooks").retain_finished(Retention::new(100_000, Duration::from_secs(1)));
    let idempotent = ServiceBuilder::new()
        .layer(
            IdempotencyLayer::new(hooks.clone(), |w: &Work| Some(format!("delivery-{}", w.key))).over_guard(),
        )
        .layer(
            LockLayer::new(store.clone(), |w: &Work| {
                Some(format!("hook-order:{}", w.key % 50))
            })
            .ttl(Duration::from_millis(500))
            .on_conflict(Defer::new(hooks.clone())),
        )
        .service(service_fn(handler));
    queues.push(hooks.clone());
    schedulers.push(
        Scheduler::new(hooks.clone(), idempotent.clone())
            .options(scheduler_options())
            .start(),
    );
    send(idempotent, 0..keys / 4, 2).await;

    eventually(Duration::from_secs(120), "every deferred job ran", || async {
        for queue in &queues {
            // Finished jobs kept by a retention stay in their queue's keys.
            let stats = queue.operator().stats().await.unwrap();
            if stats.waiting + stats.in_flight + stats.dead > 0 {
                return None;
            }
        }
        Some(())
    })
    .await;
    for scheduler in schedulers {
        scheduler.shutdown().await;
    }
}

/// The keys that would still be there a minute after the work ended: those without an expiry,
/// and those whose TTL runs past the minute, by kind.
fn left_after_a_minute(footprint: &Footprint) -> Vec<(String, u64, Lifetime)> {
    footprint
        .kinds
        .iter()
        .filter(|(_, found)| found.never_expire > 0 || found.longest_ttl_ms > IDLE_KEY_TTL.as_millis() as u64)
        .map(|(kind, found)| (kind.clone(), found.keys, found.lifetime))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_stays_in_redis_does_not_grow_with_the_keys_used() {
    let server = TestRedis::start();
    let store = server.store().await;
    // 1,600 order keys and 400 of each other kind: 3,600 distinct lock keys in all. A larger
    // run for a measurement: REDEFER_FOOTPRINT_KEYS=16000.
    let keys = std::env::var("REDEFER_FOOTPRINT_KEYS")
        .ok()
        .and_then(|keys| keys.parse().ok())
        .unwrap_or(1_600);
    touch_every_guard(&store, keys).await;

    let footprint = store.footprint(10_000_000).await.unwrap();
    assert!(footprint.complete);
    eprintln!("after touching {keys} keys through every guard (kind, keys, longest TTL ms, never expire):");
    for (kind, found) in &footprint.kinds {
        eprintln!(
            "  {kind:<24} {:>6} {:>8} {:>6}",
            found.keys, found.longest_ttl_ms, found.never_expire
        );
    }
    let left = left_after_a_minute(&footprint);
    eprintln!("left a minute later: {left:?}");
    assert!(
        left.iter()
            .all(|(_, _, lifetime)| *lifetime == Lifetime::WithQueue),
        "keys made for one lock key outlive their minute: {left:?}"
    );
    assert_eq!(footprint.unbounded(), 0, "{footprint:?}");
    // Six queues (at most 15 keys each while they hold jobs; far fewer once drained) and the
    // registry's three keys: nothing that counts the keys touched.
    let lasting: u64 = left.iter().map(|(_, count, _)| count).sum();
    assert!(lasting <= 6 * 15 + 3, "{lasting} keys live on: {left:?}");
    assert_eq!(store.registered().await.unwrap().len(), 6);
}
