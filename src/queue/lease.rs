//! What a claim hands out: each job with its lease, the claimer's hold on it until it is
//! settled or the lease runs out.

use std::time::{Duration, SystemTime};

use super::{Envelope, JobId, QueueName, RawClaim};
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
    pub(super) hold: Hold,
    pub(super) attempt: u32,
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
        FencingToken(self.hold.fence)
    }

    /// The claim's hold on the job, for the store's own operations ([`QueueCore`](super::QueueCore)).
    pub fn hold(&self) -> Hold {
        self.hold
    }
}

/// Which claim holds a claimed job, and the job's place in it: what a store's
/// [`ack`](super::QueueCore::ack), [`retry`](super::QueueCore::retry),
/// [`bury`](super::QueueCore::bury) and [`extend_lease`](super::QueueCore::extend_lease) act
/// with. A claim's jobs share one lease: a hold acts while that lease holds its job, and on
/// nothing once the job was settled or the lease ran out.
///
/// ```
/// use std::time::SystemTime;
///
/// use redefer::LockToken;
/// use redefer::queue::{Hold, JobId, RawClaim};
///
/// let token = LockToken::random();
/// // The second job of a claim whose first job got fencing token 41.
/// let job = RawClaim {
///     id: JobId::new("order-42").unwrap(),
///     due: SystemTime::now(),
///     envelope: Vec::new(),
///     fence: 42,
///     claim: 41,
/// };
/// let hold = Hold::of(token, &job);
/// assert_eq!((hold.claim, hold.fence), (41, 42));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hold {
    /// The lease token the claim was made with.
    pub token: LockToken,
    /// The claim: the job fencing token of its first job ([`RawClaim::claim`]).
    pub claim: u64,
    /// The job's own fencing token ([`RawClaim::fence`]), which places it in its claim.
    pub fence: u64,
}

impl Hold {
    /// The hold of the claim made with `token` on `job`, one of its jobs.
    pub fn of(token: LockToken, job: &RawClaim) -> Self {
        Hold {
            token,
            claim: job.claim,
            fence: job.fence,
        }
    }

    /// The job's place in its claim, from 1 (the claim's first job); 0 for fences that place
    /// it nowhere, which no lease holds.
    pub(crate) fn position(&self) -> u64 {
        self.fence
            .checked_sub(self.claim)
            .map_or(0, |after_first| after_first.saturating_add(1))
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
