//! What the memory store keeps beside a family's model (the mutex's, or the permits'): the
//! channel that announces each key's handoffs (the wake-up channel of the Redis scripts), when
//! each key was last used, and the origin of the models' clock.

use std::collections::HashMap;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::idle::LastUse;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::lock::Handoffs;
use crate::lock::model::Now;
use crate::shrink::shrink;

/// The records of every key of one family.
pub(crate) struct KeyRecords {
    announcements: HashMap<LockKey, broadcast::Sender<String>>,
    last_use: LastUse,
    /// The origin of the model's clock: tokio's, so that tests that pause time move it.
    origin: Instant,
}

impl Default for KeyRecords {
    fn default() -> Self {
        KeyRecords {
            announcements: HashMap::new(),
            last_use: LastUse::default(),
            origin: Instant::now(),
        }
    }
}

impl KeyRecords {
    /// `now` on the model's clock, and the wall clock for fencing tokens.
    pub(crate) fn now(&self, now: Instant) -> Now {
        Now {
            time: now.saturating_duration_since(self.origin),
            wall_micros: crate::time::now_micros(),
        }
    }

    /// Notes a use of `key`. When a sweep is due, returns the keys idle for a minute, for the
    /// model to forget what it keeps of them. The sweep comes first: a key used again after a
    /// minute starts afresh, as in Redis.
    pub(crate) fn touch(&mut self, key: &LockKey, now: Instant) -> Option<Vec<LockKey>> {
        let idle = self.last_use.sweep(now);
        self.last_use.touch(key, now);
        let idle = idle?;
        self.announcements.retain(|_, sender| sender.receiver_count() > 0);
        shrink(&mut self.announcements);
        Some(idle)
    }

    /// The handoffs of `key`, announced from now on.
    pub(crate) fn handoffs(&mut self, key: &LockKey) -> Handoffs {
        let receiver = self
            .announcements
            .entry(key.clone())
            .or_insert_with(|| broadcast::channel(64).0)
            .subscribe();
        Handoffs::new(receiver, None, true)
    }

    /// Tells `key`'s listeners that it was handed to `waiter`.
    pub(crate) fn announce(&mut self, key: &LockKey, waiter: &Waiter) {
        if let Some(sender) = self.announcements.get(key)
            && sender.send(waiter.as_str().to_string()).is_err()
        {
            self.announcements.remove(key);
        }
    }
}
