//! The claim loop: claim due jobs while there are free slots, sleep until the next is due.
//!
//! A slot is a handler running: it is taken when the job is claimed and freed when the handler
//! returns, while the job's ack goes on in the background (in a batch with others, and on its
//! own should the batch fail). So a claim is never held back by acks on their way, and it is
//! sent while the jobs of the previous claim still run.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::acker::Acker;
use super::job::{JobRun, JobService};
use super::report::SchedulerReport;
use super::settle::hand_back;
use super::{Scheduler, SchedulerOptions};
use crate::guard::JobSlot;
use crate::metric_names::QueueMetrics;
use crate::queue::Codec;
use crate::queue::QueueStore;

/// How often a running scheduler puts its queue in the store's registry again.
const REGISTER_EVERY: Duration = Duration::from_secs(10);

impl<S, T, St, Enc> Scheduler<S, T, St, Enc>
where
    S: JobService<T>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: QueueStore,
    Enc: Codec,
{
    /// Runs until `stop` is cancelled, then shuts down gracefully.
    pub(super) async fn run(self, stop: CancellationToken) -> SchedulerReport {
        let Scheduler {
            queue,
            service,
            options,
        } = self;
        let SchedulerOptions {
            concurrency,
            batch,
            lease,
            time_limit,
            max_idle,
            shutdown_grace,
            error_backoff,
            stats_every,
        } = options;
        let metrics = QueueMetrics::new(queue.name());
        let (acker, acker_task) = Acker::start(queue.clone(), metrics.clone(), error_backoff);
        let mut stats_due = Instant::now();
        let mut registered_again = Instant::now() + REGISTER_EVERY;
        let slots = Arc::new(Semaphore::new(concurrency.clamp(1, Semaphore::MAX_PERMITS)));
        // The places for jobs that wait for their keys out of their slots (`JobSlot`).
        let places = Arc::new(Semaphore::new(
            (slots.available_permits() * WAITING_PLACES_PER_SLOT).min(Semaphore::MAX_PERMITS),
        ));
        let abandon = CancellationToken::new();
        // Dropped before its end (the future of `run_until` dropped), the scheduler gives the
        // jobs still running back to the queue, as at the end of its shutdown's grace.
        let _abandon_if_dropped = abandon.clone().drop_guard();
        let jobs = Arc::new(JobRun {
            queue: queue.clone(),
            lease_ttl: lease,
            time_limit,
            error_backoff,
            store_failures: Arc::new(AtomicU32::new(0)),
            abandon: abandon.clone(),
            metrics: metrics.clone(),
            acker,
            ends: Mutex::new(SchedulerReport::default()),
        });
        // The job tasks, tracked to be awaited at shutdown: a job's end is counted by its task
        // (`JobRun::ends`), so nothing is joined per job: a `JoinSet`'s entry, join and handle
        // were 4% of a drained job's client instructions (BENCHMARKS.md, issue 51).
        let running = TaskTracker::new();
        let mut report = SchedulerReport::default();
        let mut wakeups = queue.wakeups();
        // The counts the stats tick reads, through the operator's handle made once.
        let operator = queue.operator();
        let mut failures = 0;
        queue.register_as_scheduler().await;
        tracing::info!(queue = %queue.name(), concurrency, "scheduler started");

        // A claim asks for at least three quarters of the slots a batch can fill, so that a
        // quarter still runs while it is on its way; fewer only when no slot frees within the
        // window.
        let gather = min_claim(concurrency, batch);
        loop {
            if !stats_every.is_zero() && Instant::now() >= stats_due {
                stats_due = Instant::now() + stats_every;
                match operator.stats().await {
                    Ok(stats) => metrics.record_stats(stats),
                    Err(error) => tracing::debug!(%error, "cannot count the queue's jobs"),
                }
            }
            // The registry may have gone with Redis's data (a restart without persistence): a
            // queue being drained must not look unknown to the operators' tools, whether or
            // not its gauges are wanted.
            if Instant::now() >= registered_again {
                registered_again = Instant::now() + REGISTER_EVERY;
                queue.register_as_scheduler().await;
            }
            let mut taken = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                taken = free_slots(&slots, gather, batch) => taken,
            };
            let claimed_at = Instant::now();
            // A claim on its way is awaited even when the scheduler is stopping: the store may
            // have taken its jobs already (dropping the call does not undo the script), so they
            // are handed back here rather than left in flight until their lease runs out.
            let claimed = queue.claim(taken.num_permits(), lease).await;
            if stop.is_cancelled() {
                for job in claimed.map(|claimed| claimed.jobs).unwrap_or_default() {
                    report.record(hand_back(&queue, &job.lease).await);
                }
                break;
            }
            let pause = match claimed {
                Ok(claimed) => {
                    failures = 0;
                    let renewals = jobs.renewals(&claimed.jobs, claimed_at);
                    for (job, renewal) in claimed.jobs.into_iter().zip(renewals) {
                        // A claim returns no more jobs than it was asked for; should a store
                        // ever return more, the extra jobs wait for slots like any other.
                        let slot = match taken.split(1) {
                            Some(slot) => slot,
                            None => match Arc::clone(&slots).acquire_owned().await {
                                Ok(slot) => slot,
                                Err(_) => unreachable!("the scheduler's semaphore is never closed"),
                            },
                        };
                        // Boxed: the task then holds a pointer, where tokio copied the run's
                        // 1.6 KB into its task, then each stage of it over the same bytes.
                        running.spawn(Box::pin(Arc::clone(&jobs).run(
                            service.clone(),
                            job,
                            renewal,
                            JobSlot::new(slot, Arc::clone(&places), stop.clone()),
                        )));
                    }
                    claimed.next_in.map_or(max_idle, |next| next.min(max_idle))
                }
                Err(error) => {
                    let pause = error_backoff.delay(failures, &mut rand::rng());
                    failures = failures.saturating_add(1);
                    tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "cannot claim jobs");
                    pause
                }
            };
            // The slots no job came for are free again before the loop sleeps.
            drop(taken);
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = wakeups.next() => {}
                _ = sleep(pause) => {}
            }
        }

        tracing::info!(queue = %queue.name(), running = running.len(), "scheduler stopping");
        running.close();
        if timeout(shutdown_grace, running.wait()).await.is_err() {
            abandon.cancel();
            running.wait().await;
        }
        // Every job task is done, so the jobs' shared part holds the last sender: the acker
        // finishes its batch and stops, with how the acks it was given ended.
        report.add(jobs.ends_counted());
        drop(jobs);
        match acker_task.await {
            Ok(acks) => report.add(acks),
            Err(error) => tracing::warn!(%error, "the acker stopped before counting its acks"),
        }
        tracing::info!(queue = %queue.name(), ?report, "scheduler stopped");
        report
    }
}

