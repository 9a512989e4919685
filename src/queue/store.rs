//! What a delay queue needs of its store: the [`QueueStore`] operations, on envelopes as
//! opaque bytes, and their vocabulary.

use std::future::Future;
use std::time::{Duration, SystemTime};

use super::{Counters, JobId, MinuteActivity, QueueName, Retention, Wakeups};
use crate::error::StoreError;
use crate::lock::LockToken;
use crate::store::Sealed;

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

/// Where a job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawJobState {
    /// Waiting to become due.
    Delayed {
        /// When it becomes due.
        due: SystemTime,
    },
    /// Claimed by a scheduler.
    InFlight {
        /// When its lease runs out unless extended.
        lease_until: SystemTime,
    },
    /// In the dead-letter set.
    Dead {
        /// When it was buried.
        buried_at: SystemTime,
        /// Why.
        reason: Option<String>,
    },
    /// Finished, and kept by the queue's [`Retention`].
    Done {
        /// When it finished.
        finished_at: SystemTime,
    },
    /// Not in the queue.
    Missing,
}

impl RawJobState {
    /// Where the job is, in the words the command and the dashboard use: `waiting`,
    /// `in flight`, `dead`, `done`, or `not in the queue`.
    ///
    /// ```
    /// use redefer::queue::RawJobState;
    ///
    /// assert_eq!(RawJobState::Missing.place(), "not in the queue");
    /// ```
    pub fn place(&self) -> &'static str {
        match self {
            RawJobState::Delayed { .. } => "waiting",
            RawJobState::InFlight { .. } => "in flight",
            RawJobState::Dead { .. } => "dead",
            RawJobState::Done { .. } => "done",
            RawJobState::Missing => "not in the queue",
        }
    }
}

/// One job, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJob {
    /// Where it is.
    pub state: RawJobState,
    /// Its envelope bytes, if any.
    pub envelope: Option<Vec<u8>>,
}

/// One of a queue's sets of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobSet {
    /// Waiting to become due (or due and not yet claimed).
    Waiting,
    /// Claimed by a scheduler.
    InFlight,
    /// In the dead-letter set.
    Dead,
    /// Finished, and kept by the queue's [`Retention`].
    Done,
}

impl JobSet {
    /// Every set, in the order a job passes through them.
    pub const ALL: [JobSet; 4] = [JobSet::Waiting, JobSet::InFlight, JobSet::Dead, JobSet::Done];

    /// The set's name, as the CLI, the dashboard and the README spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobSet::Waiting => "waiting",
            JobSet::InFlight => "in_flight",
            JobSet::Dead => "dead",
            JobSet::Done => "done",
        }
    }

    /// What an entry's time is in this set.
    pub fn time_label(self) -> &'static str {
        match self {
            JobSet::Waiting => "due",
            JobSet::InFlight => "lease_deadline",
            JobSet::Dead => "buried_at",
            JobSet::Done => "finished_at",
        }
    }
}

impl std::str::FromStr for JobSet {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        // `in-flight` too: the spelling of 0.1's command.
        let name = if name == "in-flight" { "in_flight" } else { name };
        JobSet::ALL
            .into_iter()
            .find(|set| set.as_str() == name)
            .ok_or_else(|| format!("no set {name:?}: one of waiting, in_flight, dead, done"))
    }
}

/// Where a listing starts: just after this entry (the last of the previous page), in time
/// order with ties by id. Listing by cursor costs the same on every page, however deep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    /// The entry's time.
    pub at: SystemTime,
    /// The entry's id.
    pub id: String,
}

/// One entry of a listing, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedJob {
    /// The id as found: another client may have written one that is not a valid job id.
    pub id: String,
    /// When it is due (waiting), its lease runs out (in flight), it was buried (dead) or it
    /// finished (done): see [`JobSet::time_label`].
    pub at: SystemTime,
    /// Its envelope bytes, if any.
    pub envelope: Option<Vec<u8>>,
    /// Why it was buried (dead only).
    pub reason: Option<String>,
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

/// A queue as its registry knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RegisteredQueue {
    /// The queue's name.
    pub name: String,
    /// How many shards it has, as its application last said (1 for a queue registered before
    /// shard counts were).
    pub shards: usize,
    /// Whether its activity is counted, as its last scheduler to start said (`On` until one
    /// says otherwise).
    pub counters: Counters,
}

/// A queue's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    /// Jobs waiting, due or not.
    pub waiting: u64,
    /// Of those, the jobs due now.
    pub due: u64,
    /// Jobs claimed by a scheduler.
    pub in_flight: u64,
    /// Jobs in the dead-letter set.
    pub dead: u64,
    /// Finished jobs kept by the queue's [`Retention`].
    pub done: u64,
    /// Whether the queue is paused: its claims hand out nothing.
    pub paused: bool,
}

