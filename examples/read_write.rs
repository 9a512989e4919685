//! Readers beside writers: invoices rendered together, a payment that changes one runs alone.
//!
//! ```text
//! cargo run --example read_write                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example read_write  # on Redis
//! ```
//!
//! Three renders and a payment of one invoice start together, then two more renders: the
//! first renders run side by side, the payment waits for them and runs alone, and the renders
//! that came after it wait for the payment (a waiting writer holds back later readers).

use std::time::{Duration, Instant};

use redefer::lock::LockStore;
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::strategy::Retry;
use redefer::{Backoff, current_lock};
use tower::{Layer, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

enum Invoice {
    Render(u32),
    Pay(u32),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-read-write", run)
}

async fn run<St: LockStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let log = move |line: String| println!("{:>5} ms  {line}", start.elapsed().as_millis());
    let invoices = ReadWriteLayer::new(
        store,
        |_: &Invoice| Some("invoice:7".to_string()),
        |request: &Invoice| match request {
            Invoice::Render(_) => Access::Read,
            Invoice::Pay(_) => Access::Write,
        },
    )
    .on_conflict(Retry::new(Backoff::default()).max_wait(Duration::from_secs(10)))
    .layer(service_fn(move |request: Invoice| async move {
        let fence = current_lock()
            .and_then(|lock| lock.fence)
            .map_or(0, |fence| fence.0);
        let what = match request {
            Invoice::Render(n) => format!("render {n}"),
            Invoice::Pay(n) => format!("payment {n}"),
        };
        log(format!("{what} starts (fence {fence})"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        log(format!("{what} ends"));
        Ok::<_, std::convert::Infallible>(())
    }));

    let mut running = Vec::new();
    for request in [
        Invoice::Render(1),
        Invoice::Render(2),
        Invoice::Render(3),
        Invoice::Pay(1),
    ] {
        running.push(tokio::spawn(invoices.clone().oneshot(request)));
        // In this order: the payment comes after the first three renders.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for request in [Invoice::Render(4), Invoice::Render(5)] {
        running.push(tokio::spawn(invoices.clone().oneshot(request)));
    }
    for request in running {
        let outcome = request.await??;
        assert!(outcome.done().is_some(), "every request ran");
    }
    log("done: renders 1-3 together, then the payment alone, then renders 4-5 together".to_string());
    Ok(())
}
