//! The typed delay queue: encodes jobs, pushes, claims, and settles them.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    Cancelled, ClaimLimits, Codec, Counters, Due, Envelope, JobId, JobSet, Json, ListCursor, MAX_PAGE,
    QueueError, QueueName, QueueStats, QueueStore, RawJobState, Retention, RetryPolicy, Shards, Wakeups,
};
use crate::error::KeyError;
use crate::lock::{FencingToken, LockToken};
use crate::trace_context::TraceContext;

/// What a failed push tells: refused for memory, outcome unknown, or nothing written.
pub(super) fn push_error(error: crate::error::StoreError) -> QueueError {
    if error.is_out_of_memory() {
        QueueError::Full(error)
    } else if error.outcome_unknown() {
        QueueError::Unconfirmed(error)
    } else {
        QueueError::Store(error)
    }
}

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
/// assert_eq!(queue.stats().await?.waiting, 0);
/// # Ok(()) }
/// ```
pub struct DelayQueue<T, St, Enc = Json> {
    store: St,
    name: QueueName,
    pub(super) shards: Shards,
    policy: RetryPolicy,
    max_payload: usize,
    codec: Enc,
    /// Which finished jobs the acks keep (none by default).
    retention: Option<Retention>,
    /// Whether the scripts count the queue's activity (on by default).
    counters: Counters,
    /// Whether this handle (and its clones) has put the queue in the store's registry.
    registered: Arc<AtomicBool>,
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

/// Where a pushed job went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// The job's id.
    pub id: JobId,
    /// When it becomes due, by the store's clock.
    pub due: SystemTime,
}

/// A claimed job: its envelope, and the lease that settles it.
#[derive(Debug)]
pub struct ClaimedJob<T> {
    /// The decoded job.
    pub envelope: Envelope<T>,
    /// When it was due, by the store's clock.
    pub due: SystemTime,
    /// The claim on it: pass it to [`DelayQueue::ack`], [`fail`](DelayQueue::fail) and the rest.
    pub lease: Lease,
}

/// A claimer's hold on one job, until its lease runs out.
#[derive(Debug, Clone)]
pub struct Lease {
    id: JobId,
    /// The physical queue the job lives on; a retry keeps it there.
    shard: QueueName,
    token: LockToken,
    attempt: u32,
    fence: FencingToken,
    /// The envelope as stored, to write the next attempt's from without a `T: Clone`.
    stored: Vec<u8>,
}

impl Lease {
    /// The job's id.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The physical queue the job lives on: the queue's own name unless it is
    /// [sharded](DelayQueue::shards).
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

/// What [`DelayQueue::fail`] did with a failed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterFailure {
    /// It waits for another attempt.
    Retrying {
        /// When the next attempt is due.
        due: SystemTime,
        /// The next attempt's number (counting from 0).
        attempt: u32,
    },
    /// It used its attempts and is in the dead-letter set.
    Buried {
        /// The reason recorded.
        reason: String,
    },
    /// The lease ran out before: another claimer has the job now, or it was deleted.
    LeaseLost,
}

/// One entry of [`DelayQueue::list`].
#[derive(Debug)]
pub struct ListedEntry<T> {
    /// The id as found (another client may have written one that is not a valid job id).
    pub id: String,
    /// When it is due, its lease runs out, it was buried or it finished, by set (see
    /// [`JobSet::time_label`]).
    pub at: SystemTime,
    /// Its envelope, or why it does not decode (`None` when it has no bytes).
    pub envelope: Option<Result<Envelope<T>, String>>,
    /// Why it was buried (dead set only).
    pub reason: Option<String>,
}

impl<T> ListedEntry<T> {
    /// Where the page after this entry starts (see [`DelayQueue::list_after`]).
    pub fn cursor(&self) -> ListCursor {
        ListCursor {
            at: self.at,
            id: self.id.clone(),
        }
    }
}

