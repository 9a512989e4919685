//! Who looks at a key when its holder's time runs out, among the callers and jobs that wait
//! for it in place.
//!
//! A release hands its key to the first in line and tells it. A holding that ends by its TTL
//! hands nothing to anyone: its holder died or paused, or it was another client's (`SET NX PX`
//! by a tool that knows nothing of the line), or another client overwrote our holder, whose
//! release then finds nothing to release. The key lies free with its line waiting until
//! somebody attempts it, and the waiters' fallback polls (a second or more, and all at once)
//! are all that would. So the waiters in place of one layer share a watch per key: each tells
//! it when the holder it met runs out, a release that found its key gone tells it now, and when
//! that time comes exactly one of them looks at the key. Its attempt takes the key (it was
//! first in line) or hands it to the first in line, who is told as by a release; then it waits
//! again, telling the watch when the holder it met now runs out. A reservation nobody takes
//! (the waiter handed the key died) is the same shape: the waiters that hear a handoff to
//! another have one of them look when its reservation would run out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use crate::key::LockKey;

/// How long after a holding ran out, by the answer that told its remaining TTL, a waiter looks:
/// the store counted the TTL down from before it answered, and `PTTL` rounds to the
/// millisecond.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

/// A watch for each key that a layer's calls wait for in place, by the key and whether it is
/// held as permits (a semaphore's or a read-write lock's key, whose line is not the mutex's).
#[derive(Debug, Default)]
pub(crate) struct ExpiryWatches {
    keys: Mutex<HashMap<(LockKey, bool), Arc<KeyWatch>>>,
}

/// One key's watch.
#[derive(Debug, Default)]
struct KeyWatch {
    state: Mutex<WatchState>,
    /// A new time to look was set: the waiters sleep until it.
    changed: Notify,
}

#[derive(Debug, Default)]
struct WatchState {
    /// When someone should look at the key: the earliest time a holder met runs out.
    look_at: Option<Instant>,
    /// The calls watching: the watch is dropped with the last.
    watching: usize,
}

impl ExpiryWatches {
    /// Watches `key` (held as permits, if `permits`) for as long as the returned value lives;
    /// a key handed to a waiter is reserved for it for `reservation`.
    pub(crate) fn watch(self: &Arc<Self>, key: &LockKey, permits: bool, reservation: Duration) -> Watching {
        let name = (key.clone(), permits);
        let watch = {
            let mut keys = lock(&self.keys);
            let watch = Arc::clone(keys.entry(name.clone()).or_default());
            lock(&watch.state).watching += 1;
            watch
        };
        Watching {
            watches: Arc::clone(self),
            name,
            watch,
            reservation,
        }
    }

    /// Someone should look at `key` now, if anyone waits for it here: a release found it no
    /// longer ours (it ran out, or another client overwrote it), so nobody handed it over.
    pub(crate) fn look_now(&self, key: &LockKey, permits: bool) {
        let watch = lock(&self.keys).get(&(key.clone(), permits)).cloned();
        if let Some(watch) = watch {
            watch.look_at(Instant::now());
        }
    }
}

impl KeyWatch {
    /// Someone should look at the key at `at`, unless someone will sooner.
    fn look_at(&self, at: Instant) {
        let mut state = lock(&self.state);
        if state.look_at.is_none_or(|planned| at < planned) {
            state.look_at = Some(at);
            drop(state);
            self.changed.notify_waiters();
        }
    }
}

/// One call's part in its key's watch, while it waits in place.
#[derive(Debug)]
pub(crate) struct Watching {
    watches: Arc<ExpiryWatches>,
    name: (LockKey, bool),
    watch: Arc<KeyWatch>,
    /// How long a key handed to a waiter is reserved for it.
    reservation: Duration,
}

impl Watching {
    /// The key watched.
    pub(crate) fn key(&self) -> &LockKey {
        &self.name.0
    }

    /// The holder this call met runs out at `at` (by the time its answer came): someone
    /// should look at the key then.
    pub(crate) fn runs_out_at(&self, at: Instant) {
        self.watch.look_at(at + EXPIRY_MARGIN);
    }

