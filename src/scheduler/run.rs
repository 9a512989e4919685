//! The claim loop: claim due jobs while there are free slots, sleep until the next is due.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::acker::Acker;
use super::job::{JobRun, JobService};
use super::report::{JobEnd, SchedulerReport};
use super::{Scheduler, SchedulerOptions};
use crate::metric_names::QueueMetrics;
use crate::queue::Codec;
use crate::queue::QueueStore;

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
        let (acker, acker_task) = Acker::start(queue.clone());
        let mut stats_due = Instant::now();
        let slots = Arc::new(Semaphore::new(concurrency.clamp(1, Semaphore::MAX_PERMITS)));
        let abandon = CancellationToken::new();
        let store_failures = Arc::new(AtomicU32::new(0));
        let mut running = JoinSet::new();
        let mut report = SchedulerReport::default();
        let mut wakeups = queue.wakeups();
        let mut failures = 0;
        tracing::info!(queue = %queue.name(), concurrency, "scheduler started");

        loop {
            while let Some(ended) = running.try_join_next() {
                report.record(job_end(ended));
            }
            if !stats_every.is_zero() && Instant::now() >= stats_due {
                stats_due = Instant::now() + stats_every;
                match queue.stats().await {
                    Ok(stats) => metrics.record_stats(stats),
                    Err(error) => tracing::debug!(%error, "cannot count the queue's jobs"),
                }
            }
            let free = slots.available_permits().min(batch.max(1));
            if free == 0 {
                // Every slot is busy: wait for one (or the stop) before claiming more.
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    Some(ended) = running.join_next() => report.record(job_end(ended)),
                }
                continue;
            }
            let claimed_at = Instant::now();
            let claimed = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                claimed = queue.claim(free, lease) => claimed,
            };
            let pause = match claimed {
                Ok(claimed) => {
                    failures = 0;
                    for job in claimed.jobs {
                        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                            unreachable!(
                                "claimed no more jobs than free slots, and only this loop takes slots"
                            )
                        };
                        let run = JobRun {
                            queue: queue.clone(),
                            service: service.clone(),
                            lease_ttl: lease,
                            time_limit,
                            error_backoff,
                            store_failures: Arc::clone(&store_failures),
                            abandon: abandon.clone(),
                            metrics: metrics.clone(),
                            acker: acker.clone(),
                        };
                        running.spawn(async move {
                            let end = run.run(job, claimed_at).await;
                            drop(slot);
                            end
                        });
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
        let drain = async {
            while let Some(ended) = running.join_next().await {
                report.record(job_end(ended));
            }
        };
        if timeout(shutdown_grace, drain).await.is_err() {
            abandon.cancel();
            while let Some(ended) = running.join_next().await {
                report.record(job_end(ended));
            }
        }
        // Every job task is done, so this is the last sender: the acker finishes its batch and stops.
        drop(acker);
        let _ = acker_task.await;
        tracing::info!(queue = %queue.name(), ?report, "scheduler stopped");
        report
    }
}

/// A job task's end; a job task cannot panic (the handler's panics are caught inside it), so
/// a join error means the runtime is shutting down, and the job returns after its lease.
fn job_end(joined: Result<JobEnd, tokio::task::JoinError>) -> JobEnd {
    joined.unwrap_or(JobEnd::Unsettled)
}
