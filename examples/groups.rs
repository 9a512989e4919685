//! Fair shares across tenants: a big tenant's backlog does not hold up a small tenant's jobs.
//!
//! ```text
//! cargo run --example groups                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example groups  # on Redis
//! ```
//!
//! Tenant A pushes 300 exports, then tenant B pushes 5, all due at once. In one line, B's
//! would run after A's 300. Each tenant's jobs are a group, and claims take the groups' due
//! jobs in turns: prints where B's jobs ran among the 305 (near the front), and what an
//! operator sees of the groups while they wait.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, JobGroup, QueueStore};
use redefer::strategy::Defer;
use redefer::{LockLayer, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{Layer, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Export {
    tenant: String,
    n: u32,
}

const BIG: u32 = 300;
const SMALL: u32 = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-groups", run)
}

async fn run<St: LockStore + QueueStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let queue = DelayQueue::<Export, _>::new(store.clone(), "exports")?;
    // The tenants' exports are pushed first, with no scheduler running: a backlog.
    let tenant_a = queue.in_group(JobGroup::new("tenant-a")?);
    let tenant_b = queue.in_group(JobGroup::new("tenant-b")?);
    for n in 1..=BIG {
        let export = Export {
            tenant: "tenant-a".into(),
            n,
        };
        tenant_a.push(&export, Duration::ZERO).await?;
    }
    for n in 1..=SMALL {
        let export = Export {
            tenant: "tenant-b".into(),
            n,
        };
        tenant_b.push(&export, Duration::ZERO).await?;
    }
    let groups = queue.operator().groups(10).await?;
    for group in &groups.largest {
        println!("waiting: {:>3} jobs of {}", group.waiting, group.group.as_str());
    }

    // Each export holds its own document's lock while it runs, 2 ms of work.
    let ran = Arc::new(Mutex::new(Vec::new()));
    let exports = LockLayer::new(store, |export: &Export| {
        Some(format!("export:{}:{}", export.tenant, export.n))
    })
    .on_conflict(Defer::new(queue.clone()))
    .layer(service_fn({
        let ran = Arc::clone(&ran);
        move |export: Export| {
            let ran = Arc::clone(&ran);
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                ran.lock().expect("the runs").push(export.tenant);
                Ok::<_, std::convert::Infallible>(())
            }
        }
    }));
    let started = Instant::now();
    let scheduler = Scheduler::new(queue.clone(), exports)
        .options(SchedulerOptions {
            concurrency: 4,
            ..SchedulerOptions::default()
        })
        .start();
    let total = (BIG + SMALL) as usize;
    while ran.lock().expect("the runs").len() < total {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "every export runs within a minute"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    scheduler.shutdown().await;

    let ran = ran.lock().expect("the runs");
    let places: Vec<usize> = ran
        .iter()
        .enumerate()
        .filter(|(_, tenant)| *tenant == "tenant-b")
        .map(|(place, _)| place + 1)
        .collect();
    println!(
        "{total} exports ran in {} ms; tenant-b's {SMALL} ran at places {places:?}, not after tenant-a's {BIG}",
        started.elapsed().as_millis()
    );
    // Turns: while both groups have jobs, each gets every other claim's job.
    assert!(
        places.iter().all(|place| *place <= 4 * SMALL as usize),
        "the small tenant's jobs ran near the front: {places:?}"
    );
    Ok(())
}
