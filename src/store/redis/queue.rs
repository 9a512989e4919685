//! The delay-queue operations of the Redis store: one Lua script each.

use std::time::{Duration, SystemTime};

use redis::Script;
use tokio::sync::watch;

use super::RedisStore;
use super::claim_reply::{PackedJob, packed_jobs};
use super::keys::{self, QueueKeys};
use super::lossy_text::LossyText;
use super::script_call::ScriptCall;
use super::scripts::{
    QUEUE_ACK, QUEUE_BURY, QUEUE_BURY_WAITING, QUEUE_CANCEL, QUEUE_CLAIM, QUEUE_EXTEND, QUEUE_PUSH_MANY,
    QUEUE_RETRY,
};
use super::wake::forward_wakeups;
use crate::error::StoreError;
use crate::lock::LockToken;
use crate::queue::rules::NOT_A_JOB_ID;
use crate::queue::{
    Cancelled, ClaimBatch, ClaimLimits, Counters, Due, Hold, JobGroup, JobId, MAX_PAGE, QueueCore, QueueName,
    RawClaim, Retention, Wakeups,
};
use crate::store::RedisConnection;
use crate::time::{from_epoch_ms, millis, to_epoch_ms, ttl_millis};

impl<Conn> RedisStore<Conn> {
    pub(super) fn keys(&self, queue: &QueueName) -> QueueKeys {
        QueueKeys::new(&self.prefix, queue)
    }

    /// Buries the entry `id` as found in the queue, valid job id or not.
    async fn bury_found(
        &self,
        queue: &QueueName,
        id: &[u8],
        hold: Hold,
        reason: &str,
        envelope: Option<Vec<u8>>,
        counters: Counters,
    ) -> Result<bool, StoreError>
    where
        Conn: RedisConnection,
    {
        let buried: bool = self
            .queue_script(&QUEUE_BURY, queue)
            .arg(id)
            .arg(lease_name(hold))
            .arg(hold.position())
            .arg(reason)
            .arg(envelope.unwrap_or_default())
            .arg(counters.as_arg())
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(buried)
    }

    /// A call of a queue script on `queue`: every queue script takes the same keys, in the
    /// order the prelude names them, and the wake channel as its first argument.
    pub(super) fn queue_script<'a>(&self, script: &'a Script, queue: &QueueName) -> ScriptCall<'a> {
        queue_call(script, &self.keys(queue), [])
    }

    /// A call of a queue script that ends jobs' waits (claim, cancel, burial of a waiting job,
    /// purge): the queue's keys, then its coalesce records (`KEYS[19]`, `KEYS[20]`), which
    /// the script forgets for the jobs that no longer wait. The names are built once.
    pub(super) fn waits_ending_script<'a>(&self, script: &'a Script, queue: &QueueName) -> ScriptCall<'a> {
        let keys = self.keys(queue);
        queue_call(script, &keys, keys.pending())
    }
}

/// A call of `script` on the queue of `keys`: its keys in the order the prelude names them,
/// then the script's own `more`, and the wake channel as its first argument.
pub(super) fn queue_call<'a, 'k>(
    script: &'a Script,
    keys: &'k QueueKeys,
    more: impl IntoIterator<Item = &'k str, IntoIter: Clone>,
) -> ScriptCall<'a> {
    let mut call = ScriptCall::new(script, keys.in_script_order().into_iter().chain(more));
    call.arg(keys.wake());
    call
}

/// A job's group as the scripts store it (`GROUPS`), `''` for none.
pub(super) fn stored_group(group: Option<&JobGroup>) -> String {
    group.map(JobGroup::stored).unwrap_or_default()
}

/// How a push script reads a due time: `in` a delay, or `at` an epoch time, in ms.
pub(super) fn due_args(due: Due) -> (&'static str, u64) {
    match due {
        Due::In(delay) => ("in", millis(delay)),
        Due::At(at) => ("at", u64::try_from(to_epoch_ms(at)).unwrap_or(0)),
    }
}