/// One job as read by [`DelayQueue::job`].
#[derive(Debug)]
pub struct JobInfo<T> {
    /// Where it is.
    pub state: RawJobState,
    /// Its envelope, or why it does not decode (`None` when it has no bytes).
    pub envelope: Option<Result<Envelope<T>, String>>,
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
            payload: PhantomData,
        })
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
    St: QueueStore,
    Enc: Codec,
{
    /// Pushes `item` to become due `delay` from now, by the store's clock.
    pub async fn push(&self, item: &T, delay: Duration) -> Result<Scheduled, QueueError> {
        let (id, bytes) = self.encode_new(JobId::random(), item)?;
        self.push_encoded(id, bytes, Due::In(delay)).await
    }

    /// Pushes `item` to become due at `at`.
    pub async fn push_at(&self, item: &T, at: SystemTime) -> Result<Scheduled, QueueError> {
        let (id, bytes) = self.encode_new(JobId::random(), item)?;
        self.push_encoded(id, bytes, Due::At(at)).await
    }

    /// Pushes `item` under an id of the caller's, so that pushing it twice stores it once:
    /// the second push fails with [`QueueError::DuplicateId`].
    pub async fn push_with_id(&self, id: JobId, item: &T, due: Due) -> Result<Scheduled, QueueError> {
        let (id, bytes) = self.encode_new(id, item)?;
        self.push_encoded(id, bytes, due).await
    }

    /// The physical queue a job of this id lives on.
    pub(crate) fn shard_of(&self, id: &JobId) -> &QueueName {
        self.shards.of(id)
    }

    /// The physical queue that holds `key`'s pending job, and a fresh job id that lives on it.
    pub(crate) fn pending_place(&self, key: &crate::key::LockKey) -> (&QueueName, JobId) {
        (self.shards.of_key(key), self.shards.random_id_for_key(key))
    }

    /// Pushes `items` to become due `delay` from now, each under a fresh id, in one round trip
    /// per shard and per 1,000 jobs (where `push` takes one per job). Every item is encoded
    /// first: one over the payload limit fails the call with nothing written.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "bulk")?;
    /// let scheduled = queue.push_many(&[1, 2, 3], Duration::ZERO).await?;
    /// assert_eq!(scheduled.len(), 3);
    /// assert_eq!(queue.stats().await?.waiting, 3);
    /// # Ok(()) }
    /// ```
    pub async fn push_many(&self, items: &[T], delay: Duration) -> Result<Vec<Scheduled>, QueueError> {
        self.register().await;
        // Encoded straight into their shards' batches: no copy of the bytes.
        let mut by_shard: Vec<Vec<(JobId, Vec<u8>)>> = vec![Vec::new(); self.shards.names().len()];
        for item in items {
            let (id, bytes) = self.encode_new(JobId::random(), item)?;
            by_shard[self.shards.index_of(&id)].push((id, bytes));
        }
        let mut scheduled = Vec::with_capacity(items.len());
        for (shard, jobs) in self.shards.names().iter().zip(&by_shard) {
            for page in jobs.chunks(MAX_PAGE) {
                let (due, stored) = match self.store.push_many(shard, page, Due::In(delay)).await {
                    Ok(pushed) => pushed,
                    Err(error) => return Err(push_error(error)),
                };
                // Fresh random ids are never taken: every job of the page is stored.
                scheduled.extend(
                    page.iter()
                        .zip(stored)
                        .filter(|(_, stored)| *stored)
                        .map(|((id, _), _)| Scheduled { id: id.clone(), due }),
                );
            }
        }
        Ok(scheduled)
    }

    /// Encodes a first-attempt envelope, checking the payload limit. It keeps the trace
    /// context of the span the push runs in, for the job's runs to continue.
    pub(crate) fn encode_new(&self, id: JobId, item: &T) -> Result<(JobId, Vec<u8>), QueueError> {
        let mut envelope = Envelope::new(id.clone(), item);
        envelope.trace = TraceContext::current();
        let bytes = self.encode(&envelope)?;
        Ok((id, bytes))
    }

    /// Stores an envelope made by [`encode_new`](Self::encode_new).
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

    pub(crate) async fn push_encoded(
        &self,
        id: JobId,
        bytes: Vec<u8>,
        due: Due,
    ) -> Result<Scheduled, QueueError> {
        self.register().await;
        let job = [(id, bytes)];
        match self.store.push_many(self.shards.of(&job[0].0), &job, due).await {
            Ok((due, stored)) if stored.first() == Some(&true) => {
                let [(id, _)] = job;
                Ok(Scheduled { id, due })
            }
            Ok(_) => {
                let [(id, _)] = job;
                Err(QueueError::DuplicateId(id))
            }
            Err(error) => Err(push_error(error)),
        }
    }

    fn encode<P: Serialize>(&self, envelope: &Envelope<P>) -> Result<Vec<u8>, QueueError> {
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

    /// Claims up to `max` due jobs for `lease`. Jobs whose bytes do not decode go to the
    /// dead-letter set with the decode error as reason; the others are returned.
    ///
    /// A sharded queue takes up to `max / shards` (rounded up) from each shard, visiting them
    /// from a different one each time: one round trip per shard.
    pub async fn claim(&self, max: usize, lease: Duration) -> Result<Claimed<T>, QueueError> {
        let token = LockToken::random();
        let per_shard = max.div_ceil(self.shards.names().len());
        let limits = ClaimLimits {
            max_envelope: self.max_payload,
            max_expiries: self.policy.max_lease_expiries,
        };
        let mut claimed = Claimed {
            jobs: Vec::new(),
            next_in: None,
        };
        for shard in self.shards.claim_order() {
            let room = per_shard.min(max.saturating_sub(claimed.jobs.len()));
            if room == 0 {
                // Shards left unvisited may have due jobs: claim again at once.
                claimed.next_in = Some(Duration::ZERO);
                break;
            }
            let batch = match self
                .store
                .claim(shard, room, lease, token, limits, self.counters)
                .await
            {
                Ok(batch) => batch,
                // The jobs already claimed from other shards are in flight under our token:
                // hand them out rather than leave them to their leases.
                Err(error) if !claimed.jobs.is_empty() => {
                    tracing::warn!(queue = %shard, %error, "cannot claim from this shard now");
                    claimed.next_in = Some(Duration::ZERO);
                    break;
                }
                Err(error) => return Err(error.into()),
            };
            claimed.next_in = match (claimed.next_in, batch.next_in) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            for raw in batch.jobs {
                match self.decode(&raw.id, &raw.envelope) {
                    Ok(envelope) => claimed.jobs.push(ClaimedJob {
                        lease: Lease {
                            id: raw.id,
                            shard: shard.clone(),
                            token,
                            attempt: envelope.attempt,
                            fence: FencingToken(raw.fence),
                            stored: raw.envelope,
                        },
                        envelope,
                        due: raw.due,
                    }),
                    Err(reason) => {
                        // One undecodable job never fails the batch: should its burial fail,
                        // it stays in flight and comes back after its lease.
                        tracing::warn!(queue = %shard, job_id = %raw.id, %reason, "burying an undecodable job");
                        if let Err(error) = self
                            .store
                            .bury(shard, &raw.id, token, &reason, None, self.counters)
                            .await
                        {
                            tracing::warn!(job_id = %raw.id, %error, "cannot bury it now; it returns after its lease");
                        }
                    }
                }
            }
        }
        Ok(claimed)
    }

    /// Deletes a job its claimer finished; `false` when the lease ran out before.
    pub async fn ack(&self, lease: &Lease) -> Result<bool, QueueError> {
        let acked = self.ack_many(&[lease]).await?;
        Ok(acked.first().copied().unwrap_or(false))
    }

    /// Deletes several finished jobs, one round trip per shard (and per 1,000 jobs); for each
    /// lease, in order, whether its job was deleted (`false`: the lease ran out before).
    pub async fn ack_many(&self, leases: &[&Lease]) -> Result<Vec<bool>, QueueError> {
        let mut acked = vec![false; leases.len()];
        for shard in self.shards.names() {
            let here: Vec<usize> = (0..leases.len()).filter(|&i| leases[i].shard == *shard).collect();
            for page in here.chunks(MAX_PAGE) {
                let jobs: Vec<(&JobId, LockToken)> =
                    page.iter().map(|&i| (&leases[i].id, leases[i].token)).collect();
                for (&i, done) in page.iter().zip(
                    self.store
                        .ack(shard, &jobs, self.retention, self.counters)
                        .await?,
                ) {
                    acked[i] = done;
                }
            }
        }
        Ok(acked)
    }

    /// Records a failed attempt: the job waits for another attempt after the policy's backoff,
    /// or, when it used its attempts, goes to the dead-letter set with
    /// `"<reason> after <n> attempts"`.
    pub async fn fail(&self, lease: &Lease, reason: &str) -> Result<AfterFailure, QueueError> {
        if !self.policy.allows_another(lease.attempt) {
            // The envelope counts this run too, as a retry's would: a dead job's attempts are
            // the runs it had (see JobStatus::Dead).
            let envelope = self.next_attempt(lease, reason).ok();
            let reason = format!("{reason} after {} attempts", lease.attempt.saturating_add(1));
            let buried = self
                .store
                .bury(
                    &lease.shard,
                    &lease.id,
                    lease.token,
                    &reason,
                    envelope,
                    self.counters,
                )
                .await?;
            return Ok(if buried {
                AfterFailure::Buried { reason }
            } else {
                AfterFailure::LeaseLost
            });
        }
        let attempt = lease.attempt + 1;
        let envelope = self.next_attempt(lease, reason)?;
        let delay = self.policy.backoff.delay(attempt, &mut rand::rng());
        let due = self
            .store
            .retry(
                &lease.shard,
                &lease.id,
                lease.token,
                Some(envelope),
                delay,
                self.counters,
            )
            .await?;
        Ok(match due {
            Some(due) => AfterFailure::Retrying { due, attempt },
            None => AfterFailure::LeaseLost,
        })
    }

    /// The stored envelope with the attempt counted and the error recorded.
    fn next_attempt(&self, lease: &Lease, reason: &str) -> Result<Vec<u8>, QueueError> {
        let mut envelope: Envelope<T> = self
            .decode(&lease.id, &lease.stored)
            .map_err(|e| QueueError::Encode(e.into()))?;
        envelope.attempt = lease.attempt.saturating_add(1);
        envelope.last_error = Some(reason.to_string());
        self.encode(&envelope)
    }

    /// Moves a claimed job to the dead-letter set with `reason`; `false` when the lease ran out.
    pub async fn bury(&self, lease: &Lease, reason: &str) -> Result<bool, QueueError> {
        Ok(self
            .store
            .bury(&lease.shard, &lease.id, lease.token, reason, None, self.counters)
            .await?)
    }

    /// Gives a claimed job back, due now and with its attempt unchanged, for another claimer
    /// to take at once (a scheduler shutting down); `false` when the lease ran out.
    pub async fn release(&self, lease: &Lease) -> Result<bool, QueueError> {
        self.postpone(lease, Duration::ZERO).await
    }

    /// Puts a claimed job back to wait `opens_in` for its key's next slot (a throttle's,
    /// booked for it), without using an attempt; once it did that the policy's
    /// [`max_lock_waits`](RetryPolicy::max_lock_waits) times, it is buried instead.
    pub async fn wait_for_slot(
        &self,
        lease: &Lease,
        key: &crate::key::LockKey,
        opens_in: Duration,
    ) -> Result<AfterFailure, QueueError> {
        let envelope = self.decode(&lease.id, &lease.stored).ok();
        self.wait_without_attempt(lease, envelope, key, opens_in).await
    }

    /// Puts a claimed job back due in `wait`, its attempt unchanged: a job that waits (for its
    /// lock, for its slot) does not fail. Its envelope counts the wait; one that waited the
    /// policy's `max_lock_waits` times is buried with "met lock K held N times" instead. An
    /// envelope that does not decode is put back as it is, uncounted: its claim buries it.
    async fn wait_without_attempt(
        &self,
        lease: &Lease,
        envelope: Option<Envelope<T>>,
        key: &crate::key::LockKey,
        wait: Duration,
    ) -> Result<AfterFailure, QueueError> {
        let counted = match envelope {
            Some(mut envelope) => {
                if !self.policy.allows_another_lock_wait(envelope.lock_waits) {
                    let reason = format!(
                        "met lock {key} held {} times",
                        envelope.lock_waits.saturating_add(1)
                    );
                    return self.bury_for(lease, reason).await;
                }
                envelope.lock_waits = envelope.lock_waits.saturating_add(1);
                Some(self.encode(&envelope)?)
            }
            None => None,
        };
        let due = self
            .store
            .retry(&lease.shard, &lease.id, lease.token, counted, wait, self.counters)
            .await?;
        Ok(match due {
            Some(due) => AfterFailure::Retrying {
                due,
                attempt: lease.attempt,
            },
            None => AfterFailure::LeaseLost,
        })
    }

    /// Buries a claimed job with `reason`: what [`AfterFailure`] says of it.
    async fn bury_for(&self, lease: &Lease, reason: String) -> Result<AfterFailure, QueueError> {
        Ok(if self.bury(lease, &reason).await? {
            AfterFailure::Buried { reason }
        } else {
            AfterFailure::LeaseLost
        })
    }

    /// Puts a claimed job that met its lock held back to wait for its turn, its attempt
    /// unchanged: due after the policy's
    /// [`lock_wait_fallback`](RetryPolicy::lock_wait_fallback) for `expected_wait` and the
    /// lock's `lock_remaining` TTL (its turn
    /// normally comes sooner: the release hands the key to it and makes it due). Once it waited
    /// the policy's `max_lock_wait` since it was first stored, it is buried with
    /// "waited D for lock K" instead.
    pub async fn wait_for_lock(
        &self,
        lease: &Lease,
        key: &crate::key::LockKey,
        expected_wait: Option<Duration>,
        lock_remaining: Option<Duration>,
    ) -> Result<AfterFailure, QueueError> {
        let envelope = self.decode(&lease.id, &lease.stored).ok();
        let first_stored = envelope.as_ref().map_or(0, |envelope| envelope.enqueued_at_ms);
        let first_stored = SystemTime::UNIX_EPOCH + Duration::from_millis(first_stored);
        let waited = SystemTime::now().duration_since(first_stored).unwrap_or_default();
        if waited >= self.policy.max_lock_wait {
            let waited = Duration::from_secs(waited.as_secs());
            let reason = format!("waited {} for lock {key}", humantime::format_duration(waited));
            return self.bury_for(lease, reason).await;
        }
        let fallback = self
            .policy
            .lock_wait_fallback(expected_wait, lock_remaining, waited);
        self.wait_without_attempt(lease, envelope, key, fallback).await
    }

    /// Puts a claimed job back to wait `delay`, its attempt unchanged: for a run that the
    /// store, not the job, failed (Redis unreachable or out of memory). `false` when the lease
    /// ran out.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "jobs")?;
    /// queue.push(&7, Duration::ZERO).await?;
    /// let job = queue.claim(1, Duration::from_secs(30)).await?.jobs.remove(0);
    /// assert!(queue.postpone(&job.lease, Duration::from_secs(1)).await?);
    /// assert_eq!(queue.claim(1, Duration::from_secs(30)).await?.jobs.len(), 0, "not due yet");
    /// # Ok(()) }
    /// ```
    pub async fn postpone(&self, lease: &Lease, delay: Duration) -> Result<bool, QueueError> {
        let due = self
            .store
            .retry(&lease.shard, &lease.id, lease.token, None, delay, self.counters)
            .await?;
        Ok(due.is_some())
    }

    /// Extends a claimed job's lease to `lease` from now; `false` when it ran out before.
    pub async fn extend_lease(&self, lease: &Lease, duration: Duration) -> Result<bool, QueueError> {
        Ok(self
            .store
            .extend_lease(&lease.shard, &lease.id, lease.token, duration)
            .await?)
    }

    /// Deletes a waiting or dead job.
    pub async fn cancel(&self, id: &JobId) -> Result<Cancelled, QueueError> {
        Ok(self.store.cancel(self.shards.of(id), id).await?)
    }

    /// Reads one job, decoded when it decodes; `None` when there is no such job.
    pub async fn job(&self, id: &JobId) -> Result<Option<JobInfo<T>>, QueueError> {
        let raw = self.store.inspect(self.shards.of(id), id).await?;
        if raw.state == RawJobState::Missing && raw.envelope.is_none() {
            return Ok(None);
        }
        Ok(Some(JobInfo {
            state: raw.state,
            envelope: raw.envelope.map(|bytes| self.decode(id, &bytes)),
        }))
    }

    /// Counts the queue's jobs, over all its shards.
    pub async fn stats(&self) -> Result<QueueStats, QueueError> {
        let mut total = QueueStats::default();
        for shard in self.shards.names() {
            let stats = self.store.stats(shard).await?;
            total.waiting += stats.waiting;
            total.due += stats.due;
            total.in_flight += stats.in_flight;
            total.dead += stats.dead;
            total.done += stats.done;
            total.paused |= stats.paused;
        }
        Ok(total)
    }

    /// Up to `limit` entries of `set` (of every shard), oldest first. Bytes that do not decode
    /// are reported as such, never as an error.
    pub async fn list(&self, set: JobSet, limit: usize) -> Result<Vec<ListedEntry<T>>, QueueError> {
        self.list_after(set, None, limit).await
    }

    /// Up to `limit` (at most [`MAX_PAGE`]) entries of `set` (of every shard) in time order,
    /// ties by id, from just after `after`: the last entry of the previous page. A page costs
    /// the same however deep it is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::{DelayQueue, JobSet};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u32, _>::new(MemoryStore::new(), "jobs")?;
    /// queue.push_many(&[1, 2, 3], Duration::from_secs(60)).await?;
    /// let first = queue.list_after(JobSet::Waiting, None, 2).await?;
    /// let next = queue.list_after(JobSet::Waiting, first.last().map(|e| e.cursor()).as_ref(), 2).await?;
    /// assert_eq!((first.len(), next.len()), (2, 1));
    /// # Ok(()) }
    /// ```
    pub async fn list_after(
        &self,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<ListedEntry<T>>, QueueError> {
        let limit = limit.min(MAX_PAGE);
        let mut entries = Vec::new();
        for shard in self.shards.names() {
            for listed in self.store.list(shard, set, after, limit).await? {
                let envelope = listed.envelope.map(|bytes| match JobId::new(listed.id.as_str()) {
                    Ok(id) => self.decode(&id, &bytes),
                    Err(error) => Err(error.to_string()),
                });
                entries.push(ListedEntry {
                    id: listed.id,
                    at: listed.at,
                    envelope,
                    reason: listed.reason,
                });
            }
        }
        entries.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
        entries.truncate(limit);
        Ok(entries)
    }

    /// Moves dead jobs back to wait, due now, with their attempts as they were (so a job that
    /// fails again is buried again); how many were dead and moved.
    pub async fn requeue(&self, ids: &[JobId]) -> Result<usize, QueueError> {
        let mut moved = 0;
        for shard in self.shards.names() {
            let here: Vec<JobId> = ids
                .iter()
                .filter(|id| self.shards.of(id) == shard)
                .cloned()
                .collect();
            for page in here.chunks(MAX_PAGE) {
                moved += self.store.requeue(shard, page).await?;
            }
        }
        Ok(moved)
    }

    /// Moves every dead job with a valid id back to wait (see [`requeue`](Self::requeue)); how
    /// many moved. Entries that are not jobs of ours stay in the dead-letter set.
    pub async fn requeue_dead(&self) -> Result<usize, QueueError> {
        let mut moved = 0;
        for shard in self.shards.names() {
            let mut after: Option<ListCursor> = None;
            loop {
                let page = self
                    .store
                    .list(shard, JobSet::Dead, after.as_ref(), MAX_PAGE)
                    .await?;
                let Some(last) = page.last() else {
                    break;
                };
                after = Some(ListCursor {
                    at: last.at,
                    id: last.id.clone(),
                });
                let ids: Vec<JobId> = page
                    .iter()
                    .filter_map(|entry| JobId::new(entry.id.as_str()).ok())
                    .collect();
                moved += self.store.requeue(shard, &ids).await?;
            }
        }
        Ok(moved)
    }

    /// Deletes every job of `set`, bytes and all; how many.
    pub async fn purge(&self, set: JobSet) -> Result<usize, QueueError> {
        let mut purged = 0;
        for shard in self.shards.names() {
            loop {
                let now_purged = self.store.purge(shard, set, MAX_PAGE).await?;
                purged += now_purged;
                if now_purged < MAX_PAGE {
                    break;
                }
            }
        }
        Ok(purged)
    }

    /// Wake-ups for a scheduler of this queue: any shard's.
    pub fn wakeups(&self) -> Wakeups {
        Wakeups::merge(
            self.shards
                .names()
                .iter()
                .map(|shard| self.store.wakeups(shard))
                .collect(),
        )
    }
}
