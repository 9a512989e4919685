//! The Redis store's operator capabilities of a queue: read it, change it, list the queues;
//! one Lua script each (the registry: one hash).

use super::RedisStore;
use super::keys::{self, QueueKeys};
use super::lossy_text::LossyText;
use super::queue::ListReply;
use super::scripts::{
    QUEUE_GROUPS, QUEUE_INSPECT, QUEUE_LIST, QUEUE_PAUSE, QUEUE_PURGE, QUEUE_REQUEUE, QUEUE_RUN_NOW,
    QUEUE_STATS,
};
use crate::error::StoreError;
use crate::queue::{
    ControlQueue, Counters, GroupWaiting, InspectQueue, JobId, JobSet, ListCursor, ListedJob, MAX_PAGE,
    MinuteActivity, QueueGroups, QueueName, QueueRegistry, QueueStats, RawJob, RawJobState, RegisteredQueue,
};
use crate::store::RedisConnection;
use crate::time::{from_epoch_ms, to_epoch_ms};

impl<Conn: RedisConnection> InspectQueue for RedisStore<Conn> {
    async fn inspect(&self, queue: &QueueName, id: &JobId) -> Result<RawJob, StoreError> {
        let (state, at, envelope, reason): (String, i64, Option<Vec<u8>>, Option<LossyText>) = self
            .queue_script(&QUEUE_INSPECT, queue)
            .arg(id.as_str())
            .invoke(&mut self.conn.clone())
            .await?;
        let at = from_epoch_ms(at);
        let state = match state.as_str() {
            "delayed" => RawJobState::Delayed { due: at },
            "inflight" => RawJobState::InFlight { lease_until: at },
            "dead" => RawJobState::Dead {
                buried_at: at,
                reason: reason.map(|LossyText(reason)| reason),
            },
            "done" => RawJobState::Done { finished_at: at },
            "missing" => RawJobState::Missing,
            other => return Err(StoreError::Protocol(format!("inspect answered state {other:?}"))),
        };
        Ok(RawJob { state, envelope })
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        let (waiting, due, in_flight, dead, done, paused): (u64, u64, u64, u64, u64, bool) = self
            .queue_script(&QUEUE_STATS, queue)
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(QueueStats {
            waiting,
            due,
            in_flight,
            dead,
            done,
            paused,
        })
    }

    async fn groups(&self, queue: &QueueName, most: usize) -> Result<QueueGroups, StoreError> {
        let (groups, largest): (u64, Vec<(LossyText, u64)>) = self
            .queue_script(&QUEUE_GROUPS, queue)
            .arg(most.min(MAX_PAGE))
            .invoke(&mut self.conn.clone())
            .await?;
        let largest = largest
            .into_iter()
            .map(|(LossyText(group), waiting)| GroupWaiting::new(group, waiting))
            .collect();
        Ok(QueueGroups::new(groups, largest))
    }

    async fn list(
        &self,
        queue: &QueueName,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<ListedJob>, StoreError> {
        let (after_ms, after_id) =
            after.map_or((0, ""), |cursor| (to_epoch_ms(cursor.at), cursor.id.as_str()));
        let page: Vec<ListReply> = self
            .queue_script(&QUEUE_LIST, queue)
            .arg(QueueKeys::set_name(set))
            .arg(after_ms)
            .arg(after_id)
            .arg(limit.min(MAX_PAGE))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(page
            .into_iter()
            .map(|(id, at, envelope, reason)| ListedJob {
                id: String::from_utf8_lossy(&id).into_owned(),
                at: from_epoch_ms(at),
                envelope,
                reason: reason.map(|LossyText(reason)| reason),
            })
            .collect())
    }

    async fn activity(&self, queue: &QueueName) -> Result<Vec<MinuteActivity>, StoreError> {
        // A plain read of one key: the hash is small (an hour of counters) and its own
        // `minute` field says which minute the counters run up to.
        let fields: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(self.keys(queue).activity())
            .query_async(&mut self.conn.clone())
            .await?;
        // Bytes another client wrote need not be UTF-8: such a field parses as no minute.
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(name, value)| {
                (
                    String::from_utf8_lossy(&name).into_owned(),
                    String::from_utf8_lossy(&value).into_owned(),
                )
            })
            .collect();
        Ok(MinuteActivity::from_hash(&fields))
    }
}

impl<Conn: RedisConnection> ControlQueue for RedisStore<Conn> {
    async fn pause(&self, queue: &QueueName, paused: bool) -> Result<bool, StoreError> {
        let was: bool = self
            .queue_script(&QUEUE_PAUSE, queue)
            .arg(if paused { "1" } else { "0" })
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(was)
    }

    async fn run_now(&self, queue: &QueueName, id: &JobId) -> Result<bool, StoreError> {
        let moved: bool = self
            .queue_script(&QUEUE_RUN_NOW, queue)
            .arg(id.as_str())
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(moved)
    }

    async fn requeue(&self, queue: &QueueName, ids: &[JobId]) -> Result<usize, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut invocation = self.queue_script(&QUEUE_REQUEUE, queue);
        for id in ids.iter().take(MAX_PAGE) {
            invocation.arg(id.as_str());
        }
        let moved: usize = invocation.invoke(&mut self.conn.clone()).await?;
        Ok(moved)
    }

    async fn purge(&self, queue: &QueueName, set: JobSet, limit: usize) -> Result<usize, StoreError> {
        let purged: usize = self
            .waits_ending_script(&QUEUE_PURGE, queue)
            .arg(QueueKeys::set_name(set))
            .arg(limit.clamp(1, MAX_PAGE))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(purged)
    }
}

impl<Conn: RedisConnection> QueueRegistry for RedisStore<Conn> {
    async fn registered(&self) -> Result<Vec<RegisteredQueue>, StoreError> {
        // Names and counts as bytes: a member that is not UTF-8 (another tool's, or damaged)
        // is listed as far as it reads, not a failed read of every queue.
        type Registry = (
            Vec<Vec<u8>>,
            std::collections::HashMap<Vec<u8>, Vec<u8>>,
            std::collections::HashSet<Vec<u8>>,
        );
        let (mut names, shards, uncounted): Registry = redis::pipe()
            .smembers(keys::registry_key(&self.prefix))
            .hgetall(keys::registry_shards_key(&self.prefix))
            .smembers(keys::registry_uncounted_key(&self.prefix))
            .query_async(&mut self.conn.clone())
            .await?;
        names.sort();
        Ok(names
            .into_iter()
            .map(|name| RegisteredQueue {
                // A count that does not parse (another client's) reads as one shard.
                shards: shards
                    .get(&name)
                    .and_then(|count| std::str::from_utf8(count).ok()?.parse().ok())
                    .filter(|count| (1..=crate::queue::MAX_SHARDS).contains(count))
                    .unwrap_or(1),
                counters: if uncounted.contains(&name) {
                    Counters::Off
                } else {
                    Counters::On
                },
                name: String::from_utf8_lossy(&name).into_owned(),
            })
            .collect())
    }
}