/// Atomic delay-queue operations. Envelopes are opaque bytes here; [`DelayQueue`](crate::queue::DelayQueue)
/// encodes and decodes them.
///
/// Semantics every implementation keeps, pinned by the conformance tests:
/// - a job is in exactly one of: waiting, in flight, dead;
/// - `claim` hands each due job to one claimer at a time, with that claimer's lease token;
///   a job whose lease ran out becomes due again (at-least-once delivery after a crash);
/// - `ack`, `retry`, `bury` and `extend_lease` act only with the job's current lease token;
/// - due times and leases follow the store's clock, not the caller's.
///
/// Sealed: the crate's two stores implement it, and operations can be added without breaking
/// anyone (see [`store`](crate::store)). Its methods are public, for tools of your own.
pub trait QueueStore: Sealed + Clone + Send + Sync + 'static {
    /// Stores new jobs (at most [`MAX_PAGE`](super::MAX_PAGE); one for a single push), all due
    /// at `due`, in one round trip; for each, in order, whether it was stored (`false`: its id
    /// was taken, before or earlier in the batch: nothing of it is written). The due time, by
    /// the store's clock.
    fn push_many(
        &self,
        queue: &QueueName,
        jobs: &[(JobId, Vec<u8>)],
        due: Due,
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

    /// Deletes claimed jobs (at most [`MAX_PAGE`](super::MAX_PAGE)), each only while its lease is the given
    /// token's; for each, whether it was deleted. One round trip for all: a scheduler acks the
    /// jobs that finished together. With a `retention`, the finished jobs are kept in the done
    /// set, and the oldest beyond its count or age forgotten.
    fn ack(
        &self,
        queue: &QueueName,
        jobs: &[(&JobId, LockToken)],
        retention: Option<Retention>,
        counters: Counters,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Puts a claimed job back to wait `delay`, replacing its envelope when one is given; the
    /// new due time, or `None` when the lease is no longer `token`'s.
    fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: LockToken,
        envelope: Option<Vec<u8>>,
        delay: Duration,
        counters: Counters,
    ) -> impl Future<Output = Result<Option<SystemTime>, StoreError>> + Send;

    /// Moves a claimed job to the dead-letter set with `reason`, replacing its envelope when one
    /// is given; `false` when the lease is no longer `token`'s.
    fn bury(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: LockToken,
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

    /// Extends a claimed job's lease to `lease` from now; `false` when it is no longer `token`'s.
    fn extend_lease(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: LockToken,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes a waiting or dead job.
    fn cancel(
        &self,
        queue: &QueueName,
        id: &JobId,
    ) -> impl Future<Output = Result<Cancelled, StoreError>> + Send;

    /// Reads one job.
    fn inspect(
        &self,
        queue: &QueueName,
        id: &JobId,
    ) -> impl Future<Output = Result<RawJob, StoreError>> + Send;

    /// Counts the queue's jobs.
    fn stats(&self, queue: &QueueName) -> impl Future<Output = Result<QueueStats, StoreError>> + Send;

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

    /// The queues in the registry, by name.
    fn registered(&self) -> impl Future<Output = Result<Vec<RegisteredQueue>, StoreError>> + Send;

    /// Up to `limit` (at most [`MAX_PAGE`](super::MAX_PAGE)) entries of `set` in time order
    /// (ties by id), from the first or from just `after` an entry.
    fn list(
        &self,
        queue: &QueueName,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ListedJob>, StoreError>> + Send;

    /// Pauses (`true`) or resumes (`false`) the queue: a paused queue's claims hand out
    /// nothing, and resuming wakes its schedulers. Whether it was paused before.
    fn pause(&self, queue: &QueueName, paused: bool)
    -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Makes the waiting job `id` due now; `false` when it is not waiting.
    fn run_now(&self, queue: &QueueName, id: &JobId)
    -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The queue's activity per minute over the last hour, oldest first: the claims, acks,
    /// failures and burials the store counted as they happened.
    fn activity(
        &self,
        queue: &QueueName,
    ) -> impl Future<Output = Result<Vec<MinuteActivity>, StoreError>> + Send;

    /// Moves the dead jobs among `ids` (at most [`MAX_PAGE`](super::MAX_PAGE)) back to wait, due now; how many moved.
    fn requeue(
        &self,
        queue: &QueueName,
        ids: &[JobId],
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Deletes up to `limit` (at most [`MAX_PAGE`](super::MAX_PAGE)) jobs of `set`; how many were deleted.
    fn purge(
        &self,
        queue: &QueueName,
        set: JobSet,
        limit: usize,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Wake-ups for a scheduler of `queue`.
    fn wakeups(&self, queue: &QueueName) -> Wakeups;
}
