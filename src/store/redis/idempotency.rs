//! The request records of the Redis store: `lua/request_record.lua`.

use std::time::Duration;

use super::RedisStore;
use super::keys::QueueKeys;
use super::queue::queue_call;
use super::scripts::REQUEST_RECORD;
use crate::error::StoreError;
use crate::idempotency::{Begun, IdempotencyStore, Seen};
use crate::lock::LockToken;
use crate::queue::{JobId, QueueName};
use crate::store::RedisConnection;
use crate::time::millis;

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// One call of `request_record.lua` on request `id`'s record, as `request`: `mode`
    /// (`begin`, `extend`, `end`) with its milliseconds; what the script answers.
    async fn request_record(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        mode: &str,
        ms: u64,
    ) -> Result<String, StoreError> {
        self.prepare().await?;
        let (keys, record) = (self.keys(queue), QueueKeys::request(&self.prefix, queue, id));
        Ok(queue_call(&REQUEST_RECORD, &keys, [record.as_str()])
            .arg(id.as_str())
            .arg(mode)
            .arg(ms)
            .arg(request)
            .invoke(&mut self.conn.clone())
            .await?)
    }
}

impl<Conn: RedisConnection> IdempotencyStore for RedisStore<Conn> {
    async fn begin_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        hold: Duration,
    ) -> Result<Begun, StoreError> {
        let found = self
            .request_record(queue, id, request, "begin", millis(hold))
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
        request: LockToken,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self
            .request_record(queue, id, request, "extend", millis(hold))
            .await?
            == "running")
    }

    async fn end_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.request_record(queue, id, request, "end", keep.map_or(0, millis))
            .await?;
        Ok(())
    }
}
