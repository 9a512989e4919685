//! A key's pending job: the one waiting job that later deferrals for the key join instead of
//! adding their own (the [`Coalesce`](crate::strategy::Coalesce) strategy).

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Codec, Counters, Debounce, DelayQueue, Due, JobGroup, JobId, QueueError, QueueName, QueueStore};
use crate::error::StoreError;
use crate::key::LockKey;

/// Which request a key's pending job keeps when another is deferred while it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Keep {
    /// The newest: the job's payload is replaced, its id and place in line stay.
    Latest,
    /// The first: the newer request is dropped as a duplicate of the waiting job.
    First,
}

impl Keep {
    /// The name the configuration, the metrics and the store's scripts use.
    pub fn as_str(self) -> &'static str {
        match self {
            Keep::Latest => "latest",
            Keep::First => "first",
        }
    }
}

/// How a push joins its key's pending job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingRules {
    /// Which request the job keeps.
    pub keep: Keep,
    /// With [`Keep::Latest`], a request that replaces the payload also makes the job due a
    /// period from now, no later than the longest wait after the job's first request.
    pub debounce: Option<Debounce>,
    /// Whether the queue's activity is counted (a request that joins is `coalesced`).
    pub counters: Counters,
    /// How long ago the request arrived (a caller that waited in place before it deferred):
    /// with [`Keep::Latest`], a request older than the one the job carries replaces nothing.
    pub arrived_ago: Duration,
}

/// What a [`PendingStore::push_pending`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingPush {
    /// No job of the key was waiting: this one was stored, and is now the key's pending job.
    Stored {
        /// When it is due, by the store's clock.
        due: SystemTime,
    },
    /// The key's pending job `id` now carries this request: its payload was replaced
    /// ([`Keep::Latest`], asked with that job's id) or the request was dropped as a duplicate
    /// of it ([`Keep::First`]).
    Joined {
        /// The pending job.
        id: JobId,
        /// How many requests the job has carried, the replaced ones included (1: only the
        /// first). Strictly increasing per job: the highest is the payload that runs.
        revision: u64,
        /// When it is due.
        due: SystemTime,
    },
    /// The key's pending job is `id`, but the envelope was encoded for another id: encode it
    /// for `id` and push again (an envelope names its job). Nothing was written.
    EncodeFor(JobId),
    /// The job asked for is no longer the key's pending waiting job (a scheduler claimed it,
    /// or its id is taken): push again under a new id. Nothing was written.
    Moved,
    /// With [`Keep::Latest`]: the key's pending job `id` carries a request that arrived after
    /// this one, which is superseded. Nothing was written.
    Newer {
        /// The pending job.
        id: JobId,
        /// Its revision.
        revision: u64,
        /// When it is due.
        due: SystemTime,
    },
}

/// The pending-job operation of a store, on the queue's shard of the key.
///
/// Semantics both stores keep, pinned by the conformance tests:
/// - a key has at most one pending job per queue shard: the last job stored for it while none
///   of its jobs was waiting; it stops being pending once a scheduler claims it (a request
///   deferred while it runs starts a new pending job: one running, one waiting);
/// - a push for a key whose pending job waits stores nothing new; with [`Keep::Latest`] and the
///   pending job's own id it replaces the envelope atomically (a claim sees the old one or the
///   new one, whole), unless the job carries a request that arrived later (by the store's
///   clock, less `arrived_ago`): the job keeps the newest request;
/// - the pending record lives at least `hold` after the last push (the longest the job may
///   wait), so that a later request finds the job;
/// - with a debounce, a replaced payload makes the job due `period` after the push (by the
///   store's clock), but never later than `max_wait` after the push that stored the job.
///
/// Sealed, like [`QueueStore`]: the crate's two stores implement it.
pub trait PendingStore: QueueStore {
    /// Stores `job` as a new job due at `due` on `queue`, the key's pending job, unless the
    /// key's pending job waits there: then `job` joins it as its rules say.
    fn push_pending(
        &self,
        queue: &QueueName,
        job: PendingJob<'_>,
        due: Due,
    ) -> impl Future<Output = Result<PendingPush, StoreError>> + Send;
}

/// A request pushed as its key's pending job, as a [`PendingStore`] (and the queue's model)
/// receives it: what it stores as a new job, and how it joins a waiting one.
///
/// ```
/// use std::time::Duration;
/// use redefer::queue::{
///     Counters, Due, JobId, Keep, PendingJob, PendingPush, PendingRules, PendingStore, QueueName,
/// };
/// use redefer::{LockKey, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (store, queue) = (MemoryStore::new(), QueueName::new("syncs")?);
/// let (key, id) = (LockKey::new("account:7")?, JobId::new("sync-1")?);
/// let rules = PendingRules {
///     keep: Keep::Latest,
///     debounce: None,
///     counters: Counters::Off,
///     arrived_ago: Duration::ZERO,
/// };
/// let job = PendingJob { key: &key, id: &id, envelope: b"{}".to_vec(), group: None, rules };
/// let pushed = store.push_pending(&queue, job, Due::In(Duration::from_secs(1))).await?;
/// assert!(matches!(pushed, PendingPush::Stored { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PendingJob<'a> {
    /// The key whose pending job it is.
    pub key: &'a LockKey,
    /// The id a new job gets.
    pub id: &'a JobId,
    /// The new job's envelope, encoded for `id`.
    pub envelope: Vec<u8>,
    /// The group a new job goes in; a job joined keeps its own (see [`JobGroup`]).
    pub group: Option<&'a JobGroup>,
    /// How it joins the key's waiting job.
    pub rules: PendingRules,
}

