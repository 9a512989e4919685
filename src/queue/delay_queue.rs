//! The typed delay queue: encodes jobs, pushes, claims, and settles them.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    Codec, Counters, Envelope, JobGroup, JobId, Json, QueueCore, QueueError, QueueName, Retention,
    RetryPolicy, Shards,
};
use crate::error::KeyError;
use crate::trace_context::TraceContext;

/// The default largest encoded job: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// A delay queue of `T`s in a store: jobs wait in a set sorted by due time, are claimed by one
/// claimer at a time under a lease, and end acknowledged or in the dead-letter set.
///
/// ```
/// use std::time::Duration;
/// use redefer::MemoryStore;
/// use redefer::queue::DelayQueue;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = DelayQueue::<String, _>::new(MemoryStore::new(), "emails")?;
/// let scheduled = queue.push(&"welcome alice".to_string(), Duration::ZERO).await?;
///
/// let claimed = queue.claim(10, Duration::from_secs(30)).await?;
/// assert_eq!(claimed.jobs.len(), 1);
/// let job = &claimed.jobs[0];
/// assert_eq!(job.envelope.id, scheduled.id);
/// assert_eq!(job.envelope.payload, "welcome alice");
/// assert!(queue.ack(&job.lease).await?);
/// assert_eq!(queue.operator().stats().await?.waiting, 0);
/// # Ok(()) }
/// ```
pub struct DelayQueue<T, St, Enc = Json> {
    pub(super) store: St,
    name: QueueName,
    pub(super) shards: Shards,
    pub(super) policy: RetryPolicy,
    pub(super) max_payload: usize,
    codec: Enc,
    /// Which finished jobs the acks keep (none by default).
    pub(super) retention: Option<Retention>,
    /// Whether the scripts count the queue's activity (on by default).
    pub(super) counters: Counters,
    /// Whether this handle (and its clones) has put the queue in the store's registry.
    registered: Arc<AtomicBool>,
    /// The group this handle's pushes are in, if any ([`in_group`](Self::in_group)); shared,
    /// so that a handle stays small (strategies and layers hold one).
    pub(super) group: Option<Arc<JobGroup>>,
    payload: PhantomData<fn(T) -> T>,
}

impl<T, St: Clone, Enc: Clone> Clone for DelayQueue<T, St, Enc> {
    fn clone(&self) -> Self {
        DelayQueue {
            store: self.store.clone(),
            name: self.name.clone(),
            shards: self.shards.clone(),
            policy: self.policy,
            max_payload: self.max_payload,
            codec: self.codec.clone(),
            retention: self.retention,
            counters: self.counters,
            registered: Arc::clone(&self.registered),
            group: self.group.clone(),
            payload: PhantomData,
        }
    }
}

impl<T, St, Enc> fmt::Debug for DelayQueue<T, St, Enc> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .field("max_payload", &self.max_payload)
            .finish_non_exhaustive()
    }
}

