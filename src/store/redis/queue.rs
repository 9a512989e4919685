//! The delay-queue operations of the Redis store: one Lua script each.

use std::time::{Duration, SystemTime};

use redis::aio::ConnectionLike;
use tokio::sync::watch;

use super::RedisStore;
use super::lock::millis;
use super::scripts::{
    QUEUE_ACK, QUEUE_BURY, QUEUE_CANCEL, QUEUE_CLAIM, QUEUE_EXTEND, QUEUE_INSPECT, QUEUE_LIST, QUEUE_PURGE,
    QUEUE_PUSH, QUEUE_REQUEUE, QUEUE_RETRY, QUEUE_STATS,
};
use super::wake::forward_wakeups;
use crate::error::StoreError;
use crate::lock::LockToken;
use crate::queue::{JobId, QueueKeys, QueueName};
use crate::store::queue::{from_epoch_ms, to_epoch_ms};
use crate::store::{
    Cancelled, ClaimBatch, ClaimLimits, Due, JobSet, ListedJob, MAX_PAGE, QueueStats, QueueStore, RawClaim,
    RawJob, RawJobState, Wakeups,
};

impl<C> RedisStore<C> {
    fn keys(&self, queue: &QueueName) -> QueueKeys {
        QueueKeys::new(&self.prefix, queue)
    }
}

/// One entry of the list script's reply: id bytes, time ms, envelope, bury reason.
type ListReply = (Vec<u8>, i64, Option<Vec<u8>>, Option<String>);

/// A delay in milliseconds for a script: zero stays zero (due now), unlike a TTL.
fn delay_millis(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}

/// A job id read back from a claim; the claim script buries every id that would fail here.
fn job_id(id: String) -> Result<JobId, StoreError> {
    JobId::new(id).map_err(|error| StoreError::Protocol(format!("claim returned {error}")))
}