/// A request pushed as its key's pending job ([`DelayQueue::push_pending`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Coalesced {
    /// The job that carries the request: a new one, or the key's pending job it joined.
    pub id: JobId,
    /// The physical queue the job is stored on.
    pub shard: QueueName,
    /// When the job is due, by the store's clock.
    pub due: SystemTime,
    /// How many requests the job has carried, this one included when it was kept: 1 for a
    /// new job; above 1 with [`Keep::Latest`], the older requests' payloads replaced (they do
    /// not run). The highest revision of a job is the payload it runs with.
    pub revision: u64,
    /// The request joined a waiting job instead of storing its own.
    pub joined: bool,
    /// The request was dropped as a duplicate of the waiting job ([`Keep::First`]).
    pub dropped: bool,
    /// The request was dropped because the waiting job carries a newer one ([`Keep::Latest`]
    /// and a request that arrived earlier, as one that waited in place before deferring).
    pub superseded: bool,
}

/// How many times a push follows the key's pending job as it moves (each move is a claim or a
/// new job of another request) before it reports the store as too busy to settle.
const MAX_PENDING_TRIES: usize = 16;

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: PendingStore,
    Enc: Codec,
{
    /// Pushes `item` as `key`'s pending job, due at `due`: unless a job of the key waits (not
    /// yet claimed), in which case `item` joins it as `keep` says, keeping its id, due time and
    /// place in the key's line. A burst of pushes for a key while none of its jobs can run
    /// leaves one job: with [`Keep::Latest`] it runs once, with the last payload stored.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::{LockKey, MemoryStore};
    /// use redefer::queue::{DelayQueue, Due, Keep};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<String, _>::new(MemoryStore::new(), "syncs")?;
    /// let key = LockKey::new("account:7")?;
    /// let first = queue.push_pending(&key, &"v1".to_string(), Due::In(Duration::from_secs(1)), Keep::Latest).await?;
    /// let second = queue.push_pending(&key, &"v2".to_string(), Due::In(Duration::from_secs(1)), Keep::Latest).await?;
    /// assert_eq!((second.id.clone(), second.revision, second.joined), (first.id.clone(), 2, true));
    /// assert_eq!(queue.operator().job(&first.id).await?.unwrap().envelope.unwrap()?.payload, "v2");
    /// assert_eq!(queue.operator().stats().await?.waiting, 1);
    /// # Ok(()) }
    /// ```
    pub async fn push_pending(
        &self,
        key: &LockKey,
        item: &T,
        due: Due,
        keep: Keep,
    ) -> Result<Coalesced, QueueError> {
        let joining = Joining {
            keep,
            debounce: None,
            arrived_ago: Duration::ZERO,
        };
        self.push_pending_encoded(key, |id| self.encode_new(id.clone(), item), due, joining)
            .await
    }

    /// [`push_pending`](Self::push_pending) of the item `encode` encodes for a given job id:
    /// a request the caller owns, so the future holds no borrow of it (requests need not be
    /// `Sync`).
    pub(crate) async fn push_pending_encoded(
        &self,
        key: &LockKey,
        encode: impl Fn(&JobId) -> Result<(JobId, Vec<u8>), QueueError>,
        due: Due,
        joining: Joining,
    ) -> Result<Coalesced, QueueError> {
        self.register().await;
        let (shard, fresh) = self.pending_place(key);
        let shard = shard.clone();
        let keep = joining.keep;
        let rules = PendingRules {
            keep,
            debounce: joining.debounce,
            counters: self.counters(),
            arrived_ago: joining.arrived_ago,
        };
        let mut id = fresh;
        for _ in 0..MAX_PENDING_TRIES {
            let (_, envelope) = encode(&id)?;
            let job = PendingJob {
                key,
                id: &id,
                envelope,
                group: self.group.as_deref(),
                rules,
            };
            let pushed = self
                .store()
                .push_pending(&shard, job, due)
                .await
                .map_err(super::push_error)?;
            let coalesced = |id, due, revision, joined, superseded| Coalesced {
                id,
                shard: shard.clone(),
                due,
                revision,
                joined,
                dropped: joined && keep == Keep::First,
                superseded,
            };
            match pushed {
                PendingPush::Stored { due } => return Ok(coalesced(id, due, 1, false, false)),
                PendingPush::Joined { id, revision, due } => {
                    return Ok(coalesced(id, due, revision, true, false));
                }
                PendingPush::Newer { id, revision, due } => {
                    return Ok(coalesced(id, due, revision, true, true));
                }
                PendingPush::EncodeFor(pending) => id = pending,
                PendingPush::Moved => id = self.pending_place(key).1,
            }
        }
        Err(QueueError::Store(StoreError::Protocol(format!(
            "the pending job of {key} moved {MAX_PENDING_TRIES} times during one push"
        ))))
    }
}

/// How a push joins its key's pending job, as its caller says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Joining {
    pub(crate) keep: Keep,
    pub(crate) debounce: Option<Debounce>,
    pub(crate) arrived_ago: Duration,
}
