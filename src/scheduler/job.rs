//! One claimed job: re-inject it into the service stack with its lease renewed; a handled job goes
//! to the acker, a failed one is settled here.

use std::fmt::Display;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::Service;
use tracing::Instrument;

use super::acker::Acker;
use super::report::{JobEnd, SchedulerReport};
use super::settle::{Ran, finish, hand_back, settle};
use crate::backoff::Backoff;
use crate::guard::{CurrentJob, JobSlot, RunSignals, run_for_job};
use crate::guard::{Error, JobAfterError, Outcome};
use crate::metric_names::QueueMetrics;
use crate::queue::QueueStore;
use crate::queue::{ClaimedJob, Codec, DelayQueue, Hold, JobId, QueueName};
use crate::renewal::{Renewal, while_valid};

/// The services a scheduler runs jobs through: a [`LockService`](crate::LockService) stack, whose
/// outcome and error tell a handled job from a deferred, locked or failed one.
///
/// Implemented for every service of the right shape; it only names the bounds once.
pub trait JobService<T>:
    Service<T, Response = Outcome<Self::Output>, Error = Error<Self::Failure>, Future: Send>
    + Clone
    + Send
    + 'static
{
    /// The handler's response.
    type Output: Send + 'static;
    /// The handler's error.
    type Failure: Display + Send + 'static;
}

impl<S, T, R, E> JobService<T> for S
where
    S: Service<T, Response = Outcome<R>, Error = Error<E>> + Clone + Send + 'static,
    S::Future: Send,
    R: Send + 'static,
    E: Display + Send + 'static,
{
    type Output = R;
    type Failure = E;
}

/// What a scheduler's jobs need beyond themselves and the service: made once per scheduler,
/// shared by its jobs (one `Arc` each, where a copy per job cost a dozen reference counts and
/// its bytes in every job's task).
pub(super) struct JobRun<T, St, Enc> {
    pub(super) queue: DelayQueue<T, St, Enc>,
    pub(super) lease_ttl: Duration,
    /// How long one attempt may run before it fails as timed out.
    pub(super) time_limit: Duration,
    pub(super) error_backoff: Backoff,
    /// Store failures met by this scheduler's jobs in a row: the backoff of a job put back
    /// for one grows with it.
    pub(super) store_failures: Arc<AtomicU32>,
    /// Cancelled when the shutdown grace ran out: give the job back unfinished.
    pub(super) abandon: CancellationToken,
    pub(super) metrics: QueueMetrics,
    pub(super) acker: Acker,
    /// How the jobs that did not go to the acker ended, counted by their own tasks.
    pub(super) ends: Mutex<SchedulerReport>,
}

