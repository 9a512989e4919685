//! What a claim hands out: each job with its lease, the claimer's hold on it until it is
//! settled or the lease runs out.

use std::time::{Duration, SystemTime};

use super::{Envelope, JobId, QueueName};
use crate::token::{FencingToken, LockToken};

/// A claimed job: its envelope, and the lease that settles it.
#[derive(Debug)]
pub struct ClaimedJob<T> {
    /// The decoded job.
    pub envelope: Envelope<T>,
    /// When it was due, by the store's clock.
    pub due: SystemTime,
    /// The claim on it: pass it to [`DelayQueue::ack`](super::DelayQueue::ack), [`fail`](super::DelayQueue::fail) and the rest.
    pub lease: Lease,
}

/// A claimer's hold on one job, until its lease runs out.
#[derive(Debug, Clone)]
pub struct Lease {
    pub(super) id: JobId,
    /// The physical queue the job lives on; a retry keeps it there.
    pub(super) shard: QueueName,
    pub(super) token: LockToken,
    pub(super) attempt: u32,
    pub(super) fence: FencingToken,
    /// The envelope as stored, to write the next attempt's from without a `T: Clone`.
    pub(super) stored: Vec<u8>,
}

impl Lease {
    /// The job's id.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The physical queue the job lives on: the queue's own name unless it is
    /// [sharded](super::DelayQueue::shards).
    pub fn shard(&self) -> &QueueName {
        &self.shard
    }

    /// How many attempts of the job failed before this one.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job fencing token of this claim: strictly higher than the token of any earlier
    /// claim of the same job (of any job of the queue, in fact). Passed to a downstream store
    /// with each write, it lets that store refuse the writes of a run whose lease ran out
    /// while a newer run holds the job, as the lock's [`FencingToken`] does for locks.
    pub fn fence(&self) -> FencingToken {
        self.fence
    }
}

/// The result of one claim.
#[derive(Debug)]
pub struct Claimed<T> {
    /// The claimed jobs that decoded, in due order. Jobs that did not decode are in the
    /// dead-letter set with the decode error as the reason.
    pub jobs: Vec<ClaimedJob<T>>,
    /// How long until the next job is due or the next lease runs out (store clock); `None`
    /// when the queue is empty.
    pub next_in: Option<Duration>,
}
