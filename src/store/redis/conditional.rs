//! The server's own conditional commands, where it has them: `DELIFEQ key value` (Valkey 9)
//! and `SET key value IFEQ value` (Valkey 8.1): a release or extend of a lock nobody waits
//! for without a script. Detected once at connect by trying them on a key that does not exist
//! (no effect either way); a server without them (Redis 7), or a user whose ACL refuses them,
//! keeps the scripts.
//!
//! They compare the whole value, so they act only on a holder's bare token: once someone
//! waits behind the holder, its value carries the line mark and the scripts hand it over.

use redis::aio::ConnectionLike;

/// Which of the conditional commands the server runs for us.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Conditional {
    /// `DELIFEQ key value`: deletes when the value is `value`; 1 or 0.
    pub(crate) delifeq: bool,
    /// `SET key value IFEQ value PX ms`: sets when the value is `value`; OK or nil.
    pub(crate) set_ifeq: bool,
    /// The server is a node of a Redis Cluster (`INFO cluster`): one script takes only keys of
    /// one hash slot, so a set of keys is taken slot by slot.
    pub(crate) cluster: bool,
}

impl Conditional {
    /// Tries each command on `probe`, a key no one writes.
    pub(crate) async fn detect(conn: &mut impl ConnectionLike, probe: &str) -> Conditional {
        let delifeq = redis::cmd("DELIFEQ")
            .arg(probe)
            .arg("-")
            .query_async::<i64>(conn)
            .await
            .is_ok();
        let set_ifeq = redis::cmd("SET")
            .arg(probe)
            .arg("-")
            .arg("IFEQ")
            .arg("+")
            .query_async::<Option<String>>(conn)
            .await
            .is_ok();
        // A cluster connection sends INFO to every node and answers with each node's text.
        let cluster = redis::cmd("INFO")
            .arg("cluster")
            .query_async::<redis::Value>(conn)
            .await
            .is_ok_and(|info| says_cluster_enabled(&info));
        Conditional {
            delifeq,
            set_ifeq,
            cluster,
        }
    }
}

/// Whether an `INFO cluster` reply (one node's text, or each node's) says cluster mode is on.
fn says_cluster_enabled(info: &redis::Value) -> bool {
    match info {
        redis::Value::BulkString(text) => text.windows(17).any(|line| line == b"cluster_enabled:1"),
        redis::Value::VerbatimString { text, .. } | redis::Value::SimpleString(text) => {
            text.contains("cluster_enabled:1")
        }
        redis::Value::Array(values) | redis::Value::Set(values) => values.iter().any(says_cluster_enabled),
        redis::Value::Map(pairs) => pairs.iter().any(|(_, value)| says_cluster_enabled(value)),
        _ => false,
    }
}
