//! The semaphore operations of the in-memory store: the same steps as the permit scripts, under
//! one mutex instead of Redis's single thread.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::MemoryStore;
use super::idle::shrink;
use super::key_records::KeyRecords;
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::model::Waiters as Line;
use crate::lock::{
    Acquisition, Fencing, FencingToken, Handoffs, Holders, LineCap, LineJoin, LockToken, Waiter, next_fences,
};
use crate::metric_names;
use crate::queue::{JobId, QueueName};
use crate::store::handover::{HandOver, Promotion, hand_over, reservation_expired};

#[derive(Default)]
pub(super) struct SemaphoreState {
    keys: HashMap<LockKey, KeyPermits>,
    /// Each key's fencing counter, last hold, handoff channel and last use: what the map above
    /// forgets, once idle.
    records: KeyRecords,
}

/// One key's permits and line (`PERMITS`, `FENCES`, `LIMIT`, `WAITERS` and `WRITERS` of the
/// scripts).
#[derive(Default)]
pub(super) struct KeyPermits {
    /// Holder -> its fencing token and lease deadline.
    pub(super) holders: HashMap<LockToken, (FencingToken, Instant)>,
    /// The holder that writes, when it still holds: a writer holds the key alone.
    pub(super) writer: Option<LockToken>,
    /// Waiter -> the deadline of the permit reserved for it.
    pub(super) reserved: HashMap<Waiter, Instant>,
    pub(super) line: Line,
    /// The waiters in line that write.
    pub(super) writers: HashSet<Waiter>,
    /// The limit the last acquire asked for.
    pub(super) limit: u32,
}

impl KeyPermits {
    /// Permits held or reserved: what counts against the limit.
    fn taken(&self) -> usize {
        self.holders.len() + self.reserved.len()
    }

    /// Whether a writer holds the key, or has it reserved.
    pub(super) fn written(&self) -> bool {
        self.writer
            .is_some_and(|writer| self.holders.contains_key(&writer))
            || self.reserved.keys().any(|waiter| self.writers.contains(waiter))
    }

    /// Whether a holder (a writer when `writes`) fits beside the permits held and reserved now:
    /// a writer only on a free key, a reader below the limit and beside no writer.
    fn fits(&self, writes: bool, limit: u32) -> bool {
        let taken = self.taken();
        if writes || taken == 0 {
            return taken == 0;
        }
        taken < limit as usize && !self.written()
    }

    /// `waiter` leaves the line (it took its permit, gave up, or its reservation ran out).
    fn leave_line(&mut self, waiter: &Waiter) {
        self.line.remove(waiter);
        self.writers.remove(waiter);
    }

    /// Drops the permits and reservations whose deadline passed (a reservation's waiter leaves
    /// the line); the waiters dropped.
    fn prune(&mut self, now: Instant) -> Vec<Waiter> {
        self.holders.retain(|_, (_, deadline)| *deadline > now);
        let expired: Vec<Waiter> = self
            .reserved
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(waiter, _)| waiter.clone())
            .collect();
        for waiter in &expired {
            self.reserved.remove(waiter);
            self.leave_line(waiter);
        }
        expired
    }

    /// Whether a caller at `waiter`'s place (or a newcomer) may take a free permit: it fits,
    /// and no waiter without a reservation is ahead of it (reserved waiters stand at the front
    /// of the line).
    fn may_take(&self, waiter: Option<&Waiter>, writes: bool, limit: u32) -> bool {
        self.fits(writes, limit) && self.line.ahead_of(waiter) <= self.reserved.len() as u64
    }

    /// Reserves the free permits for the line in its order: the first waiters without a
    /// reservation, up to the first that does not fit (the readers behind a waiting writer
    /// wait for it); who they are.
    fn hand_to_line(&mut self, now: Instant, limit: u32, reservation: Duration) -> Vec<Waiter> {
        let mut handed = Vec::new();
        let waiting: Vec<Waiter> = self
            .line
            .order
            .values()
            .filter(|waiter| !self.reserved.contains_key(*waiter))
            .cloned()
            .collect();
        for waiter in waiting {
            if !self.fits(self.writers.contains(&waiter), limit) {
                break;
            }
            self.reserved.insert(waiter.clone(), now + reservation);
            handed.push(waiter);
        }
        handed
    }

    /// The first deadline among the permits and reservations.
    fn first_deadline(&self) -> Option<Instant> {
        let holders = self.holders.values().map(|(_, deadline)| *deadline);
        holders.chain(self.reserved.values().copied()).min()
    }

    fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.reserved.is_empty() && self.line.order.is_empty()
    }
}

