//! The pending-job operation of the Redis store: one call of `lua/queue_pending.lua`.

use super::RedisStore;
use super::keys::QueueKeys;
use super::queue::{due_args, stored_group};
use super::scripts::QUEUE_PENDING;
use crate::error::StoreError;
use crate::queue::{Due, JobId, PendingJob, PendingPush, PendingStore, QueueName};
use crate::store::RedisConnection;
use crate::time::{from_epoch_ms, millis};

/// The script's reply: status, job id, revision, due ms.
type PendingReply = (i64, String, u64, i64);

impl<Conn: RedisConnection> PendingStore for RedisStore<Conn> {
    async fn push_pending(
        &self,
        queue: &QueueName,
        job: PendingJob<'_>,
        due: Due,
    ) -> Result<PendingPush, StoreError> {
        self.prepare().await?;
        let rules = job.rules;
        let (mode, at) = due_args(due);
        let (period, max_wait) = match rules.debounce {
            Some(debounce) => (
                millis(debounce.period).to_string(),
                millis(debounce.max_wait).to_string(),
            ),
            None => (String::new(), String::new()),
        };
        let (status, pending, revision, due_ms): PendingReply = self
            .waits_ending_script(&QUEUE_PENDING, queue)
            .arg(job.id.as_str())
            .arg(job.envelope)
            .arg(mode)
            .arg(at)
            .arg(rules.keep.as_str())
            .arg(QueueKeys::pending_field(job.key))
            .arg(period)
            .arg(max_wait)
            .arg(rules.counters.as_arg())
            .arg(millis(rules.arrived_ago))
            .arg(stored_group(job.group))
            .invoke(&mut self.conn.clone())
            .await?;
        let pending = || {
            JobId::new(pending.clone())
                .map_err(|error| StoreError::Protocol(format!("a pending job's id is not one: {error}")))
        };
        Ok(match status {
            0 => PendingPush::Moved,
            1 => PendingPush::Joined {
                id: pending()?,
                revision,
                due: from_epoch_ms(due_ms),
            },
            2 => PendingPush::EncodeFor(pending()?),
            3 => PendingPush::Stored {
                due: from_epoch_ms(due_ms),
            },
            4 => PendingPush::Newer {
                id: pending()?,
                revision,
                due: from_epoch_ms(due_ms),
            },
            other => {
                return Err(StoreError::Protocol(format!(
                    "the pending push answered status {other}"
                )));
            }
        })
    }
}
