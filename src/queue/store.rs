//! What producers and workers need of a queue's store: the [`QueueCore`] operations, on
//! envelopes as opaque bytes, and their vocabulary; and [`QueueStore`], everything a store
//! offers a queue (the core and the operator's capabilities).

use std::future::Future;
use std::time::{Duration, SystemTime};

use super::operator::{ControlQueue, InspectQueue, QueueRegistry};
use super::{Counters, Hold, JobGroup, JobId, QueueName, Retention, Wakeups};
use crate::error::StoreError;
use crate::sealed::Sealed;
use crate::token::LockToken;

/// When a pushed job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// This long from now, by the store's clock.
    In(Duration),
    /// At this time.
    At(SystemTime),
}

/// One claimed job, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawClaim {
    /// The job's id.
    pub id: JobId,
    /// When it was due, by the store's clock.
    pub due: SystemTime,
    /// Its envelope bytes.
    pub envelope: Vec<u8>,
    /// The job fencing token of this claim: higher than any earlier claim's on the queue.
    pub fence: u64,
    /// The claim it was taken by: the fencing token of that claim's first job. With the lease
    /// token the claim was made with, it makes the job's [`Hold`].
    pub claim: u64,
}

/// What a claim buries instead of handing out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimLimits {
    /// The largest envelope, in bytes.
    pub max_envelope: usize,
    /// After this many lease expiries a job is buried (0: never).
    pub max_expiries: u32,
}

/// The result of one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimBatch {
    /// The jobs claimed, in due order; empty when none is due.
    pub jobs: Vec<RawClaim>,
    /// How long until the next job is due or the next lease runs out, by the store's clock;
    /// `None` when the queue is empty, zero when more jobs are due now.
    pub next_in: Option<Duration>,
}

/// What a cancellation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The job was waiting or dead, and is deleted.
    Deleted,
    /// There is no such job.
    NotFound,
    /// A scheduler is handling it: it cannot be cancelled now.
    InFlight,
}

