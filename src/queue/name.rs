//! Validated queue names and the Redis keys of a queue.

use std::fmt;
use std::sync::Arc;

use crate::error::KeyError;
use crate::key::{Prefix, validate_name};

/// The longest queue name accepted, in bytes.
pub const MAX_QUEUE_NAME_LEN: usize = 256;

/// A validated queue name: non-empty, at most [`MAX_QUEUE_NAME_LEN`] bytes, any content.
///
/// ```
/// use redefer::queue::QueueName;
///
/// assert_eq!(QueueName::new("orders")?.as_str(), "orders");
/// assert!(QueueName::new("").is_err());
/// # Ok::<(), redefer::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QueueName(Arc<str>);

impl QueueName {
    /// Validates a queue name.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        validate_name("queue name", &name, MAX_QUEUE_NAME_LEN)?;
        Ok(QueueName(name.into()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The Redis keys of one queue; all carry the hash tag `{<encoded name>}`, so every script of
/// the queue runs on one Redis Cluster node.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys {
    /// zset: job id -> due time (ms since the epoch, server clock).
    pub(crate) delayed: String,
    /// zset: job id -> lease deadline (ms).
    pub(crate) inflight: String,
    /// hash: job id -> envelope bytes.
    pub(crate) jobs: String,
    /// hash: job id -> lease token of the claimer that holds it.
    pub(crate) leases: String,
    /// zset: job id -> time buried (ms).
    pub(crate) dead: String,
    /// hash: job id -> why it was buried.
    pub(crate) errors: String,
    /// hash: job id -> how many of its leases ran out.
    pub(crate) expiries: String,
    /// pub/sub channel: a job became the first due.
    pub(crate) wake: String,
}

impl QueueKeys {
    /// The sorted set that holds `set`.
    pub(crate) fn set(&self, set: crate::store::JobSet) -> &str {
        match set {
            crate::store::JobSet::Waiting => &self.delayed,
            crate::store::JobSet::InFlight => &self.inflight,
            crate::store::JobSet::Dead => &self.dead,
        }
    }

    pub(crate) fn new(prefix: &Prefix, name: &QueueName) -> Self {
        let key = |suffix| prefix.tagged("q", name.as_str(), suffix);
        QueueKeys {
            delayed: key(":delayed"),
            inflight: key(":inflight"),
            jobs: key(":jobs"),
            leases: key(":leases"),
            dead: key(":dead"),
            errors: key(":errors"),
            expiries: key(":expiries"),
            wake: key(":wake"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_queue_shares_one_hash_tag() {
        let keys = QueueKeys::new(&Prefix::default(), &QueueName::new("or{d}ers").unwrap());
        assert_eq!(keys.delayed, "redefer:q:{or%7Bd%7Ders}:delayed");
        for key in [
            &keys.inflight,
            &keys.jobs,
            &keys.leases,
            &keys.dead,
            &keys.errors,
            &keys.expiries,
        ] {
            assert!(key.starts_with("redefer:q:{or%7Bd%7Ders}:"), "{key}");
        }
    }
}