impl<C> QueueStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn push(
        &self,
        queue: &QueueName,
        id: &JobId,
        envelope: Vec<u8>,
        due: Due,
    ) -> Result<Option<SystemTime>, StoreError> {
        let keys = self.keys(queue);
        let (mode, at) = match due {
            Due::In(delay) => ("in", delay_millis(delay)),
            Due::At(at) => ("at", u64::try_from(to_epoch_ms(at)).unwrap_or(0)),
        };
        let (stored, due_ms): (i64, i64) = QUEUE_PUSH
            .key(&keys.delayed)
            .key(&keys.jobs)
            .arg(id.as_str())
            .arg(envelope)
            .arg(mode)
            .arg(at)
            .arg(&keys.wake)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((stored == 1).then(|| from_epoch_ms(due_ms)))
    }

    async fn claim(
        &self,
        queue: &QueueName,
        max: usize,
        lease: Duration,
        token: LockToken,
        limits: ClaimLimits,
    ) -> Result<ClaimBatch, StoreError> {
        let ClaimLimits {
            max_envelope,
            max_expiries,
        } = limits;
        let keys = self.keys(queue);
        let (wait_ms, claimed): (i64, Vec<(String, i64, Vec<u8>)>) = QUEUE_CLAIM
            .key(&keys.delayed)
            .key(&keys.inflight)
            .key(&keys.jobs)
            .key(&keys.leases)
            .key(&keys.dead)
            .key(&keys.errors)
            .key(&keys.expiries)
            .arg(max)
            .arg(millis(lease))
            .arg(token)
            .arg(max_envelope)
            .arg(max_expiries)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let jobs = claimed
            .into_iter()
            .map(|(id, due, envelope)| {
                Ok(RawClaim {
                    id: job_id(id)?,
                    due: from_epoch_ms(due),
                    envelope,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(ClaimBatch {
            jobs,
            next_in: u64::try_from(wait_ms).ok().map(Duration::from_millis),
        })
    }

    async fn ack(&self, queue: &QueueName, jobs: &[(&JobId, LockToken)]) -> Result<Vec<bool>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys(queue);
        let mut invocation = QUEUE_ACK.key(&keys.inflight);
        invocation.key(&keys.jobs).key(&keys.leases).key(&keys.expiries);
        for (id, token) in jobs.iter().take(MAX_PAGE) {
            invocation.arg(id.as_str()).arg(*token);
        }
        let acked: Vec<bool> = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(acked)
    }

    async fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: LockToken,
        envelope: Option<Vec<u8>>,
        delay: Duration,
    ) -> Result<Option<SystemTime>, StoreError> {
        let keys = self.keys(queue);
        let due: i64 = QUEUE_RETRY
            .key(&keys.delayed)
            .key(&keys.inflight)
            .key(&keys.jobs)
            .key(&keys.leases)
            .arg(id.as_str())
            .arg(token)
            .arg(envelope.unwrap_or_default())
            .arg(delay_millis(delay))
            .arg(&keys.wake)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((due >= 0).then(|| from_epoch_ms(due)))
    }

    async fn bury(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: LockToken,
        reason: &str,
        envelope: Option<Vec<u8>>,
    ) -> Result<bool, StoreError> {
        let keys = self.keys(queue);
        let buried: bool = QUEUE_BURY
            .key(&keys.inflight)
            .key(&keys.jobs)
            .key(&keys.leases)
            .key(&keys.dead)
            .key(&keys.errors)
            .key(&keys.expiries)
            .arg(id.as_str())
            .arg(token)
            .arg(reason)
            .arg(envelope.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(buried)
    }

    async fn extend_lease(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: LockToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let keys = self.keys(queue);
        let extended: bool = QUEUE_EXTEND
            .key(&keys.inflight)
            .key(&keys.leases)
            .arg(id.as_str())
            .arg(token)
            .arg(millis(lease))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(extended)
    }

    async fn cancel(&self, queue: &QueueName, id: &JobId) -> Result<Cancelled, StoreError> {
        let keys = self.keys(queue);
        let cancelled: i64 = QUEUE_CANCEL
            .key(&keys.delayed)
            .key(&keys.inflight)
            .key(&keys.jobs)
            .key(&keys.dead)
            .key(&keys.errors)
            .key(&keys.expiries)
            .arg(id.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        match cancelled {
            1 => Ok(Cancelled::Deleted),
            0 => Ok(Cancelled::NotFound),
            -1 => Ok(Cancelled::InFlight),
            other => Err(StoreError::Protocol(format!("cancel answered {other}"))),
        }
    }

    async fn inspect(&self, queue: &QueueName, id: &JobId) -> Result<RawJob, StoreError> {
        let keys = self.keys(queue);
        let (state, at, envelope, reason): (String, i64, Option<Vec<u8>>, Option<String>) = QUEUE_INSPECT
            .key(&keys.delayed)
            .key(&keys.inflight)
            .key(&keys.jobs)
            .key(&keys.dead)
            .key(&keys.errors)
            .arg(id.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        let at = from_epoch_ms(at);
        let state = match state.as_str() {
            "delayed" => RawJobState::Delayed { due: at },
            "inflight" => RawJobState::InFlight { lease_until: at },
            "dead" => RawJobState::Dead {
                buried_at: at,
                reason,
            },
            "missing" => RawJobState::Missing,
            other => return Err(StoreError::Protocol(format!("inspect answered state {other:?}"))),
        };
        Ok(RawJob { state, envelope })
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        let keys = self.keys(queue);
        let (waiting, due, in_flight, dead): (u64, u64, u64, u64) = QUEUE_STATS
            .key(&keys.delayed)
            .key(&keys.inflight)
            .key(&keys.dead)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(QueueStats {
            waiting,
            due,
            in_flight,
            dead,
        })
    }

    async fn list(
        &self,
        queue: &QueueName,
        set: JobSet,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ListedJob>, StoreError> {
        let keys = self.keys(queue);
        let page: Vec<ListReply> = QUEUE_LIST
            .key(keys.set(set))
            .key(&keys.jobs)
            .key(&keys.errors)
            .arg(offset)
            .arg(limit.min(MAX_PAGE))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(page
            .into_iter()
            .map(|(id, at, envelope, reason)| ListedJob {
                id: String::from_utf8_lossy(&id).into_owned(),
                at: from_epoch_ms(at),
                envelope,
                reason,
            })
            .collect())
    }

    async fn requeue(&self, queue: &QueueName, ids: &[JobId]) -> Result<usize, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let keys = self.keys(queue);
        let mut invocation = QUEUE_REQUEUE.key(&keys.dead);
        invocation
            .key(&keys.errors)
            .key(&keys.delayed)
            .key(&keys.expiries)
            .arg(&keys.wake);
        for id in ids.iter().take(MAX_PAGE) {
            invocation.arg(id.as_str());
        }
        let moved: usize = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(moved)
    }

    async fn purge(&self, queue: &QueueName, set: JobSet, limit: usize) -> Result<usize, StoreError> {
        let keys = self.keys(queue);
        let purged: usize = QUEUE_PURGE
            .key(keys.set(set))
            .key(&keys.jobs)
            .key(&keys.errors)
            .key(&keys.leases)
            .key(&keys.expiries)
            .arg(limit.clamp(1, MAX_PAGE))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(purged)
    }

    fn wakeups(&self, queue: &QueueName) -> Wakeups {
        let (signal, receiver) = watch::channel(0);
        let subscription = self
            .pubsub
            .clone()
            .map(|clients| tokio::spawn(forward_wakeups(clients, self.keys(queue).wake, signal)));
        Wakeups::new(receiver, subscription)
    }
}
