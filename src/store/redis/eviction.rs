//! The check of the server's eviction policy at connect: a policy that can evict the crate's
//! keys loses held locks (they have TTLs: even the `volatile-*` policies pick them) and
//! accepted jobs, silently.

use redis::aio::ConnectionLike;

use crate::error::StoreError;

/// The only policy under which Redis never deletes a key to make room.
const SAFE_POLICY: &str = "noeviction";

/// Reads `maxmemory-policy` and, when it can evict, logs at error level, or fails with
/// [`StoreError::EvictionPolicy`] when `refuse` is set. A server whose ACL forbids `CONFIG GET`
/// (or that answers oddly) is let through quietly: the check is advice, not a gate.
pub(super) async fn check_eviction_policy<Conn: ConnectionLike>(
    conn: &mut Conn,
    refuse: bool,
) -> Result<(), StoreError> {
    let reply: Result<Vec<String>, redis::RedisError> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    let policy = match reply {
        Ok(pair) => match pair.into_iter().nth(1) {
            Some(policy) => policy,
            None => return Ok(()),
        },
        Err(error) => {
            tracing::debug!(%error, "cannot read maxmemory-policy; the eviction check is skipped");
            return Ok(());
        }
    };
    if policy == SAFE_POLICY {
        return Ok(());
    }
    if refuse {
        return Err(StoreError::EvictionPolicy { policy });
    }
    tracing::error!(
        %policy,
        "Redis may evict held locks and accepted jobs under memory pressure: set maxmemory-policy to noeviction"
    );
    Ok(())
}