/// What one operation did to the line: the waiters permits were reserved for, and those
/// dropped for a reservation that ran out.
#[derive(Default)]
struct Handed {
    reserved: Vec<Waiter>,
    dropped: Vec<Waiter>,
}

impl SemaphoreState {
    /// Notes a use of `key`; forgets what idle keys left, when a sweep is due. A key unused
    /// for a minute holds no live permit (a holder extends its lease every third of its TTL).
    fn touch(&mut self, key: &LockKey, now: Instant) {
        let Some(idle) = self.records.touch(key, now) else {
            return;
        };
        for key in &idle {
            // A permit of a TTL longer than a minute may still run unextended: kept.
            let live = |permits: &KeyPermits| {
                let deadlines = permits.holders.values().map(|(_, deadline)| deadline);
                deadlines
                    .chain(permits.reserved.values())
                    .any(|deadline| *deadline > now)
            };
            if self.keys.get(key).is_some_and(|permits| !live(permits)) {
                self.keys.remove(key);
            }
        }
        shrink(&mut self.keys);
    }

    /// `key`'s permits, pruned; a key with nothing left is forgotten after `work`.
    fn with_key<R>(
        &mut self,
        key: &LockKey,
        now: Instant,
        work: impl FnOnce(&mut KeyPermits, &mut Handed, &mut u64) -> R,
    ) -> (R, Handed) {
        self.touch(key, now);
        let permits = self.keys.entry(key.clone()).or_default();
        let mut handed = Handed {
            dropped: permits.prune(now),
            ..Handed::default()
        };
        let result = work(permits, &mut handed, self.records.counter(key));
        if permits.is_empty() {
            self.keys.remove(key);
        }
        for waiter in &handed.reserved {
            self.records.announce(key, waiter);
        }
        (result, handed)
    }
}

impl MemoryStore {
    /// After an operation: logs the dropped waiters, wakes the reserved ones.
    async fn permits_handed(&self, key: &LockKey, permits: u32, handed: Handed) {
        for waiter in &handed.dropped {
            reservation_expired(key, Some(waiter));
        }
        let line = PermitLine { store: self, permits };
        hand_over(&line, key, handed.reserved).await;
    }

    fn leave_permits_now(&self, key: &LockKey, waiter: &Waiter, permits: u32) -> Vec<Waiter> {
        let now = Instant::now();
        let (_, handed) = self.semaphores().with_key(key, now, |state, handed, _| {
            state.line.remove(waiter);
            state.reserved.remove(waiter);
            handed.reserved = state.hand_to_line(now, permits, self.reservation);
        });
        for dropped in &handed.dropped {
            reservation_expired(key, Some(dropped));
        }
        handed.reserved
    }
}

impl MemoryStore {
    /// Up to `limit` semaphores with permits held or reserved, for [`ListLocks`](crate::store::ListLocks).
    pub(super) fn list_semaphores(&self, limit: usize) -> Vec<crate::store::LockInfo> {
        let state = self.semaphores();
        let now = Instant::now();
        state
            .keys
            .iter()
            .filter_map(|(key, permits)| {
                let last = permits
                    .holders
                    .values()
                    .map(|(_, deadline)| *deadline)
                    .chain(permits.reserved.values().copied())
                    .max()
                    .filter(|last| *last > now);
                // A key with a line and no permit out is listed too: its waiters wait.
                if last.is_none() && permits.line.order.is_empty() {
                    return None;
                }
                let reserved: Vec<&str> = permits
                    .reserved
                    .iter()
                    .filter(|(_, deadline)| **deadline > now)
                    .map(|(waiter, _)| waiter.as_str())
                    .collect();
                Some(crate::store::LockInfo {
                    key: key.as_str().to_string(),
                    remaining: last.map(|last| last - now),
                    fence: state.records.fence(key),
                    waiters: permits.line.order.len() as u64,
                    holders: permits
                        .holders
                        .values()
                        .filter(|(_, deadline)| *deadline > now)
                        .count() as u64,
                    limit: crate::store::list_locks::listed_limit(u64::from(permits.limit)),
                    reserved_for: (!reserved.is_empty()).then(|| reserved.join(" ")),
                    writing: permits.writer.is_some_and(|writer| {
                        permits
                            .holders
                            .get(&writer)
                            .is_some_and(|(_, deadline)| *deadline > now)
                    }),
                    writers_waiting: permits
                        .line
                        .order
                        .values()
                        .filter(|waiter| permits.writers.contains(*waiter))
                        .count() as u64,
                    next_slot: None,
                    closed_for: None,
                })
            })
            .take(limit)
            .collect()
    }
}