    /// The call heard the key handed to another waiter: should that one never come (its
    /// process died), the reservation runs out unused, and someone should look then.
    pub(crate) fn handed_to_another(&self) {
        self.watch
            .look_at(Instant::now() + self.reservation + EXPIRY_MARGIN);
    }

    /// Resolves when this call is the one to look at the key: the time to look came, and no
    /// other call of the watch took it first. Cancel-safe: a call that stops waiting takes
    /// nothing.
    pub(crate) async fn my_turn_to_look(&self) {
        loop {
            let changed = self.watch.changed.notified();
            tokio::pin!(changed);
            // Registered before the look at the state: a change made after it wakes us.
            changed.as_mut().enable();
            let planned = lock(&self.watch.state).look_at;
            let Some(at) = planned else {
                changed.await;
                continue;
            };
            tokio::select! {
                () = sleep_until(at) => {
                    let mut state = lock(&self.watch.state);
                    if state.look_at == Some(at) {
                        state.look_at = None;
                        return;
                    }
                }
                () = &mut changed => {}
            }
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut keys = lock(&self.watches.keys);
        let mut state = lock(&self.watch.state);
        state.watching -= 1;
        if state.watching == 0 {
            keys.remove(&self.name);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is a few plain assignments: a panic cannot leave one half done.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESERVATION: Duration = Duration::from_secs(2);

    fn key() -> LockKey {
        LockKey::new("order:1").unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn one_waiter_of_many_looks_when_the_holder_runs_out() {
        let watches = Arc::new(ExpiryWatches::default());
        let waiters: Vec<_> = (0..5)
            .map(|_| watches.watch(&key(), false, RESERVATION))
            .collect();
        let started = Instant::now();
        waiters[3].runs_out_at(started + Duration::from_millis(120));
        // A later expiry seen by another waiter does not put the look off.
        waiters[1].runs_out_at(started + Duration::from_secs(10));
        let looks = waiters.iter().map(|waiter| Box::pin(waiter.my_turn_to_look()));
        let (_, first, rest) = futures_util::future::select_all(looks).await;
        assert_eq!(started.elapsed(), Duration::from_millis(120) + EXPIRY_MARGIN);
        // Nobody else looks until a new time is set.
        let others = futures_util::future::select_all(rest);
        assert!(
            tokio::time::timeout(Duration::from_secs(60), others)
                .await
                .is_err(),
            "waiter {first} looked, and only it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_that_found_its_key_gone_has_a_waiter_look_at_once() {
        let watches = Arc::new(ExpiryWatches::default());
        let waiter = watches.watch(&key(), false, RESERVATION);
        waiter.runs_out_at(Instant::now() + Duration::from_secs(10));
        let looking = tokio::spawn(async move { waiter.my_turn_to_look().await });
        tokio::task::yield_now().await;
        let before = Instant::now();
        watches.look_now(&key(), false);
        looking.await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO);
        // Another key's, or the other space's, watch is not touched.
        watches.look_now(&key(), true);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handoff_to_another_has_a_waiter_look_when_its_reservation_would_run_out() {
        let watches = Arc::new(ExpiryWatches::default());
        let (heard, other) = (
            watches.watch(&key(), false, RESERVATION),
            watches.watch(&key(), false, RESERVATION),
        );
        let started = Instant::now();
        heard.handed_to_another();
        other.my_turn_to_look().await;
        assert_eq!(started.elapsed(), RESERVATION + EXPIRY_MARGIN);
    }

    #[test]
    fn the_last_waiter_to_leave_drops_the_watch() {
        let watches = Arc::new(ExpiryWatches::default());
        let (first, second) = (
            watches.watch(&key(), false, RESERVATION),
            watches.watch(&key(), false, RESERVATION),
        );
        drop(first);
        assert_eq!(lock(&watches.keys).len(), 1);
        drop(second);
        assert!(lock(&watches.keys).is_empty());
    }
}