impl<T, St> DelayQueue<T, St, Json> {
    /// The queue `name` in `store`, with JSON encoding, the default retry policy and a 1 MiB
    /// payload limit.
    pub fn new(store: St, name: impl Into<String>) -> Result<Self, KeyError> {
        let name = QueueName::new(name)?;
        Ok(DelayQueue {
            store,
            shards: Shards::single(name.clone()),
            name,
            policy: RetryPolicy::default(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            codec: Json,
            retention: None,
            counters: Counters::On,
            registered: Arc::default(),
            group: None,
            payload: PhantomData,
        })
    }
}

impl<T, St: Clone, Enc: Clone> DelayQueue<T, St, Enc> {
    /// A handle on the same queue whose pushes put their jobs in `group`: once due, they wait
    /// in their group's turn, not behind every other group's backlog (see [`JobGroup`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::{DelayQueue, JobGroup};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "exports")?;
    /// let big = queue.in_group(JobGroup::new("tenant-a")?);
    /// let small = queue.in_group(JobGroup::new("tenant-b")?);
    /// big.push_many(&(0..100).collect::<Vec<_>>(), Duration::ZERO).await?;
    /// small.push(&1_000, Duration::ZERO).await?;
    ///
    /// // Tenant B's job comes in the first turns, not after A's hundred.
    /// let claimed = queue.claim(2, Duration::from_secs(30)).await?;
    /// assert!(claimed.jobs.iter().any(|job| job.envelope.payload == 1_000));
    /// # Ok(()) }
    /// ```
    pub fn in_group(&self, group: JobGroup) -> Self {
        DelayQueue {
            group: Some(Arc::new(group)),
            ..self.clone()
        }
    }
}

impl<T, St, Enc> DelayQueue<T, St, Enc> {
    /// How the queue's jobs back off between attempts, and how many they get.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The largest encoded job accepted, in bytes. A larger push fails and writes nothing; a
    /// larger job found in the store (written by another client) is buried when claimed.
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Keeps finished jobs, within `retention`, so that [`status`](Self::status) can tell a
    /// job that finished from one that never existed (see [`Retention`]). Every process that
    /// acks the queue's jobs (its schedulers) needs the same setting.
    pub fn retain_finished(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Which finished jobs the queue keeps, if any.
    pub fn retention(&self) -> Option<Retention> {
        self.retention
    }

    /// Whether claims, acks, retries and burials count the queue's activity per minute (on by
    /// default): what the dashboard plots, at a share of each job's Redis time. A scheduler
    /// started on a handle with `Counters::Off` records that in the registry, and the
    /// dashboard says the counters are off instead of plotting nothing.
    ///
    /// ```
    /// use redefer::MemoryStore;
    /// use redefer::queue::{Counters, DelayQueue};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "hot")?.count_activity(Counters::Off);
    /// assert_eq!(queue.counters(), Counters::Off);
    /// # Ok(()) }
    /// ```
    pub fn count_activity(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    /// Whether the queue's activity is counted.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Encodes jobs with `codec` instead of JSON.
    pub fn codec<Enc2: Codec>(self, codec: Enc2) -> DelayQueue<T, St, Enc2> {
        DelayQueue {
            store: self.store,
            name: self.name,
            shards: self.shards,
            policy: self.policy,
            max_payload: self.max_payload,
            codec,
            retention: self.retention,
            counters: self.counters,
            registered: self.registered,
            group: self.group,
            payload: PhantomData,
        }
    }

    /// Spreads the queue over `count` physical queues ("shards"), each under a hash tag of its
    /// own, so that on Redis Cluster one logical queue uses several nodes. A job goes to the
    /// shard its id hashes to, and stays there across retries; a claim takes from every shard in
    /// turn, so none starves; stats add up the shards.
    ///
    /// Every process of a queue must use the same count: the shard names follow from the name
    /// and the count. 1 (the default) is the queue under its own name.
    ///
    /// ```
    /// use redefer::MemoryStore;
    /// use redefer::queue::DelayQueue;
    ///
    /// let queue = DelayQueue::<String, _>::new(MemoryStore::new(), "orders")?.shards(3)?;
    /// assert_eq!(queue.shard_names().len(), 3);
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn shards(mut self, count: usize) -> Result<Self, KeyError> {
        self.shards = Shards::split(&self.name, count)?;
        Ok(self)
    }

    /// The names of the physical queues, one per shard.
    pub fn shard_names(&self) -> &[QueueName] {
        self.shards.names()
    }

    /// The queue's name.
    pub fn name(&self) -> &QueueName {
        &self.name
    }

    /// The queue's retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The queue's store.
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: QueueCore,
    Enc: Codec,
{
    /// The physical queue a job of this id lives on.
    pub(crate) fn shard_of(&self, id: &JobId) -> &QueueName {
        self.shards.of(id)
    }

    /// The physical queue that holds `key`'s pending job, and a fresh job id that lives on it.
    pub(crate) fn pending_place(&self, key: &crate::key::LockKey) -> (&QueueName, JobId) {
        (self.shards.of_key(key), self.shards.random_id_for_key(key))
    }

    /// Encodes a first-attempt envelope, checking the payload limit. It keeps the trace
    /// context of the span the push runs in, for the job's runs to continue.
    pub(crate) fn encode_new(&self, id: JobId, item: &T) -> Result<(JobId, Vec<u8>), QueueError> {
        let mut envelope = Envelope::new(id.clone(), item);
        envelope.trace = TraceContext::current();
        let bytes = self.encode(&envelope)?;
        Ok((id, bytes))
    }

    /// Puts the queue in the store's registry, once per handle (and its clones): the first
    /// push does it, and a scheduler when it starts. A failure is logged, not returned: the
    /// registry serves operators' tools, and the next push tries again.
    pub(crate) async fn register(&self) {
        if self.registered.load(Ordering::Relaxed) {
            return;
        }
        self.register_counting(None).await;
    }

    /// Registers the queue with whether its activity is counted: what a scheduler, which does
    /// the counting, says when it starts.
    pub(crate) async fn register_as_scheduler(&self) {
        self.register_counting(Some(self.counters)).await;
    }

    async fn register_counting(&self, counters: Option<Counters>) {
        match self
            .store
            .register(&self.name, self.shards.names().len(), counters)
            .await
        {
            Ok(()) => self.registered.store(true, Ordering::Relaxed),
            Err(error) => tracing::warn!(queue = %self.name, %error, "cannot add the queue to the registry"),
        }
    }

    pub(super) fn encode<P: Serialize>(&self, envelope: &Envelope<P>) -> Result<Vec<u8>, QueueError> {
        let bytes = self.codec.encode(envelope).map_err(QueueError::Encode)?;
        if bytes.len() > self.max_payload {
            return Err(QueueError::TooLarge {
                size: bytes.len(),
                max: self.max_payload,
            });
        }
        Ok(bytes)
    }

    pub(crate) fn decode(&self, id: &JobId, bytes: &[u8]) -> Result<Envelope<T>, String> {
        let envelope: Envelope<T> = self
            .codec
            .decode(bytes)
            .map_err(|error| format!("cannot decode the envelope: {error}"))?;
        if envelope.id != *id {
            return Err(format!("the envelope belongs to job {}, not {id}", envelope.id));
        }
        Ok(envelope)
    }
}
