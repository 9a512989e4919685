//! Debounce: a document saved six times in a burst is reindexed once, with its latest text, a
//! quiet period after the last save.
//!
//! ```text
//! cargo run --example debounce                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example debounce  # on Redis
//! ```
//!
//! Prints what each save was told (deferred into the document's one waiting job, its due time
//! pushed later by each save, its revision counting the saves it carries), then the one run
//! of the reindex, with the sixth save's text, and when it started against the last save.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use redefer::debounce::{Debounce, DebounceLayer};
use redefer::queue::{DelayQueue, PendingStore};
use redefer::{Outcome, Scheduler};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

/// Reindex a document after a save: the text as saved.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Reindex {
    document: u64,
    text: String,
}

/// How long a document stays quiet before its reindex runs, and the longest a burst waits.
const PERIOD: Duration = Duration::from_millis(200);
const MAX_WAIT: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-debounce", run)
}

async fn run<St: PendingStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let queue = DelayQueue::<Reindex, _>::new(store, "reindex")?;
    let (ran, mut runs) = mpsc::unbounded_channel();
    let reindex = DebounceLayer::new(
        queue.clone(),
        |save: &Reindex| Some(format!("document:{}", save.document)),
        Debounce::new(PERIOD, MAX_WAIT)?,
    )
    .layer(service_fn(move |save: Reindex| {
        let ran = ran.clone();
        async move {
            // The one run of the burst: the latest save's text.
            let _ = ran.send((save.text, start.elapsed()));
            Ok::<_, Infallible>(())
        }
    }));
    // The scheduler runs the document's job through the same stack, once it is due.
    let scheduler = Scheduler::new(queue.clone(), reindex.clone()).start();

    println!("-- six saves of document 7, 30 ms apart; the reindex waits for {PERIOD:?} of quiet");
    let mut last_save = Duration::ZERO;
    for save in 1..=6 {
        let text = format!("draft {save}");
        last_save = start.elapsed();
        let outcome = reindex.clone().oneshot(Reindex { document: 7, text }).await?;
        let Outcome::Deferred(job) = outcome else {
            return Err("a save with a key is always deferred".into());
        };
        let due_in = job
            .due
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        println!(
            "{:>5} ms  save {save}: deferred into job {}, revision {}, due in {} ms",
            last_save.as_millis(),
            job.job_id,
            job.revision,
            due_in.as_millis()
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }

    let (text, at) = runs.recv().await.ok_or("the reindex never ran")?;
    println!(
        "{:>5} ms  reindexed once, with {text:?}, {} ms after the last save",
        at.as_millis(),
        at.saturating_sub(last_save).as_millis()
    );
    assert_eq!(text, "draft 6", "the run carries the latest save");
    assert!(at >= last_save + PERIOD, "not before the quiet period");
    scheduler.shutdown().await;
    assert!(runs.try_recv().is_err(), "one run for the burst");
    Ok(())
}