impl MemoryStore {
    pub(super) async fn acquire_permit_in_line(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> Result<Acquisition, StoreError> {
        let (permits, writes) = (holders.limit(), holders.writes());
        let now = Instant::now();
        let reservation = self.reservation;
        let (acquisition, handed) = {
            let mut state = self.semaphores();
            let typical_hold = state.records.typical_hold(key);
            state.with_key(key, now, |state, handed, counter| {
                if let Some((fence, deadline)) = state.holders.get_mut(&token) {
                    // A re-sent acquire: the permit is already ours.
                    *deadline = now + ttl;
                    return Ok(*fence);
                }
                let mut reserved = waiter.and_then(|waiter| state.reserved.remove(waiter));
                if reserved.is_none() && !state.may_take(waiter, writes, permits) {
                    // The line first: the permits that are free go to it; then the caller may
                    // still find one.
                    handed.reserved = state.hand_to_line(now, permits, reservation);
                    reserved = waiter.and_then(|waiter| state.reserved.remove(waiter));
                    if let Some(me) = waiter.filter(|_| reserved.is_some()) {
                        // Handed to the caller itself, here: nobody is to be woken for it.
                        handed.reserved.retain(|other| other != me);
                    } else if !state.may_take(waiter, writes, permits) {
                        return Err(Acquisition::Held {
                            remaining: state.first_deadline().map(|deadline| deadline - now),
                            ahead: state.line.ahead_of(waiter),
                            typical_hold: typical_hold.map(|hold| hold / permits.max(1)),
                            // Only reservations stand in the way: no holder it could not join.
                            reserved: state.holders.is_empty()
                                || !(writes || state.holders.len() >= permits as usize || state.written()),
                        });
                    }
                }
                if let Some(deadline) = reserved {
                    metric_names::handoff_taken(reservation.saturating_sub(deadline - now));
                }
                if let Some(waiter) = waiter {
                    state.leave_line(waiter);
                }
                let fence = FencingToken(next_fences(counter, 1, crate::store::time::now_micros()));
                state.holders.insert(token, (fence, now + ttl));
                if writes {
                    state.writer = Some(token);
                }
                state.limit = permits;
                // Permits still free with waiters behind us (a holder's lease ran out): theirs.
                let next = state.hand_to_line(now, permits, reservation);
                handed.reserved.extend(next);
                Ok(fence)
            })
        };
        self.permits_handed(key, permits, handed).await;
        Ok(match acquisition {
            Ok(fence) => Acquisition::Acquired((fencing == Fencing::On).then_some(fence)),
            Err(held) => held,
        })
    }

    pub(super) async fn extend_permit_lease(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        _holders: Holders,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.semaphores();
        state.touch(key, now);
        let permit = state
            .keys
            .get_mut(key)
            .and_then(|permits| permits.holders.get_mut(&token))
            .filter(|(_, deadline)| *deadline > now);
        Ok(match permit {
            Some((_, deadline)) => {
                *deadline = now + ttl;
                true
            }
            None => false,
        })
    }

    pub(super) async fn release_permit_lease(
        &self,
        key: &LockKey,
        token: LockToken,
        holders: Holders,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let permits = holders.limit();
        let now = Instant::now();
        let reservation = self.reservation;
        let (released, handed) = {
            let mut state = self.semaphores();
            let (released, handed) = state.with_key(key, now, |state, handed, _| {
                let released = state.holders.remove(&token).is_some();
                handed.reserved = state.hand_to_line(now, permits, reservation);
                released
            });
            if released && let Some(held) = held_for {
                state.records.record_hold(key, held);
            }
            (released, handed)
        };
        self.permits_handed(key, permits, handed).await;
        Ok(released)
    }

    pub(super) async fn join_permit_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        holders: Holders,
        cap: Option<LineCap>,
    ) -> Result<LineJoin, StoreError> {
        let permits = holders.limit();
        let now = Instant::now();
        let reservation = self.reservation;
        let (joined, handed) = self.semaphores().with_key(key, now, |state, handed, _| {
            let reserved = &state.reserved;
            let evicted = state.line.make_room(waiter, replacing, cap, |candidate| {
                reserved.contains_key(candidate)
            })?;
            for gone in evicted.iter().chain(replacing) {
                state.writers.remove(gone);
            }
            state.line.join(waiter, replacing);
            if holders.writes() {
                state.writers.insert(waiter.clone());
            } else {
                state.writers.remove(waiter);
            }
            handed.reserved = state.hand_to_line(now, permits, reservation);
            Ok((state.line.ahead_of(Some(waiter)), evicted))
        });
        let (ahead, evicted) = match joined {
            Ok(joined) => joined,
            Err(waiting) => return Ok(LineJoin::Full { waiting }),
        };
        self.permits_handed(key, permits, handed).await;
        Ok(LineJoin::Joined { ahead, evicted })
    }