/// The delay queue's core: the atomic operations producers, schedulers and strategies use
/// (push, claim, ack, retry, bury, extend, cancel, register, wake-ups). Envelopes are opaque
/// bytes here; [`DelayQueue`](crate::queue::DelayQueue) encodes and decodes them. What an
/// operator reads and changes is apart, one capability a trait: [`InspectQueue`],
/// [`ControlQueue`], [`QueueRegistry`].
///
/// Semantics every implementation keeps, pinned by the conformance tests:
/// - a job is in exactly one of: waiting, in flight, dead;
/// - `claim` hands each due job to one claimer at a time, with that claimer's lease token;
///   a job whose lease ran out becomes due again (at-least-once delivery after a crash);
/// - a claim's jobs share one lease: extending it for one job extends it for all, and when it
///   runs out exactly the jobs it still holds (not acked, retried or buried) become due again;
/// - `ack`, `retry`, `bury` and `extend_lease` act only with the job's current [`Hold`];
/// - due times and leases follow the store's clock, not the caller's.
///
/// Sealed: the crate's two stores implement it, and operations can be added without breaking
/// anyone (see [`store`](crate::store)). Its methods are public, for tools of your own.
pub trait QueueCore: Sealed + Clone + Send + Sync + 'static {
    /// Stores new jobs (at most [`MAX_PAGE`](super::MAX_PAGE); one for a single push), all due
    /// at `due`, in one round trip; for each, in order, whether it was stored (`false`: its id
    /// was taken, before or earlier in the batch: nothing of it is written). The due time, by
    /// the store's clock.
    fn push_many(
        &self,
        queue: &QueueName,
        jobs: &[(JobId, Vec<u8>)],
        due: Due,
    ) -> impl Future<Output = Result<(SystemTime, Vec<bool>), StoreError>> + Send {
        self.push_many_in_group(queue, jobs, due, None)
    }

    /// [`push_many`](Self::push_many), the jobs in `group` when one is given (see
    /// [`JobGroup`]).
    fn push_many_in_group(
        &self,
        queue: &QueueName,
        jobs: &[(JobId, Vec<u8>)],
        due: Due,
        group: Option<&JobGroup>,
    ) -> impl Future<Output = Result<(SystemTime, Vec<bool>), StoreError>> + Send;

    /// Claims up to `max` due jobs for `lease` (at most [`MAX_LEASE`](super::MAX_LEASE)),
    /// first making due again the jobs whose lease ran out (or whose deadline is beyond
    /// `MAX_LEASE`), or burying those whose lease ran out `max_expiries` times (0: never). A due
    /// entry that cannot be a job (an invalid id, no envelope, an envelope over `max_envelope`
    /// bytes) is buried alone with the reason instead of claimed: it never fails the batch.
    /// Each claimed job gets a job fencing token higher than any before on the queue.
    fn claim(
        &self,
        queue: &QueueName,
        max: usize,
        lease: Duration,
        token: LockToken,
        limits: ClaimLimits,
        counters: Counters,
    ) -> impl Future<Output = Result<ClaimBatch, StoreError>> + Send;

    /// Deletes claimed jobs (at most [`MAX_PAGE`](super::MAX_PAGE)), each only while its claim's
    /// lease still holds it (`hold`: the claim's reply, with the lease token it was made with);
    /// for each, whether it was deleted. One round trip for all: a scheduler acks the
    /// jobs that finished together. With a `retention`, the finished jobs are kept in the done
    /// set, and the oldest beyond its count or age forgotten.
    fn ack(
        &self,
        queue: &QueueName,
        jobs: &[(&JobId, Hold)],
        retention: Option<Retention>,
        counters: Counters,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Puts a claimed job back to wait `delay`, replacing its envelope when one is given; the
    /// new due time, or `None` when its claim's lease no longer holds it.
    fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        envelope: Option<Vec<u8>>,
        delay: Duration,
        counters: Counters,
    ) -> impl Future<Output = Result<Option<SystemTime>, StoreError>> + Send;

    /// Moves a claimed job to the dead-letter set with `reason`, replacing its envelope when one
    /// is given; `false` when its claim's lease no longer holds it.
    fn bury(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        reason: &str,
        envelope: Option<Vec<u8>>,
        counters: Counters,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Moves a waiting job to the dead-letter set with `reason` (a full line dropped it to make
    /// room for a newer request); `false` when it is not waiting.
    fn bury_waiting(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: &str,
        counters: Counters,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Extends the lease of a claimed job's claim to `lease` from now, for every job it holds;
    /// `false` when it no longer holds this one.
    fn extend_lease(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes a waiting or dead job.
    fn cancel(
        &self,
        queue: &QueueName,
        id: &JobId,
    ) -> impl Future<Output = Result<Cancelled, StoreError>> + Send;

    /// Adds `queue`, spread over `shards` physical queues, to the store's registry of queues
    /// (under its prefix), which operators' tools read to tell a queue from a mistyped name
    /// and to find its shards; with `counters` (a scheduler's, which is what counts), whether
    /// its activity is counted. Idempotent.
    fn register(
        &self,
        queue: &QueueName,
        shards: usize,
        counters: Option<Counters>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Wake-ups for a scheduler of `queue`.
    fn wakeups(&self, queue: &QueueName) -> Wakeups;
}

/// Everything a store offers a queue: its [core](QueueCore) and every operator capability
/// ([`InspectQueue`], [`ControlQueue`], [`QueueRegistry`]). Implemented for every store that
/// has them all (both of the crate's stores); the bound for code that uses a queue whole, as
/// the dashboard and the `redefer` command do.
pub trait QueueStore: QueueCore + InspectQueue + ControlQueue + QueueRegistry {}

impl<St: QueueCore + InspectQueue + ControlQueue + QueueRegistry> QueueStore for St {}