/// How many jobs may wait for their keys out of their slots, per slot: with one place per
/// slot, 300 overlapping sets deferred on two schedulers of 64 kept their keys 0.74x as busy
/// as callers waiting in place (a job with no place goes back to the queue, and each of its
/// turns costs a claim and a run); with eight, 1.02x (each job waiting in place for up to 1 s
/// then; BENCHMARKS.md, "Deferred sets"). A waiting job costs its future and its share of a
/// lease; a scheduler holds at most nine times its concurrency in jobs, which a crash delays
/// by a lease.
const WAITING_PLACES_PER_SLOT: usize = 8;

/// How long a claim waits for enough slots to fill most of a batch before it takes what is free:
/// long enough for a burst of short handlers to return together, short against a claim's cost
/// when handlers are long and slots free one at a time.
const GATHER_WINDOW: Duration = Duration::from_millis(1);

/// The fewest slots a claim waits for (within [`GATHER_WINDOW`]): three quarters of what a
/// claim can fill. One claim per job would spend the claim's fixed cost on every job; a claim
/// for every slot would leave the handlers idle while it is on its way. A claim's fixed cost is
/// over a third of a job's Redis time at the batch sizes of a drain (about 70 µs per claim and
/// ack against 3 µs per job, scratch Redis): three quarters gave a drain about a tenth more jobs
/// per second and a tenth less Redis time per job than half (BENCHMARKS.md, issue 24).
fn min_claim(concurrency: usize, batch: usize) -> usize {
    (concurrency.min(batch) * 3 / 4).max(1)
}

/// Takes the free slots for the next claim, up to `batch`: as soon as `gather` are free, or
/// what is free (at least one) once [`GATHER_WINDOW`] has passed.
async fn free_slots(slots: &Arc<Semaphore>, gather: usize, batch: usize) -> OwnedSemaphorePermit {
    let gather = gather.min(batch) as u32;
    let mut taken = match timeout(GATHER_WINDOW, Arc::clone(slots).acquire_many_owned(gather)).await {
        Ok(Ok(taken)) => taken,
        // The window passed: any free slot will do. (The semaphore is never closed.)
        Err(_) | Ok(Err(_)) => match Arc::clone(slots).acquire_owned().await {
            Ok(one) => one,
            Err(_) => unreachable!("the scheduler's semaphore is never closed"),
        },
    };
    // Whatever else is free joins this claim, up to a batch.
    let more = (batch.saturating_sub(taken.num_permits())).min(slots.available_permits());
    if more > 0
        && let Ok(extra) = Arc::clone(slots).try_acquire_many_owned(more as u32)
    {
        taken.merge(extra);
    }
    taken
}