    pub(super) async fn leave_permit_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        holders: Holders,
    ) -> Result<(), StoreError> {
        let permits = holders.limit();
        let handed = self.leave_permits_now(key, waiter, permits);
        let line = PermitLine { store: self, permits };
        hand_over(&line, key, handed).await;
        Ok(())
    }

    pub(super) fn permit_line_handoffs(&self, key: &LockKey) -> Handoffs {
        self.semaphores().records.handoffs(key)
    }
}

/// A semaphore's line, for a handoff: a waiter whose job is gone leaves the line, and the
/// permit reserved for it goes to the next.
struct PermitLine<'a> {
    store: &'a MemoryStore,
    permits: u32,
}

impl HandOver for PermitLine<'_> {
    async fn promote(&self, queue: &QueueName, id: &JobId, after: Duration) -> Result<Promotion, StoreError> {
        Ok(self.store.promote_now(queue, id, after))
    }

    async fn pass_on(&self, key: &LockKey, waiter: &Waiter) -> Result<Vec<Waiter>, StoreError> {
        Ok(self.store.leave_permits_now(key, waiter, self.permits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semaphore::SemaphoreStore;
    use crate::store::lifetimes::IDLE_KEY_TTL;

    /// The semaphore keeps only what is in use, as the mutex does: the permits, counters and
    /// last holds of keys idle for a minute are forgotten; a permit of a long TTL is kept.
    #[tokio::test(start_paused = true)]
    async fn the_state_of_idle_keys_is_forgotten() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(5);
        for n in 0..500 {
            let key = LockKey::new(format!("tenant:{n}")).unwrap();
            let token = LockToken::random();
            let taken = store
                .try_acquire_permit(&key, token, ttl, 2, None, Fencing::On)
                .await
                .unwrap();
            assert!(matches!(taken, Acquisition::Acquired(Some(_))));
            assert!(store.release_permit(&key, token, 2, Some(ttl / 2)).await.unwrap());
        }
        // A permit that outlives the minute, unextended.
        let long = LockKey::new("tenant:long").unwrap();
        let held = store
            .try_acquire_permit(&long, LockToken::random(), 3 * IDLE_KEY_TTL, 2, None, Fencing::On)
            .await
            .unwrap();
        assert!(matches!(held, Acquisition::Acquired(_)));
        assert_eq!(store.semaphores().records.fences.len(), 501);

        tokio::time::advance(2 * IDLE_KEY_TTL).await;
        let again = LockKey::new("tenant:7").unwrap();
        store
            .try_acquire_permit(&again, LockToken::random(), ttl, 2, None, Fencing::On)
            .await
            .unwrap();
        let state = store.semaphores();
        assert_eq!(
            state.records.fences.len(),
            1,
            "only the key used since keeps its counter"
        );
        assert!(state.records.holds.is_empty());
        assert!(state.keys.contains_key(&long), "a live permit is kept");
        assert_eq!(state.keys.len(), 2);
    }
}
