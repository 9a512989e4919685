//! Reading the locks a Redis store holds, for operators.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::{RedisStore, keys};
use crate::error::StoreError;
use crate::key::decode_tag;

/// A lock as found in Redis.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LockInfo {
    /// The lock key, as the application gave it.
    pub key: String,
    /// How long it still lives; `None` for a key without a TTL (written by another tool).
    pub remaining: Option<Duration>,
    /// The fencing token of the current holder (the key's counter).
    pub fence: u64,
    /// How many wait in the key's line.
    pub waiters: u64,
    /// The waiter the key is reserved for, while it is handed over.
    pub reserved_for: Option<String>,
}

/// `*`, `?`, `[`, `]` and `\` escaped for a SCAN pattern.
fn glob_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            matches!(c, '*' | '?' | '[' | ']' | '\\')
                .then_some('\\')
                .into_iter()
                .chain([c])
        })
        .collect()
}

impl<Conn> RedisStore<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Up to `limit` held locks, found by `SCAN` (one node: on Redis Cluster, run it against each
    /// master). A key whose hash tag no lock key encodes to is reported under its raw name.
    pub async fn locks(&self, limit: usize) -> Result<Vec<LockInfo>, StoreError> {
        let lock_prefix = keys::lock_namespace(&self.prefix);
        let pattern = format!("{}{{*", glob_escape(&lock_prefix));
        let mut conn = self.conn.clone();
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await?;
            keys.extend(found);
            cursor = next;
            if cursor == 0 || keys.len() >= limit {
                break;
            }
        }
        keys.truncate(limit);
        let mut locks = Vec::with_capacity(keys.len());
        for key in keys {
            let tag = key.strip_prefix(&lock_prefix).unwrap_or(&key);
            let found = keys::LockKeys::of_found_tag(&self.prefix, tag);
            let (pttl, fence, waiters, holder): (i64, Option<u64>, u64, Option<String>) = redis::pipe()
                .pttl(&key)
                .get(&found.fence)
                .zcard(&found.waiters)
                .get(&key)
                .query_async(&mut conn)
                .await?;
            if pttl == -2 {
                continue; // released since the scan
            }
            let name = tag
                .strip_prefix('{')
                .and_then(|t| t.strip_suffix('}'))
                .and_then(decode_tag);
            locks.push(LockInfo {
                key: name.unwrap_or(key),
                remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
                fence: fence.unwrap_or(0),
                waiters,
                reserved_for: holder.and_then(|holder| holder.strip_prefix('@').map(str::to_string)),
            });
        }
        Ok(locks)
    }
}
