//! What a held key keeps beside its holders, the same for a mutex and a semaphore: its fencing
//! counter, its last hold, the channel that announces its handoffs, and when it was last used
//! (the `FENCE` and `HOLDS` keys and the wake-up channel of the Redis scripts).

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::idle::{LastUse, shrink};
use crate::key::LockKey;
use crate::lock::{Handoffs, Waiter};

/// The records of every key of one family (the mutex's, or the semaphore's).
#[derive(Default)]
pub(super) struct KeyRecords {
    /// Per-key fencing counters; they outlive the holders, and are forgotten with the rest once
    /// the key falls idle (a forgotten counter starts again at the clock).
    pub(super) fences: HashMap<LockKey, u64>,
    /// Per-key last hold, in ms.
    pub(super) holds: HashMap<LockKey, Duration>,
    announcements: HashMap<LockKey, broadcast::Sender<String>>,
    last_use: LastUse,
}

impl KeyRecords {
    /// Notes a use of `key`. When a sweep is due, forgets the records of the keys idle for a
    /// minute and returns them, for their owner to forget its own state of them. The sweep
    /// comes first: a key used again after a minute starts afresh, as in Redis.
    pub(super) fn touch(&mut self, key: &LockKey, now: Instant) -> Option<Vec<LockKey>> {
        let idle = self.last_use.sweep(now);
        self.last_use.touch(key, now);
        let idle = idle?;
        for key in &idle {
            self.fences.remove(key);
            self.holds.remove(key);
        }
        self.announcements.retain(|_, sender| sender.receiver_count() > 0);
        shrink(&mut self.fences);
        shrink(&mut self.holds);
        shrink(&mut self.announcements);
        Some(idle)
    }

    /// `key`'s fencing counter, created at 0 (the first raise takes it to the clock).
    pub(super) fn counter(&mut self, key: &LockKey) -> &mut u64 {
        self.fences.entry(key.clone()).or_insert(0)
    }

    /// The last fencing token `key` handed out (0 for none), for the listing.
    pub(super) fn fence(&self, key: &LockKey) -> u64 {
        self.fences.get(key).copied().unwrap_or(0)
    }

    /// Records a hold of `key`, in whole ms: its typical hold is its last reported one (`HOLDS`
    /// of the scripts).
    pub(super) fn record_hold(&mut self, key: &LockKey, held: Duration) {
        self.holds
            .insert(key.clone(), Duration::from_millis(held.as_millis() as u64));
    }

    /// `key`'s typical hold, once one was recorded.
    pub(super) fn typical_hold(&self, key: &LockKey) -> Option<Duration> {
        self.holds.get(key).copied()
    }

    /// The handoffs of `key`, announced from now on.
    pub(super) fn handoffs(&mut self, key: &LockKey) -> Handoffs {
        let receiver = self
            .announcements
            .entry(key.clone())
            .or_insert_with(|| broadcast::channel(64).0)
            .subscribe();
        Handoffs::new(receiver, None)
    }

    /// Tells `key`'s listeners that it was handed to `waiter`.
    pub(super) fn announce(&mut self, key: &LockKey, waiter: &Waiter) {
        if let Some(sender) = self.announcements.get(key)
            && sender.send(waiter.as_str().to_string()).is_err()
        {
            self.announcements.remove(key);
        }
    }
}
