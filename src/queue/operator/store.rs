//! What an operator needs of a queue's store, one capability a trait: read a queue's jobs
//! ([`InspectQueue`]), change them ([`ControlQueue`]), and find its queues
//! ([`QueueRegistry`]); and their vocabulary.

use std::future::Future;
use std::time::SystemTime;

use crate::error::StoreError;
use crate::queue::{Counters, JobId, MinuteActivity, QueueCore, QueueName};

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
    /// Finished, and kept by the queue's [`Retention`](crate::queue::Retention).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobSet {
    /// Waiting to become due (or due and not yet claimed).
    Waiting,
    /// Claimed by a scheduler.
    InFlight,
    /// In the dead-letter set.
    Dead,
    /// Finished, and kept by the queue's [`Retention`](crate::queue::Retention).
    Done,
}

impl JobSet {
    /// Every set, in the order a job passes through them.
    pub const ALL: [JobSet; 4] = [JobSet::Waiting, JobSet::InFlight, JobSet::Dead, JobSet::Done];

    /// The set's name, as the CLI, the dashboard and the guide spell it.
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
    /// Finished jobs kept by the queue's [`Retention`](crate::queue::Retention).
    pub done: u64,
    /// Whether the queue is paused: its claims hand out nothing.
    pub paused: bool,
}

/// Reads a queue's jobs: one by id, a set page by page, the counts, the recent activity.
///
/// Sealed through [`QueueCore`]: the crate's two stores implement it.
pub trait InspectQueue: QueueCore {
    /// Reads one job.
    fn inspect(
        &self,
        queue: &QueueName,
        id: &JobId,
    ) -> impl Future<Output = Result<RawJob, StoreError>> + Send;

    /// Counts the queue's jobs.
    fn stats(&self, queue: &QueueName) -> impl Future<Output = Result<QueueStats, StoreError>> + Send;

    /// How many due jobs wait for their turn per group, the `most` largest groups (at most
    /// [`MAX_PAGE`](crate::queue::MAX_PAGE)) first, ties by name, the last first (see
    /// [`JobGroup`](crate::queue::JobGroup)).
    fn groups(
        &self,
        queue: &QueueName,
        most: usize,
    ) -> impl Future<Output = Result<crate::queue::QueueGroups, StoreError>> + Send;

    /// Up to `limit` (at most [`MAX_PAGE`](crate::queue::MAX_PAGE)) entries of `set` in time order
    /// (ties by id), from the first or from just `after` an entry.
    fn list(
        &self,
        queue: &QueueName,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ListedJob>, StoreError>> + Send;

    /// The queue's activity per minute over the last hour, oldest first: the claims, acks,
    /// failures and burials the store counted as they happened.
    fn activity(
        &self,
        queue: &QueueName,
    ) -> impl Future<Output = Result<Vec<MinuteActivity>, StoreError>> + Send;
}

/// Changes a queue as an operator does: pause and resume it, run a job now, requeue dead jobs,
/// purge a set.
///
/// Sealed through [`QueueCore`]: the crate's two stores implement it.
pub trait ControlQueue: QueueCore {
    /// Pauses (`true`) or resumes (`false`) the queue: a paused queue's claims hand out
    /// nothing, and resuming wakes its schedulers. Whether it was paused before.
    fn pause(&self, queue: &QueueName, paused: bool)
    -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Makes the waiting job `id` due now; `false` when it is not waiting.
    fn run_now(&self, queue: &QueueName, id: &JobId)
    -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Moves the dead jobs among `ids` (at most [`MAX_PAGE`](crate::queue::MAX_PAGE)) back to wait, due now; how many moved.
    fn requeue(
        &self,
        queue: &QueueName,
        ids: &[JobId],
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Deletes up to `limit` (at most [`MAX_PAGE`](crate::queue::MAX_PAGE)) jobs of `set`; how many were deleted.
    fn purge(
        &self,
        queue: &QueueName,
        set: JobSet,
        limit: usize,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;
}

/// The store's registry of queues (under its prefix), which operators' tools read to tell a
/// queue from a mistyped name and to find its shards. Queues register themselves
/// ([`QueueCore::register`]).
///
/// Sealed through [`QueueCore`]: the crate's two stores implement it.
pub trait QueueRegistry: QueueCore {
    /// The queues in the registry, by name.
    fn registered(&self) -> impl Future<Output = Result<Vec<RegisteredQueue>, StoreError>> + Send;
}
