//! Debouncing by key: a burst runs once per period of quiet (at the latest once per max_wait),
//! at its deadline, with the latest payload; on every store.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redefer::debounce::{Debounce, DebounceLayer};
use redefer::queue::{DelayQueue, JobId, PendingStore, QueueStats};
use redefer::{Deferred, Outcome, Scheduler, SchedulerOptions, current_job};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use support::{StoreClock, eventually, for_each_store};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Edit {
    document: u64,
    n: u32,
}

trait Store: PendingStore + StoreClock {}

impl<S: PendingStore + StoreClock> Store for S {}

/// One run: the job, the edit it carried, when it started by the store's clock.
type Run = (JobId, u32, SystemTime);

/// Requests 10 ms apart for 2 s, with a period of 200 ms and a max_wait of 1 s: the burst never
/// pauses, so it runs at its max_wait, then the rest at the end. At most 3 runs, each within
/// 60 ms of its job's deadline (the due time its last request was told), each with the payload
/// of the last request stored for its job; every request's job ran.
///
/// The scheduler looks at an idle queue once a second only: a run it did not wake for (its
/// timer, a push's wake-up) would be hundreds of ms late, far past the bound, while a wake-up
/// delayed by a loaded machine (21 ms seen, under a bound of 20 ms with polls every 50 ms) is
/// not mistaken for one.
async fn a_continuous_burst_runs_at_most_three_times_at_its_deadlines_with_the_latest<S: Store>(store: S) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "reindex").unwrap();
    let debounce = Debounce::new(200 * MS, 1_000 * MS).unwrap();
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    let service = {
        let (runs, clock) = (Arc::clone(&runs), store.clone());
        DebounceLayer::new(
            queue.clone(),
            |e: &Edit| Some(format!("doc:{}", e.document)),
            debounce,
        )
        .layer(service_fn(move |edit: Edit| {
            let (runs, clock) = (Arc::clone(&runs), clock.clone());
            async move {
                let started = clock.now().await;
                let job = current_job().expect("runs only as a job").id;
                runs.lock().unwrap().push((job, edit.n, started));
                Ok::<_, std::convert::Infallible>(())
            }
        }))
    };
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(SchedulerOptions {
            max_idle: Duration::from_secs(1),
            ..SchedulerOptions::default()
        })
        .start();
    let mut deferrals: Vec<(u32, Deferred)> = Vec::new();
    let mut ticks = tokio::time::interval(10 * MS);
    for n in 0..200 {
        ticks.tick().await;
        match service.clone().oneshot(Edit { document: 1, n }).await {
            Ok(Outcome::Deferred(deferred)) => deferrals.push((n, deferred)),
            other => panic!("edit {n}: {other:?}"),
        }
    }
    // The last request of each job: its payload and deadline are the job's.
    let mut last: HashMap<JobId, (u64, u32, SystemTime)> = HashMap::new();
    for (n, deferred) in &deferrals {
        let entry = last
            .entry(deferred.job_id.clone())
            .or_insert((0, 0, SystemTime::UNIX_EPOCH));
        if deferred.revision > entry.0 {
            *entry = (deferred.revision, *n, deferred.due);
        }
    }
    eventually(Duration::from_secs(10), "every job ran", || async {
        let ran = runs.lock().unwrap().len();
        (ran >= last.len() && queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    assert!(runs.len() <= 3, "{} runs: {runs:?}", runs.len());
    assert_eq!(runs.len(), last.len(), "a job ran twice: {runs:?}");
    for (job, n, started) in &runs {
        let (_, latest, deadline) = last[job];
        assert_eq!(*n, latest, "job {job} ran with edit {n}, not the latest {latest}");
        let late = started
            .duration_since(deadline)
            .unwrap_or_else(|early| panic!("job {job} ran {:?} before its deadline", early.duration()));
        assert!(late <= 60 * MS, "job {job} ran {late:?} after its deadline");
    }
    // No run before max_wait: the burst never paused for a period.
    let first_request = deferrals[0].1.due - debounce.period;
    let earliest = runs.iter().map(|(.., started)| *started).min().unwrap();
    assert!(
        earliest.duration_since(first_request).unwrap() + 5 * MS >= debounce.max_wait,
        "ran before the burst's max_wait"
    );
}

/// A burst that pauses runs one period after its last request: three requests, then quiet.
async fn a_burst_runs_one_period_after_its_last_request<S: Store>(store: S) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "reindex").unwrap();
    let debounce = Debounce::new(100 * MS, 5_000 * MS).unwrap();
    let service = DebounceLayer::new(
        queue.clone(),
        |e: &Edit| Some(format!("doc:{}", e.document)),
        debounce,
    )
    .layer(service_fn(|_: Edit| async {
        Ok::<_, std::convert::Infallible>(())
    }));
    let mut told = Vec::new();
    for n in 0..3 {
        let before = store.now().await;
        let deferred = service.clone().oneshot(Edit { document: 2, n }).await.unwrap();
        let deferred = deferred.deferred().cloned().unwrap();
        let after = store.now().await;
        // Due a period after this request, by the store's clock.
        assert!(
            deferred.due + MS >= before + debounce.period && deferred.due <= after + debounce.period + MS,
            "{deferred:?}"
        );
        told.push(deferred);
        tokio::time::sleep(20 * MS).await;
    }
    assert!(told.iter().all(|d| d.job_id == told[0].job_id));
    assert_eq!(told[2].revision, 3);
    let job = queue.operator().job(&told[0].job_id).await.unwrap().unwrap();
    assert_eq!(job.envelope.unwrap().unwrap().payload.n, 2);
    // Another document has a burst of its own; requests without a key are not debounced.
    let other = service.clone().oneshot(Edit { document: 3, n: 0 }).await.unwrap();
    assert_ne!(other.deferred().unwrap().job_id, told[0].job_id);
    let plain = DebounceLayer::new(queue.clone(), |_: &Edit| None::<String>, debounce).layer(service_fn(
        |e: Edit| async move { Ok::<_, std::convert::Infallible>(e.n) },
    ));
    assert_eq!(
        plain.oneshot(Edit { document: 2, n: 9 }).await.unwrap().done(),
        Some(9)
    );
}

for_each_store!(
    a_continuous_burst_runs_at_most_three_times_at_its_deadlines_with_the_latest,
    a_burst_runs_one_period_after_its_last_request,
);
