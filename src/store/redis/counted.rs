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
//! fixed table of key hashes, without locks, in sets of four: a key shares its set with three
//! others before one of them gives up its place (where one slot per key had two hot keys that
//! met in it evict each other on every acquire, each paying the script every time). A key that
//! lost its place takes the script once more; a key mistaken for another (two 64-bit hashes
//! equal) goes by plain commands, which are right for it either way.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::key::LockKey;

/// How many keys the table remembers at most: 64 KiB per store (its clones share it).
const SLOTS: usize = 8192;

/// How many slots a key may take: the set its hash picks.
const WAYS: usize = 4;

/// A fixed table of the hashes of keys seen counted, in sets of [`WAYS`] slots.
#[derive(Debug)]
pub(crate) struct CountedKeys<S = RandomState> {
    hasher: S,
    slots: Box<[AtomicU64]>,
}

impl Default for CountedKeys {
    fn default() -> Self {
        CountedKeys::with_hasher(RandomState::new())
    }
}

/// An empty slot; no key's mark is zero.
const EMPTY: u64 = 0;

impl<S: BuildHasher> CountedKeys<S> {
    fn with_hasher(hasher: S) -> Self {
        CountedKeys {
            hasher,
            slots: (0..SLOTS).map(|_| AtomicU64::new(EMPTY)).collect(),
        }
    }

    /// Whether `key`'s counter was seen raised (most likely still is).
    pub(crate) fn contains(&self, key: &LockKey) -> bool {
        let (set, mark) = self.place(key);
        set.iter().any(|slot| slot.load(Ordering::Relaxed) == mark)
    }

    /// Remembers that `key`'s counter is raised: in an empty slot of its set, else in the place
    /// of one of the set's keys, picked by the hash.
    pub(crate) fn insert(&self, key: &LockKey) {
        let (set, mark) = self.place(key);
        let marks: [u64; WAYS] = std::array::from_fn(|way| set[way].load(Ordering::Relaxed));
        if marks.contains(&mark) {
            return;
        }
        let way = marks
            .iter()
            .position(|&found| found == EMPTY)
            .unwrap_or((mark >> 32) as usize % WAYS);
        set[way].store(mark, Ordering::Relaxed);
    }

    /// The set of `key` and the mark it leaves there: its hash, never [`EMPTY`].
    fn place(&self, key: &LockKey) -> (&[AtomicU64], u64) {
        let hash = self.hasher.hash_one(key.as_str());
        // Truncation is the point: the set is picked by the hash's low bits.
        let first = (hash as usize) % (SLOTS / WAYS) * WAYS;
        (&self.slots[first..first + WAYS], hash.max(1))
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasherDefault, DefaultHasher};

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

    /// A fixed hasher: the same keys meet in the same sets on every run.
    fn fixed() -> CountedKeys<BuildHasherDefault<DefaultHasher>> {
        CountedKeys::with_hasher(BuildHasherDefault::default())
    }

    #[test]
    fn a_few_hundred_hot_keys_all_stay_remembered() {
        // 300 keys in 8,192 slots: with one slot per key some two would share one (for these
        // keys and this hasher, they do) and evict each other on every insert.
        let counted = fixed();
        let keys: Vec<LockKey> = (0..300).map(|n| key(&format!("task:{n}"))).collect();
        for _ in 0..3 {
            keys.iter().for_each(|key| counted.insert(key));
        }
        let forgotten: Vec<&LockKey> = keys.iter().filter(|key| !counted.contains(key)).collect();
        assert!(forgotten.is_empty(), "{forgotten:?}");
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_the_latest_keys() {
        let counted = fixed();
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
