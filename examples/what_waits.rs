//! What waits behind a held key: ten syncs of one document while a sync runs become one job
//! that runs once, with the latest; a capped line refuses what would overfill it.
//!
//! ```text
//! cargo run --example what_waits                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example what_waits  # on Redis
//! ```
//!
//! Prints what each sync was told (deferred into the one waiting job, with its revision), what
//! the handler ran (the first sync, then the latest of the ten, once), and the exports that a
//! line of at most 2 refused with `LineFull`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redefer::guard::LineCap;
use redefer::lock::{Fencing, Holders, LockStore};
use redefer::queue::{DelayQueue, PendingStore};
use redefer::strategy::{Coalesce, Defer};
use redefer::{Error, LockKey, LockLayer, LockToken, Outcome, Scheduler};
use tower::{Layer, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Sync {
    document: String,
    revision: u32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-what-waits", run)
}

async fn run<St: LockStore + PendingStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs")?;
    let ran = Arc::new(Mutex::new(Vec::new()));
    let by_document = |sync: &Sync| Some(format!("doc:{}", sync.document));
    // A sync that meets its document held joins the one waiting job, which keeps the latest.
    let syncs = LockLayer::new(store.clone(), by_document)
        .on_conflict(Coalesce::latest(queue.clone()))
        .layer(service_fn({
            let ran = Arc::clone(&ran);
            move |sync: Sync| {
                let ran = Arc::clone(&ran);
                async move {
                    println!("ran: sync of {} at revision {}", sync.document, sync.revision);
                    ran.lock().expect("the runs").push(sync.revision);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok::<_, std::convert::Infallible>(())
                }
            }
        }));
    let scheduler = Scheduler::new(queue.clone(), syncs.clone()).start();

    // Revision 1 runs; revisions 2 to 11 arrive while it does.
    let first = tokio::spawn(syncs.clone().oneshot(Sync {
        document: "plan".into(),
        revision: 1,
    }));
    while ran.lock().expect("the runs").is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for revision in 2..=11 {
        let sync = Sync {
            document: "plan".into(),
            revision,
        };
        match syncs.clone().oneshot(sync).await? {
            Outcome::Deferred(job) => println!(
                "revision {revision:>2}: deferred into job {} (requests it carries: {})",
                job.job_id, job.revision
            ),
            Outcome::Done(()) => println!("revision {revision:>2}: ran at once"),
            other => println!("revision {revision:>2}: {other:?}"),
        }
    }
    assert!(first.await??.done().is_some(), "the first sync ran at once");
    let started = Instant::now();
    while ran.lock().expect("the runs").len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiting job runs"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    scheduler.shutdown().await;
    let ran = ran.lock().expect("the runs").clone();
    println!("the handler ran {} times: revisions {ran:?}", ran.len());
    assert_eq!(ran, [1, 11], "the first, then the latest, once");

    // A line of at most 2: exports of a report held elsewhere, the third is refused.
    let exports = DelayQueue::<Sync, _>::new(store.clone(), "exports")?;
    let capped = LockLayer::new(store.clone(), by_document)
        .on_conflict(Defer::new(exports.clone()).max_waiting(LineCap::new(2)))
        .layer(service_fn(|_: Sync| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    // A report of its own each run: a run on Redis leaves nothing that the next one meets.
    let report = format!("report-{}", std::process::id());
    let key = LockKey::new(format!("doc:{report}"))?;
    let holder = LockToken::random();
    store
        .acquire(
            &key,
            holder,
            Duration::from_secs(30),
            Holders::One,
            None,
            Fencing::On,
        )
        .await?;
    let (mut refused, mut deferred) = (0, Vec::new());
    for revision in 1..=3 {
        let sync = Sync {
            document: report.clone(),
            revision,
        };
        match capped.clone().oneshot(sync).await {
            Ok(Outcome::Deferred(job)) => {
                println!("export {revision}: deferred, waiting in line");
                deferred.push(job.job_id);
            }
            Err(Error::LineFull { waiting, .. }) => {
                refused += 1;
                println!("export {revision}: refused, {waiting} already wait (LineFull)");
            }
            other => println!("export {revision}: {other:?}"),
        }
    }
    assert_eq!(refused, 1, "the third export is refused");
    for job in &deferred {
        exports.cancel(job).await?;
    }
    store.release_holding(&key, holder, Holders::One, None).await?;
    Ok(())
}
