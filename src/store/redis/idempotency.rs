//! The request records of the Redis store: `lua/queue_request.lua`.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::RedisStore;
use super::keys::QueueKeys;
use super::scripts::QUEUE_REQUEST;
use crate::error::StoreError;
use crate::idempotency::{Begun, IdempotencyStore, Seen};
use crate::queue::{JobId, QueueName};
use crate::store::time::millis;

impl<Conn> IdempotencyStore for RedisStore<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn begin_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Duration,
    ) -> Result<Begun, StoreError> {
        self.prepare().await?;
        let found: String = self
            .queue_script(&QUEUE_REQUEST, queue)
            .key(QueueKeys::request(&self.prefix, queue, id))
            .arg(id.as_str())
            .arg("begin")
            .arg(millis(hold))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match found.as_str() {
            "" => Begun::New,
            "running" => Begun::Duplicate(Seen::Running),
            "finished" => Begun::Duplicate(Seen::Finished),
            "waiting" => Begun::Duplicate(Seen::Waiting),
            "in_flight" => Begun::Duplicate(Seen::InFlight),
            "dead" => Begun::Duplicate(Seen::Dead),
            "done" => Begun::Duplicate(Seen::Done),
            other => {
                return Err(StoreError::Protocol(format!(
                    "the request record of {id} reads {other:?}"
                )));
            }
        })
    }

    async fn extend_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        self.prepare().await?;
        let found: String = self
            .queue_script(&QUEUE_REQUEST, queue)
            .key(QueueKeys::request(&self.prefix, queue, id))
            .arg(id.as_str())
            .arg("extend")
            .arg(millis(hold))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(found == "running")
    }

    async fn end_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.prepare().await?;
        let _: String = self
            .queue_script(&QUEUE_REQUEST, queue)
            .key(QueueKeys::request(&self.prefix, queue, id))
            .arg(id.as_str())
            .arg("end")
            .arg(keep.map_or(0, millis))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}
