//! The semaphore: at most 3 requests at a time per upstream account, the others waiting in the
//! key's line for a permit.
//!
//! ```text
//! cargo run --example semaphore                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example semaphore  # on Redis
//! ```
//!
//! Prints each request as it takes a permit (with its fencing token) and as it gives it back,
//! and how many held the key at once: never more than 3.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redefer::lock::LockStore;
use redefer::strategy::Retry;
use redefer::{Backoff, LockLayer, current_lock};
use tower::{Layer, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

const PERMITS: u32 = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-semaphore", run)
}

async fn run<St: LockStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let calls = LockLayer::new(store, |call: &u32| {
        let _ = call;
        Some("upstream:acme".to_string())
    })
    .permits(PERMITS)
    // A request that finds every permit taken waits in the key's line for one.
    .on_conflict(Retry::new(Backoff::default()).max_wait(Duration::from_secs(10)))
    .layer(service_fn({
        let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
        move |call: u32| {
            let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
            async move {
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let fence = current_lock().and_then(|lock| lock.fence).map(|fence| fence.0);
                let at = start.elapsed().as_millis();
                println!(
                    "{at:>5} ms  call {call} takes a permit (fence {}); {now} hold the key",
                    fence.unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                println!(
                    "{:>5} ms  call {call} gives its permit back",
                    start.elapsed().as_millis()
                );
                Ok::<_, std::convert::Infallible>(call)
            }
        }
    }));

    let requests: Vec<_> = (1..=8)
        .map(|call| tokio::spawn(calls.clone().oneshot(call)))
        .collect();
    for request in requests {
        let outcome = request.await??;
        assert!(
            outcome.done().is_some(),
            "every call ran: none is deferred under Retry"
        );
    }
    let most = most.load(Ordering::SeqCst);
    println!("8 calls done; at most {most} held the key at once (the limit is {PERMITS})");
    assert!(most <= PERMITS as usize);
    Ok(())
}
