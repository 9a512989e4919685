//! The lock keys this store has seen with a raised fencing counter: what decides whether a
//! fenced acquire of a free key goes out as plain commands or as a script.
//!
//! The plain commands (`SET NX PX`, `INCR`, ...) take a key in one round trip only when its
//! counter was raised to the clock before (see [`FENCE_FLOOR`](crate::lock::FENCE_FLOOR)); a
//! new counter needs a script, which raises it. Sent first to a key seen for the first time,
//! the plain commands would cost that acquire two round trips, and a service that locks each
//! resource once or rarely (an order, a document) would pay them on most requests. So a key
//! this store has not seen counted goes to a script at once (`lua/lock_acquire_new.lua`, one
//! round trip), and the keys it has seen counted go by plain commands.
//!
//! A hint, never a guarantee: a counter lost since (a restart without persistence) is still
//! found by the plain commands, which then go to the script as before. So the memory is a
//! fixed table of key hashes, without locks: a key that loses its slot to another goes to the
//! script once more, and a key mistaken for another (two 64-bit hashes equal) goes by plain
//! commands, which are right for it either way.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::key::LockKey;

/// How many keys the table remembers at most: 64 KiB per store (its clones share it).
const SLOTS: usize = 8192;

/// A fixed table of the hashes of keys seen counted, one slot per hash.
#[derive(Debug)]
pub(crate) struct CountedKeys {
    hasher: RandomState,
    slots: Box<[AtomicU64]>,
}

impl Default for CountedKeys {
    fn default() -> Self {
        CountedKeys {
            hasher: RandomState::new(),
            slots: (0..SLOTS).map(|_| AtomicU64::new(EMPTY)).collect(),
        }
    }
}

/// An empty slot; no key's mark is zero.
const EMPTY: u64 = 0;

impl CountedKeys {
    /// Whether `key`'s counter was seen raised (most likely still is).
    pub(crate) fn contains(&self, key: &LockKey) -> bool {
        let (slot, mark) = self.place(key);
        self.slots[slot].load(Ordering::Relaxed) == mark
    }

    /// Remembers that `key`'s counter is raised.
    pub(crate) fn insert(&self, key: &LockKey) {
        let (slot, mark) = self.place(key);
        self.slots[slot].store(mark, Ordering::Relaxed);
    }

    /// The slot of `key` and the mark it leaves there: its hash, never [`EMPTY`].
    fn place(&self, key: &LockKey) -> (usize, u64) {
        let hash = self.hasher.hash_one(key.as_str());
        // Truncation is the point: the slot is the hash's low bits.
        ((hash as usize) % SLOTS, hash.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LockKey {
        LockKey::new(name).unwrap()
    }

    #[test]
    fn a_key_is_remembered_once_inserted_and_others_are_not() {
        let counted = CountedKeys::default();
        assert!(!counted.contains(&key("order:1")));
        counted.insert(&key("order:1"));
        assert!(counted.contains(&key("order:1")));
        assert!(!counted.contains(&key("order:2")));
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_the_latest_keys() {
        let counted = CountedKeys::default();
        let keys: Vec<LockKey> = (0..SLOTS * 4).map(|n| key(&format!("order:{n}"))).collect();
        keys.iter().for_each(|key| counted.insert(key));
        assert_eq!(counted.slots.len(), SLOTS);
        // The key inserted last holds its slot; most of the early ones lost theirs.
        assert!(counted.contains(keys.last().unwrap()));
        let early = keys[..SLOTS].iter().filter(|key| counted.contains(key)).count();
        assert!(
            early < SLOTS / 2,
            "{early} of the first {SLOTS} keys still remembered"
        );
    }
}
