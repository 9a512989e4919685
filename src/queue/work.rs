//! What workers do: claim due jobs under a lease, and settle each (ack, fail, bury, put back
//! to wait for its lock or slot, extend the lease); and the wake-ups that say when to claim.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ClaimLimits, Claimed, ClaimedJob, Codec, DelayQueue, Envelope, Hold, JobId, Lease, MAX_PAGE};
use super::{QueueCore, QueueError, Wakeups};
use crate::token::LockToken;

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

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: QueueCore,
    Enc: Codec,
{
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
                            hold: Hold::of(token, &raw),
                            id: raw.id,
                            shard: shard.clone(),
                            attempt: envelope.attempt,
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
                            .bury(
                                shard,
                                &raw.id,
                                Hold::of(token, &raw),
                                &reason,
                                None,
                                self.counters,
                            )
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
                let jobs: Vec<(&JobId, Hold)> =
                    page.iter().map(|&i| (&leases[i].id, leases[i].hold)).collect();
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
                    lease.hold,
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
                lease.hold,
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
            .bury(&lease.shard, &lease.id, lease.hold, reason, None, self.counters)
            .await?)
    }

    /// Gives a claimed job back, due now and with its attempt unchanged, for another claimer
    /// to take at once (a scheduler shutting down); `false` when the lease ran out.
    pub async fn release(&self, lease: &Lease) -> Result<bool, QueueError> {
        self.postpone(lease, Duration::ZERO).await
    }

    /// Puts a claimed job back to wait `opens_in` for its key's next slot (a throttle's,
    /// booked for it), without using an attempt; once it did that the policy's
    /// [`max_lock_waits`](crate::queue::RetryPolicy::max_lock_waits) times, it is buried instead.
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
            .retry(&lease.shard, &lease.id, lease.hold, counted, wait, self.counters)
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
    /// [`lock_wait_fallback`](crate::queue::RetryPolicy::lock_wait_fallback) for `expected_wait` and the
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
            .retry(&lease.shard, &lease.id, lease.hold, None, delay, self.counters)
            .await?;
        Ok(due.is_some())
    }

    /// Extends the lease of a claimed job's claim to `duration` from now (the claim's other jobs
    /// share it); `false` when it ran out before, or the job was settled.
    pub async fn extend_lease(&self, lease: &Lease, duration: Duration) -> Result<bool, QueueError> {
        Ok(self
            .store
            .extend_lease(&lease.shard, &lease.id, lease.hold, duration)
            .await?)
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