/// One entry of the list script's reply: id bytes, time ms, envelope, bury reason.
pub(super) type ListReply = (Vec<u8>, i64, Option<Vec<u8>>, Option<LossyText>);

/// The name of a claim's lease, as the claim script writes it: `<token>:<claim>`.
fn lease_name(hold: Hold) -> Vec<u8> {
    let mut name = hold.token.to_hex().to_vec();
    name.push(b':');
    name.extend_from_slice(hold.claim.to_string().as_bytes());
    name
}

/// A job id read back from a claim, or its bytes when no job of ours can have it (another
/// client wrote the entry): the claim script leaves that check to us.
fn job_id(id: &[u8]) -> Result<JobId, &[u8]> {
    std::str::from_utf8(id)
        .ok()
        .and_then(JobId::from_stored)
        .ok_or(id)
}

impl<Conn: RedisConnection> QueueCore for RedisStore<Conn> {
    async fn push_many_in_group(
        &self,
        queue: &QueueName,
        jobs: &[(JobId, Vec<u8>)],
        due: Due,
        group: Option<&JobGroup>,
    ) -> Result<(SystemTime, Vec<bool>), StoreError> {
        self.prepare().await?;
        let (mode, at) = due_args(due);
        let mut invocation = self.queue_script(&QUEUE_PUSH_MANY, queue);
        invocation.arg(mode).arg(at).arg(stored_group(group));
        for (id, envelope) in jobs.iter().take(MAX_PAGE) {
            invocation.arg(id.as_str()).arg(envelope.as_slice());
        }
        let (due_ms, stored): (i64, Vec<bool>) = invocation.invoke(&mut self.conn.clone()).await?;
        Ok((from_epoch_ms(due_ms), stored))
    }

    async fn claim(
        &self,
        queue: &QueueName,
        max: usize,
        lease: Duration,
        token: LockToken,
        limits: ClaimLimits,
        counters: Counters,
    ) -> Result<ClaimBatch, StoreError> {
        self.prepare().await?;
        let ClaimLimits {
            max_envelope,
            max_expiries,
        } = limits;
        let (wait_ms, first_fence, packed): (i64, u64, Vec<u8>) = self
            .waits_ending_script(&QUEUE_CLAIM, queue)
            .arg(max)
            .arg(ttl_millis(lease))
            .arg(token)
            .arg(max_envelope)
            .arg(max_expiries)
            .arg(counters.as_arg())
            .invoke(&mut self.conn.clone())
            .await?;
        // The claim's first job has the claim's first fence: the others follow it, one apart.
        let claim = first_fence;
        let mut jobs = Vec::new();
        let claimed = packed_jobs(&packed).map_err(StoreError::Protocol)?;
        for (fence, PackedJob { due_ms, id, envelope }) in (first_fence..).zip(claimed) {
            let hold = Hold { token, claim, fence };
            match job_id(id) {
                Ok(id) => jobs.push(RawClaim {
                    id,
                    due: from_epoch_ms(due_ms),
                    envelope: envelope.to_vec(),
                    fence,
                    claim,
                }),
                // Never fail the batch for one entry: the others are in flight under our token.
                Err(found) => {
                    tracing::error!(queue = %queue, job_id = %String::from_utf8_lossy(found), "not a job id: burying the entry");
                    if let Err(error) = self
                        .bury_found(queue, found, hold, NOT_A_JOB_ID, None, counters)
                        .await
                    {
                        tracing::warn!(%error, "cannot bury it now; it returns after its lease");
                    }
                }
            }
        }
        Ok(ClaimBatch {
            jobs,
            next_in: u64::try_from(wait_ms).ok().map(Duration::from_millis),
        })
    }