impl<T, St, Enc> JobRun<T, St, Enc>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    St: QueueStore,
    Enc: Codec,
{
    /// The renewals of the leases of `jobs`, claimed by a request sent at `claimed_at`: armed
    /// together (one registration with the watchdog for the claim), each job's extended and
    /// lost on its own. A renewal needs the job's place and hold, not its envelope.
    pub(super) fn renewals(&self, jobs: &[ClaimedJob<T>], claimed_at: Instant) -> Vec<Renewal> {
        let places: Vec<(QueueName, JobId, Hold)> = jobs
            .iter()
            .map(|job| {
                (
                    job.lease.shard().clone(),
                    job.lease.id().clone(),
                    job.lease.hold(),
                )
            })
            .collect();
        let (store, lease_ttl) = (self.queue.store().clone(), self.lease_ttl);
        Renewal::start_together("job lease", lease_ttl, claimed_at, places.len(), move |job| {
            let (store, (shard, id, hold)) = (store.clone(), places[job].clone());
            async move { store.extend_lease(&shard, &id, hold, lease_ttl).await }
        })
    }

    /// How the jobs that did not go to the acker ended, so far.
    pub(super) fn ends_counted(&self) -> SchedulerReport {
        *self.ends.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `job` through `service` to its end, while `renewal` keeps its lease (see
    /// [`JobRun::renewals`]); `slot` is freed as soon as the handler returns, before the job is
    /// settled. A job handed to the acker is counted by it; any other end, in [`JobRun::ends`].
    ///
    /// A function returning the run, not an `async fn`: the run's future is the job's task,
    /// and an `async fn` around it kept a second copy of its state. With the settling's rare
    /// paths boxed and the jobs' shared part behind its `Arc`, a task is 1.6 KB (4.9 KB before).
    pub(super) fn run<S: JobService<T>>(
        self: Arc<Self>,
        mut service: S,
        job: ClaimedJob<T>,
        renewal: Renewal,
        slot: JobSlot,
    ) -> impl Future<Output = ()> + Send + use<S, T, St, Enc> {
        let ClaimedJob { envelope, due, lease } = job;
        let span = tracing::info_span!(
            "redefer.job",
            queue = %self.queue.name(),
            job_id = %lease.id(),
            attempt = lease.attempt(),
            traceparent = tracing::field::Empty,
        );
        // The run continues the trace of the request that stored the job.
        if let Some(trace) = &envelope.trace {
            span.record("traceparent", trace.traceparent());
            trace.continue_in(&span);
        }
        let lag = std::time::SystemTime::now()
            .duration_since(due)
            .unwrap_or_default();
        let context = CurrentJob {
            queue: self.queue.name().clone(),
            shard: lease.shard().clone(),
            id: lease.id().clone(),
            attempt: lease.attempt(),
            due,
            fence: lease.fence(),
        };
        let counted_by = Arc::clone(&self);
        let run = async move {
            let JobRun {
                queue,
                lease_ttl: _,
                time_limit,
                error_backoff,
                store_failures,
                abandon,
                metrics,
                acker,
                ends: _,
            } = &*self;
            let time_limit = *time_limit;
            tracing::debug!(lag_ms = lag.as_millis() as u64, "job started");
            metrics.reinjected.increment(1);
            metrics.lag.record(lag.as_secs_f64());
            let signals = RunSignals::in_slot(slot);
            let valid = renewal.lease();
            let call = while_valid(
                &valid,
                run_for_job(
                    context,
                    signals.clone(),
                    AssertUnwindSafe(async move {
                        std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
                        service.call(envelope.payload).await
                    })
                    .catch_unwind(),
                ),
            );
            // The time limit and the shutdown's abandon stop a handler still running; once it
            // has returned (its lock release may still be on its way), the run finishes and
            // the job is settled, so that a finished job never runs again.
            let timed_out = signals.unless_returned(tokio::time::sleep(time_limit));
            let abandoned = signals.unless_returned(abandon.cancelled());
            let ran = tokio::select! {
                // The lease first, and the handler polled only while the lease is surely ours:
                // a process resumed after a pause longer than the lease stops the handler before
                // it takes another step on a job another claimer may run now.
                biased;
                _ = renewal => {
                    tracing::warn!("job lease lost while the handler ran; the handler was stopped");
                    return Some(JobEnd::LeaseLost);
                }
                result = call => match result {
                    Err(_lost) => {
                        tracing::warn!("job lease ran out while the process was paused; the handler was stopped");
                        return Some(JobEnd::LeaseLost);
                    }
                    // The handler blocked its thread and returned after the renewal gave up:
                    // another claimer may run the job now.
                    Ok(_) if valid.lost().is_some() => {
                        tracing::warn!("job lease lost while the handler blocked its thread");
                        return Some(JobEnd::LeaseLost);
                    }
                    Ok(result) => match result {
                    // A duplicate of a request already taken: nothing more to do for this job.
                    Ok(Ok(Outcome::Done(_) | Outcome::Duplicate(_))) => Ran::Done,
                    Ok(Ok(Outcome::Deferred(deferred))) => {
                        // A strategy stored the request as a job of another queue: ours is done.
                        tracing::debug!(moved_to = %deferred.job_id, "request deferred elsewhere");
                        Ran::Done
                    }
                    Ok(Err(error)) => Ran::Erred(error.for_job(signals.lock_remaining())),
                    Err(panic) => Ran::Erred(JobAfterError::Failed(format!("handler panicked: {}", panic_message(&*panic)))),
                    },
                },
                () = timed_out => {
                    Ran::Erred(JobAfterError::Failed(format!("timed out after {}", humantime::format_duration(time_limit))))
                }
                () = abandoned => return Some(Box::pin(hand_back(queue, &lease)).await),
            };
            // The handler is done: another job may run while this one is settled.
            signals.free_slot();
            match &ran {
                Ran::Erred(JobAfterError::StoreFailed(error)) => {
                    metrics.store_errors.increment(1);
                    tracing::error!(%error, "the store failed under the job; it goes back without using an attempt");
                }
                _ => store_failures.store(0, Ordering::Relaxed),
            }
            // A handled job is acknowledged in a batch with others, by the acker, which counts
            // how it ends; a failed job is settled here, retried until its lease runs out: as
            // its renewal last confirmed it (a job that ran past its first lease has it
            // renewed), not as it was claimed.
            let lease_deadline = valid.valid_until();
            let lease = match ran {
                Ran::Done => match acker.ack(lease, lease_deadline) {
                    Ok(()) => return None,
                    Err(lease) => lease,
                },
                Ran::Erred(_) => lease,
            };
            let postpone_by = error_backoff.delay(store_failures.fetch_add(1, Ordering::Relaxed), &mut rand::rng());
            let end = Box::pin(settle(queue, &lease, ran, postpone_by, lease_deadline, error_backoff)).await;
            Some(finish(metrics, end))
        }
        .instrument(span);
        async move {
            if let Some(end) = run.await {
                counted_by
                    .ends
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .record(end);
            }
        }
    }
}

/// The message of a panic payload, when it has one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-text panic payload")
}
