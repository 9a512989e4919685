//! Settling a job after its run: acknowledged, retried, buried, put back to wait or given
//! back, retried against a failing store until its lease would run out.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::report::JobEnd;
use crate::backoff::Backoff;
use crate::guard::JobAfterError;
use crate::metric_names::QueueMetrics;
use crate::queue::QueueStore;
use crate::queue::{AfterFailure, Codec, DelayQueue, JobId, Lease, QueueError, RawJobState};

/// How a run of the service ended, before settling.
pub(super) enum Ran {
    /// Handled, or deferred to another queue: the job is acknowledged.
    Done,
    /// An error, a panic or the time limit: what that asks of the queue. A failed attempt is
    /// counted, and retried with the queue's backoff or buried after the last; a store that
    /// failed, a held or closed key and a slot not yet open use no attempt.
    Erred(JobAfterError),
}

/// Acks or fails the job, retrying a failing store until the lease would run out: after that,
/// the job is delivered again anyway (at-least-once).
pub(super) async fn settle<T, St, Enc>(
    queue: &DelayQueue<T, St, Enc>,
    lease: &Lease,
    ran: Ran,
    postpone_by: Duration,
    lease_deadline: Instant,
    error_backoff: &Backoff,
) -> JobEnd
where
    T: Serialize + DeserializeOwned,
    St: QueueStore,
    Enc: Codec,
{
    let mut failures = 0;
    loop {
        let settled: Result<JobEnd, QueueError> = match &ran {
            Ran::Done => queue
                .ack(lease)
                .await
                .map(|acked| if acked { JobEnd::Acked } else { JobEnd::LeaseLost }),
            Ran::Erred(JobAfterError::Failed(reason)) => queue.fail(lease, reason).await.map(|after| {
                if let AfterFailure::Retrying { attempt, .. } = after {
                    tracing::debug!(%reason, next_attempt = attempt, "job failed; retrying");
                }
                end_after(after, JobEnd::Retrying)
            }),
            Ran::Erred(JobAfterError::WaitsInLine {
                key,
                retry_after,
                lock_remaining,
            }) => queue
                .wait_for_lock(lease, key, *retry_after, *lock_remaining)
                .await
                .map(|after| {
                    if let AfterFailure::Retrying { due, .. } = after {
                        tracing::debug!(%key, ?due, "lock held: the job waits in line");
                    }
                    end_after(after, JobEnd::Waiting)
                }),
            Ran::Erred(JobAfterError::WaitsForSlot { key, opens_in }) => {
                queue.wait_for_slot(lease, key, *opens_in).await.map(|after| {
                    if let AfterFailure::Retrying { due, .. } = after {
                        tracing::debug!(%key, ?due, "over the rate: the job waits for its slot");
                    }
                    end_after(after, JobEnd::Waiting)
                })
            }
            Ran::Erred(JobAfterError::StoreFailed(_)) => {
                queue.postpone(lease, postpone_by).await.map(|back| {
                    if back {
                        JobEnd::Postponed
                    } else {
                        JobEnd::LeaseLost
                    }
                })
            }
        };
        match settled {
            Ok(end) => {
                if end == JobEnd::LeaseLost {
                    say_why_the_lease_was_lost(queue, lease.id()).await;
                }
                return end;
            }
            Err(error) => {
                let pause = error_backoff.delay(failures, &mut rand::rng());
                failures = failures.saturating_add(1);
                if Instant::now() + pause >= lease_deadline {
                    tracing::warn!(%error, "cannot settle the job; it is delivered again after its lease");
                    return JobEnd::Unsettled;
                }
                tracing::debug!(%error, "cannot settle the job yet; retrying");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// How a job ended that was put back (`back`: retrying or waiting) or buried.
fn end_after(after: AfterFailure, back: JobEnd) -> JobEnd {
    match after {
        AfterFailure::Retrying { .. } => back,
        AfterFailure::Buried { reason } => {
            tracing::warn!(%reason, "job buried");
            JobEnd::Buried
        }
        AfterFailure::LeaseLost => JobEnd::LeaseLost,
    }
}

/// Logs why a job could not be settled under its lease, from where the job is now (one more
/// read, on this rare path): another claimer has it, it was settled or deleted meanwhile, or
/// its record is gone with Redis's data.
pub(super) async fn say_why_the_lease_was_lost<T, St, Enc>(queue: &DelayQueue<T, St, Enc>, id: &JobId)
where
    T: Serialize + DeserializeOwned,
    St: QueueStore,
    Enc: Codec,
{
    match queue.read_job(id).await.map(|job| job.map(|job| job.state)) {
        Ok(Some(RawJobState::InFlight { .. })) => {
            tracing::warn!("job lease ran out before it was settled; another claimer has the job")
        }
        Ok(Some(RawJobState::Delayed { .. })) => {
            tracing::warn!("job lease ran out before it was settled; the job waits to run again")
        }
        Ok(Some(state @ (RawJobState::Dead { .. } | RawJobState::Done { .. }))) => {
            tracing::warn!(
                ?state,
                "the job was settled by another claimer, or an operator, before this run"
            )
        }
        Ok(None | Some(RawJobState::Missing)) => tracing::warn!(
            "the job's record is gone (deleted by an operator, or lost with Redis's data): nothing to settle"
        ),
        Err(error) => {
            tracing::warn!(%error, "the job could not be settled under its lease, and cannot be read")
        }
    }
}

/// Counts how a job ended.
pub(super) fn finish(metrics: &QueueMetrics, end: JobEnd) -> JobEnd {
    match end {
        JobEnd::Acked => metrics.acked.increment(1),
        JobEnd::Retrying => metrics.retried.increment(1),
        JobEnd::Buried => metrics.buried.increment(1),
        JobEnd::Postponed => metrics.postponed.increment(1),
        JobEnd::Waiting => metrics.lock_waits.increment(1),
        _ => {}
    }
    end
}

/// Gives a claimed job back to the queue, due now, for another claimer (a scheduler shutting
/// down): how its run ended.
pub(super) async fn hand_back<T, St, Enc>(queue: &DelayQueue<T, St, Enc>, lease: &Lease) -> JobEnd
where
    T: Serialize + DeserializeOwned,
    St: QueueStore,
    Enc: Codec,
{
    match queue.release(lease).await {
        Ok(true) => JobEnd::Returned,
        Ok(false) => JobEnd::LeaseLost,
        Err(error) => {
            tracing::warn!(%error, id = %lease.id(), "cannot give the job back; it returns after its lease");
            JobEnd::Unsettled
        }
    }
}
