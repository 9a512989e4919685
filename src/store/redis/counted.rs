//! The lock keys whose fencing counter this store saw raised to the clock a moment ago: what
//! decides whether a fenced acquire of a free key goes out as plain commands or as a script.
//!
//! A token is never below the server's clock in microseconds (`lua/fence.lua`): a script that
//! hands one out first raises a counter that fell behind the clock to it. The plain commands
//! (`SET NX PX`, `INCR`, ...) cannot raise a counter: they take a key's token in one round trip
//! only while this store saw its counter raised in the last
//! [`FENCE_RAISE_FRESH`](crate::token::FENCE_RAISE_FRESH) (250 ms);
//! any other key goes to a script at once (`lua/lock_acquire_new.lua`, one round trip), which
//! raises it again. That bounds what a failover can do to a store that follows it (a Cluster
//! client, an address that moves): a promoted replica that lagged holds the counter as it
//! stood, and a store takes the key's next token from it by `INCR` only within 250 ms of the
//! raise it saw, so only after a failover faster than that (see `FencingToken`). A hot key
//! pays one script call per 250 ms, never a second round trip.
//!
//! A hint for the rest: a counter lost since (a restart without persistence) is found below
//! the floor by the plain commands, which then go to the script. So the memory is a fixed
//! table, without locks, in sets of four: a key shares its set with three others before one
//! of them gives up its place (where one slot per key had two hot keys that met in it evict
//! each other on every acquire, each paying the script every time). A key that lost its place
//! takes the script once more; a key mistaken for another (two 32-bit hashes equal) goes by
//! plain commands, within the 250 ms the other key's raise gives it.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::releasing::KeyHasher;
use crate::key::LockKey;

/// How many keys the table remembers at most: 64 KiB per store (its clones share it).
const SLOTS: usize = 8192;

/// How many slots a key may take: the set its hash picks.
const WAYS: usize = 4;

/// How long after its counter was raised a key goes by plain commands.
const FRESH: Duration = crate::token::FENCE_RAISE_FRESH;

/// A fixed table of keys seen raised, in sets of [`WAYS`] slots. A slot holds the key's mark
/// (the high half of its hash, never zero) and, in its low half, when the key's counter was
/// raised (milliseconds since the table was made, wrapping after 49 days: a hint may err once
/// then).
#[derive(Debug)]
pub(crate) struct CountedKeys<S = KeyHasher> {
    hasher: S,
    made: Instant,
    slots: Box<[AtomicU64]>,
}

impl Default for CountedKeys {
    fn default() -> Self {
        CountedKeys::with_hasher(KeyHasher::default())
    }
}

/// An empty slot; no key's mark is zero.
const EMPTY: u64 = 0;

impl<S: BuildHasher> CountedKeys<S> {
    fn with_hasher(hasher: S) -> Self {
        CountedKeys {
            hasher,
            made: Instant::now(),
            slots: (0..SLOTS).map(|_| AtomicU64::new(EMPTY)).collect(),
        }
    }

    /// Whether `key`'s counter was seen raised less than [`FRESH`] ago.
    pub(crate) fn contains(&self, key: &LockKey) -> bool {
        let (set, mark) = self.place(key);
        let now = self.now();
        set.iter().any(|slot| {
            let found = slot.load(Ordering::Relaxed);
            mark_of(found) == mark && u128::from(now.wrapping_sub(raised_at(found))) < FRESH.as_millis()
        })
    }

    /// Remembers that `key`'s counter was raised now: in its own slot if it has one, else in
    /// an empty slot of its set, else in the place of one of the set's keys, picked by the hash.
    pub(crate) fn insert(&self, key: &LockKey) {
        let (set, mark) = self.place(key);
        let marks: [u64; WAYS] = std::array::from_fn(|way| mark_of(set[way].load(Ordering::Relaxed)));
        let way = marks
            .iter()
            .position(|&found| found == mark)
            .or_else(|| marks.iter().position(|&found| found == EMPTY))
            .unwrap_or(mark as usize % WAYS);
        set[way].store(mark << 32 | u64::from(self.now()), Ordering::Relaxed);
    }

    /// Milliseconds since the table was made, wrapping.
    fn now(&self) -> u32 {
        // Truncation is the point: the time wraps, and only differences under a second matter.
        self.made.elapsed().as_millis() as u32
    }

    /// The set of `key` and its mark there: the high half of its hash, never [`EMPTY`].
    fn place(&self, key: &LockKey) -> (&[AtomicU64], u64) {
        let hash = self.hasher.hash_one(key.as_str());
        // Truncation is the point: the set is picked by the hash's low bits.
        let first = (hash as usize) % (SLOTS / WAYS) * WAYS;
        (&self.slots[first..first + WAYS], (hash >> 32).max(1))
    }
}

/// The mark a slot holds: its high half.
fn mark_of(slot: u64) -> u64 {
    slot >> 32
}

/// When a slot's key was raised: its low half.
fn raised_at(slot: u64) -> u32 {
    // Truncation is the point: the low half.
    slot as u32
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
    fn a_key_raised_longer_ago_than_the_freshness_window_goes_to_the_script() {
        let counted = CountedKeys::default();
        counted.insert(&key("order:1"));
        let (set, mark) = counted.place(&key("order:1"));
        let slot = set
            .iter()
            .find(|slot| mark_of(slot.load(Ordering::Relaxed)) == mark)
            .unwrap();
        // Its raise moved back past the freshness window: the key goes to the script again.
        let long_ago = counted.now().wrapping_sub(FRESH.as_millis() as u32 + 1);
        slot.store(mark << 32 | u64::from(long_ago), Ordering::Relaxed);
        assert!(!counted.contains(&key("order:1")));
        counted.insert(&key("order:1"));
        assert!(counted.contains(&key("order:1")), "raised again, it is fresh");
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