    async fn ack(
        &self,
        queue: &QueueName,
        jobs: &[(&JobId, Hold)],
        retention: Option<Retention>,
        counters: Counters,
    ) -> Result<Vec<bool>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.queue_script(&QUEUE_ACK, queue);
        match retention {
            Some(retention) => invocation.arg(retention.max_count).arg(millis(retention.max_age)),
            None => invocation.arg(0).arg(0),
        };
        invocation.arg(counters.as_arg());
        // A claim's jobs mostly come together: its lease's name is written once for them.
        let mut named: Option<(Hold, Vec<u8>)> = None;
        for (id, hold) in jobs.iter().take(MAX_PAGE) {
            let name = match named.take() {
                Some((of, name)) if (of.token, of.claim) == (hold.token, hold.claim) => name,
                _ => lease_name(*hold),
            };
            invocation.arg(id.as_str()).arg(&name).arg(hold.position());
            named = Some((*hold, name));
        }
        let acked: Vec<u8> = invocation.invoke(&mut self.conn.clone()).await?;
        acked
            .iter()
            .map(|flag| match flag {
                b'1' => Ok(true),
                b'0' => Ok(false),
                _ => Err(StoreError::Protocol(format!(
                    "an ack answered {:?}, not a 1 or 0 per job",
                    String::from_utf8_lossy(&acked)
                ))),
            })
            .collect()
    }

    async fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        envelope: Option<Vec<u8>>,
        delay: Duration,
        counters: Counters,
    ) -> Result<Option<SystemTime>, StoreError> {
        let due: i64 = self
            .queue_script(&QUEUE_RETRY, queue)
            .arg(id.as_str())
            .arg(lease_name(hold))
            .arg(hold.position())
            .arg(envelope.unwrap_or_default())
            .arg(millis(delay))
            .arg(counters.as_arg())
            .invoke(&mut self.conn.clone())
            .await?;
        Ok((due >= 0).then(|| from_epoch_ms(due)))
    }

    async fn bury(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        reason: &str,
        envelope: Option<Vec<u8>>,
        counters: Counters,
    ) -> Result<bool, StoreError> {
        self.bury_found(queue, id.as_str().as_bytes(), hold, reason, envelope, counters)
            .await
    }

    async fn bury_waiting(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: &str,
        counters: Counters,
    ) -> Result<bool, StoreError> {
        self.prepare().await?;
        let buried: bool = self
            .waits_ending_script(&QUEUE_BURY_WAITING, queue)
            .arg(id.as_str())
            .arg(reason)
            .arg(counters.as_arg())
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(buried)
    }

    async fn extend_lease(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let extended: bool = self
            .queue_script(&QUEUE_EXTEND, queue)
            .arg(id.as_str())
            .arg(lease_name(hold))
            .arg(hold.position())
            .arg(ttl_millis(lease))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(extended)
    }

    async fn cancel(&self, queue: &QueueName, id: &JobId) -> Result<Cancelled, StoreError> {
        let cancelled: i64 = self
            .waits_ending_script(&QUEUE_CANCEL, queue)
            .arg(id.as_str())
            .invoke(&mut self.conn.clone())
            .await?;
        match cancelled {
            1 => Ok(Cancelled::Deleted),
            0 => Ok(Cancelled::NotFound),
            -1 => Ok(Cancelled::InFlight),
            other => Err(StoreError::Protocol(format!("cancel answered {other}"))),
        }
    }

    async fn register(
        &self,
        queue: &QueueName,
        shards: usize,
        counters: Option<Counters>,
    ) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.sadd(keys::registry_key(&self.prefix), queue.as_str())
            .ignore()
            .hset(keys::registry_shards_key(&self.prefix), queue.as_str(), shards)
            .ignore();
        let uncounted = keys::registry_uncounted_key(&self.prefix);
        match counters {
            Some(Counters::Off) => pipe.sadd(uncounted, queue.as_str()).ignore(),
            Some(Counters::On) => pipe.srem(uncounted, queue.as_str()).ignore(),
            None => &mut pipe,
        };
        let () = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    fn wakeups(&self, queue: &QueueName) -> Wakeups {
        let (signal, receiver) = watch::channel(0);
        let subscription = self.pubsub.clone().map(|clients| {
            tokio::spawn(forward_wakeups(
                clients,
                self.keys(queue).wake().to_string(),
                signal,
            ))
        });
        Wakeups::new(receiver, subscription)
    }
}
