//! A set of keys: transfers that hold both their accounts at once, all or nothing, with no
//! deadlock however their accounts overlap.
//!
//! ```text
//! cargo run --example set                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example set  # on Redis
//! ```
//!
//! Six transfers around three accounts (1→2, 2→3, 3→1, and back) start together; each prints
//! when it holds both its accounts, with a fencing token per account. No two transfers that
//! share an account ever run at once, and every one of them runs.

use std::time::{Duration, Instant};

use redefer::Backoff;
use redefer::lock::current_locks;
use redefer::lock_set::{LockSetLayer, LockSetStore};
use redefer::strategy::Retry;
use tower::{Layer, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

struct Transfer {
    from: u64,
    to: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-set", run)
}

async fn run<St: LockSetStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let transfers = LockSetLayer::new(store, |t: &Transfer| {
        Some(vec![format!("account:{}", t.from), format!("account:{}", t.to)])
    })
    // A transfer whose accounts are taken waits in their lines, until served.
    .on_conflict(Retry::new(Backoff::default()).max_wait(Duration::from_secs(10)))
    .layer(service_fn(move |t: Transfer| async move {
        let held: Vec<String> = current_locks()
            .iter()
            .map(|lock| format!("{} (fence {})", lock.key, lock.fence.map_or(0, |fence| fence.0)))
            .collect();
        println!(
            "{:>5} ms  {} -> {} holds {}",
            start.elapsed().as_millis(),
            t.from,
            t.to,
            held.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, std::convert::Infallible>((t.from, t.to))
    }));

    let pairs = [(1, 2), (2, 3), (3, 1), (2, 1), (3, 2), (1, 3)];
    let running: Vec<_> = pairs
        .into_iter()
        .map(|(from, to)| tokio::spawn(transfers.clone().oneshot(Transfer { from, to })))
        .collect();
    for transfer in running {
        let outcome = transfer.await??;
        assert!(outcome.done().is_some(), "every transfer ran");
    }
    println!(
        "6 transfers done in {} ms: each held both its accounts, none ran beside another on the same account",
        start.elapsed().as_millis()
    );
    Ok(())
}
