//! When the memory store forgets a key's state: the same rule as the Redis store's keys
//! ([`IDLE_KEY_TTL`] after the key's last use), so that a process that touches millions of
//! keys once keeps only the last minute's.

use std::collections::HashMap;

use tokio::time::Instant;

use crate::key::LockKey;
use crate::store::lifetimes::IDLE_KEY_TTL;

/// The last use of each key, and when to look for idle ones next. A sweep walks every key,
/// once per half [`IDLE_KEY_TTL`] at most, at the first operation after it is due: its cost
/// is spread over the operations of that half minute, and a key is forgotten at most one and
/// a half [`IDLE_KEY_TTL`] after its last use (or at the next operation, when none came).
#[derive(Default)]
pub(super) struct LastUse {
    used: HashMap<LockKey, Instant>,
    next_sweep: Option<Instant>,
}

impl LastUse {
    /// Notes a use of `key`.
    pub(super) fn touch(&mut self, key: &LockKey, now: Instant) {
        match self.used.get_mut(key) {
            Some(used) => *used = now,
            None => {
                self.used.insert(key.clone(), now);
            }
        }
    }

    /// The keys unused for [`IDLE_KEY_TTL`], now forgotten here, when a sweep is due; `None`
    /// when it is not.
    pub(super) fn sweep(&mut self, now: Instant) -> Option<Vec<LockKey>> {
        let due = *self.next_sweep.get_or_insert(now + IDLE_KEY_TTL / 2);
        if now < due {
            return None;
        }
        self.next_sweep = Some(now + IDLE_KEY_TTL / 2);
        let mut idle = Vec::new();
        self.used.retain(|key, used| {
            let keep = now.saturating_duration_since(*used) < IDLE_KEY_TTL;
            if !keep {
                idle.push(key.clone());
            }
            keep
        });
        crate::shrink::shrink(&mut self.used);
        Some(idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn keys_unused_for_a_minute_are_swept() {
        let mut last_use = LastUse::default();
        let (old, fresh) = (LockKey::new("old").unwrap(), LockKey::new("fresh").unwrap());
        last_use.touch(&old, Instant::now());
        assert_eq!(
            last_use.sweep(Instant::now()),
            None,
            "the first sweep waits half a minute"
        );
        tokio::time::advance(IDLE_KEY_TTL).await;
        last_use.touch(&fresh, Instant::now());
        assert_eq!(last_use.sweep(Instant::now()), Some(vec![old]));
        assert_eq!(last_use.sweep(Instant::now()), None, "one sweep per half minute");
        tokio::time::advance(IDLE_KEY_TTL).await;
        assert_eq!(last_use.sweep(Instant::now()), Some(vec![fresh]));
    }
}
