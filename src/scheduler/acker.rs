//! Acknowledges handled jobs in batches, and counts how their acks end.
//!
//! Whatever finished while the previous batch was on its way goes into the next one: under load
//! an ack costs a share of one round trip and one script call; when jobs finish one at a time,
//! each is acknowledged at once, with no timer adding latency.
//!
//! A job's task hands its lease over and ends: the acker settles the job from there (a job whose
//! ack a failed batch did not carry is acknowledged on its own, retried until its lease would
//! run out). Nothing the task does after its handler returned depends on the ack's answer, and
//! waiting for it cost each job a channel and a second wake-up of its task.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use super::report::{JobEnd, SchedulerReport};
use super::settle::{Ran, finish, say_why_the_lease_was_lost, settle};
use crate::backoff::Backoff;
use crate::metric_names::QueueMetrics;
use crate::queue::QueueStore;
use crate::queue::{Codec, DelayQueue, Lease};

/// The most acks one batch carries.
const MAX_BATCH: usize = 256;

/// The span of a job whose ack went on alone, for its logs: named as the job's run is.
fn job_span<T, St, Enc>(queue: &DelayQueue<T, St, Enc>, lease: &Lease) -> tracing::Span {
    tracing::info_span!("redefer.job", queue = %queue.name(), job_id = %lease.id(), attempt = lease.attempt())
}

/// A handled job to acknowledge.
struct Handled {
    lease: Lease,
    /// When its lease runs out, unless renewed: an ack retried on its own gives up then.
    lease_deadline: Instant,
}

/// Sends acks to the batching task; clones share it. The task ends when every clone is gone,
/// with the count of how the acks it was given ended.
#[derive(Clone)]
pub(super) struct Acker {
    handled: mpsc::UnboundedSender<Handled>,
}

impl Acker {
    pub(super) fn start<T, St, Enc>(
        queue: DelayQueue<T, St, Enc>,
        metrics: QueueMetrics,
        error_backoff: Backoff,
    ) -> (Acker, JoinHandle<SchedulerReport>)
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        St: QueueStore,
        Enc: Codec,
    {
        let (handled, mut incoming) = mpsc::unbounded_channel::<Handled>();
        let queue_name = queue.name().clone();
        let task = tokio::spawn(async move {
            let mut report = SchedulerReport::default();
            // Acks that went on their own (a batch failed), and the reasons of refused ones.
            let mut alone: JoinSet<JobEnd> = JoinSet::new();
            while let Some(first) = incoming.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match incoming.try_recv() {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
                while let Some(end) = alone.try_join_next() {
                    report.record(end.unwrap_or(JobEnd::Unsettled));
                }
                let leases: Vec<&Lease> = batch.iter().map(|job| &job.lease).collect();
                match queue.ack_many(&leases).await {
                    Ok(acked) => {
                        for (job, acked) in batch.into_iter().zip(acked) {
                            if acked {
                                report.record(finish(&metrics, JobEnd::Acked));
                            } else {
                                let (queue, span) = (queue.clone(), job_span(&queue, &job.lease));
                                alone.spawn(
                                    async move {
                                        say_why_the_lease_was_lost(&queue, job.lease.id()).await;
                                        JobEnd::LeaseLost
                                    }
                                    .instrument(span),
                                );
                            }
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, jobs = batch.len(), "batched ack failed; each job acks on its own");
                        for Handled { lease, lease_deadline } in batch {
                            let span = job_span(&queue, &lease);
                            let (queue, metrics) = (queue.clone(), metrics.clone());
                            alone.spawn(
                                async move {
                                    // An ack postpones nothing: no delay to pass.
                                    let (ran, no_delay) = (Ran::Done, Duration::ZERO);
                                    let end =
                                        settle(&queue, &lease, ran, no_delay, lease_deadline, &error_backoff).await;
                                    finish(&metrics, end)
                                }
                                .instrument(span),
                            );
                        }
                    }
                }
            }
            while let Some(end) = alone.join_next().await {
                report.record(end.unwrap_or(JobEnd::Unsettled));
            }
            report
        }
        .instrument(tracing::info_span!("redefer.acker", queue = %queue_name)));
        (Acker { handled }, task)
    }

    /// Acknowledges the job of `lease` in the next batch, `lease_deadline` being when its lease
    /// runs out; the lease back when the acker has stopped (the caller then settles the job).
    pub(super) fn ack(&self, lease: Lease, lease_deadline: Instant) -> Result<(), Lease> {
        self.handled
            .send(Handled {
                lease,
                lease_deadline,
            })
            .map_err(|refused| refused.0.lease)
    }
}
