//! Releases on their way, by key: what keeps a process's requests from meeting their own
//! finished locks.
//!
//! A call's release is answered before its response returns; but a call dropped mid-way (a
//! timeout, a client gone) releases from a task of its own, which may send it after the
//! caller's next request. So the Redis store counts its releases on their way, and an acquire
//! sent while one of its key was on its way, that finds the key held, waits for that release
//! to be answered and tries once more: a caller's request never meets the lock of its own
//! finished one.
//!
//! The count is kept in a fixed table of counters, one per slot a key's hash picks, without a
//! lock: every release passes here, and a map under a mutex cost each of them about a thousand
//! instructions. Two keys that share a slot only make an acquire that found its key held wait
//! for the other key's release too before it tries again: a round trip, never a wrong answer.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::key::LockKey;

/// How the store's tables of keys hash a key: seeded per table, so whoever picks the keys
/// cannot pick ones that share a slot; and fast, as each request hashes its key two or three
/// times.
pub(crate) type KeyHasher = foldhash::quality::RandomState;

/// How many counters the table has (16 KiB per store; its clones share it): far more than the
/// releases a process has on their way at once.
const SLOTS: usize = 4096;

/// The releases of one store (and its clones) that were sent and not yet answered.
#[derive(Debug)]
pub(crate) struct Releasing {
    hasher: KeyHasher,
    /// Releases on their way, by the slot of their key.
    on_their_way: Box<[AtomicU32]>,
    /// Acquires waiting for a slot to empty: a release that empties one tells them only if
    /// there are any (most releases are never waited for).
    waiting: AtomicUsize,
    settled: Notify,
}

impl Default for Releasing {
    fn default() -> Self {
        Releasing {
            hasher: KeyHasher::default(),
            on_their_way: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            waiting: AtomicUsize::new(0),
            settled: Notify::new(),
        }
    }
}

impl Releasing {
    /// Counts a release of `key` as on its way until the returned mark is dropped.
    pub(crate) fn start(self: &Arc<Self>, key: &LockKey) -> ReleaseMark {
        let slot = self.slot_of(key);
        self.on_their_way[slot].fetch_add(1, Ordering::SeqCst);
        ReleaseMark {
            releasing: Arc::clone(self),
            slot,
        }
    }

    /// Whether a release of `key` (or of a key in its slot) is on its way.
    pub(crate) fn pending(&self, key: &LockKey) -> bool {
        self.on_their_way[self.slot_of(key)].load(Ordering::SeqCst) > 0
    }

    /// Waits until no release of `key` (nor of a key in its slot) is on its way; `true` if one
    /// was.
    pub(crate) async fn settled(&self, key: &LockKey) -> bool {
        let slot = &self.on_their_way[self.slot_of(key)];
        if slot.load(Ordering::SeqCst) == 0 {
            return false;
        }
        // Counted as waiting until this returns or is dropped (a caller that gave up).
        let _waiting = Waiting::on(&self.waiting);
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Registered before the look: a release that empties the slot after it sees
            // `waiting` and wakes this one.
            if slot.load(Ordering::SeqCst) == 0 {
                break;
            }
            notified.await;
        }
        true
    }

    fn slot_of(&self, key: &LockKey) -> usize {
        // The hash's low bits pick the slot: `SLOTS` is a power of two.
        (self.hasher.hash_one(key) as usize) % SLOTS
    }
}

/// An acquire counted among those waiting for a slot to empty, until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn on(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A release on its way; dropped once it is answered (or given up).
pub(crate) struct ReleaseMark {
    releasing: Arc<Releasing>,
    slot: usize,
}

impl Drop for ReleaseMark {
    fn drop(&mut self) {
        let releasing = &self.releasing;
        let left = releasing.on_their_way[self.slot].fetch_sub(1, Ordering::SeqCst);
        if left == 1 && releasing.waiting.load(Ordering::SeqCst) > 0 {
            releasing.settled.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_acquire_waits_for_the_releases_of_its_key_only() {
        let releasing = Arc::new(Releasing::default());
        let a = LockKey::new("a").unwrap();
        // Another key, in another slot (two keys of one slot wait for each other's releases).
        let b = (0..)
            .map(|n| LockKey::new(format!("b{n}")).unwrap())
            .find(|b| releasing.slot_of(b) != releasing.slot_of(&a))
            .unwrap();
        assert!(!releasing.settled(&a).await, "nothing on its way");
        let first = releasing.start(&a);
        let second = releasing.start(&a);
        assert!(
            !releasing.settled(&b).await,
            "another key's release is not waited for"
        );
        let waiting = tokio::spawn({
            let releasing = Arc::clone(&releasing);
            async move { releasing.settled(&a).await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one release still on its way");
        drop(second);
        assert!(waiting.await.unwrap());
    }

    #[test]
    fn an_acquire_that_gives_up_waiting_is_no_longer_counted() {
        let releasing = Arc::new(Releasing::default());
        let a = LockKey::new("a").unwrap();
        let _on_its_way = releasing.start(&a);
        let mut waiting = Box::pin(releasing.settled(&a));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(waiting.as_mut().poll(&mut context).is_pending());
        assert_eq!(releasing.waiting.load(Ordering::SeqCst), 1);
        drop(waiting);
        assert_eq!(
            releasing.waiting.load(Ordering::SeqCst),
            0,
            "a release that empties the slot would tell nobody"
        );
    }
}
