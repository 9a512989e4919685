//! The lock operations of the in-memory store: the same steps as the lock scripts, under one
//! mutex instead of Redis's single thread.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::MemoryStore;
use super::idle::shrink;
use super::key_records::KeyRecords;
use super::line::Line;
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{
    Acquisition, Fencing, FencingToken, Handoffs, LineCap, LineJoin, LockToken, Waiter, next_fences,
};
use crate::metric_names;
use crate::store::handover::{hand_over, hand_over_with_runner_up, reservation_expired};

#[derive(Default)]
pub(super) struct LockState {
    pub(super) locks: HashMap<LockKey, Holding>,
    pub(super) lines: HashMap<LockKey, Line>,
    /// Per-key requests to stop, for holders that listen.
    pub(super) stops: HashMap<LockKey, broadcast::Sender<String>>,
    /// Each key's fencing counter, last hold, handoff channel and last use: what the maps
    /// above forget, once idle.
    pub(super) records: KeyRecords,
}

pub(super) struct Holding {
    pub(super) holder: Holder,
    pub(super) expires: Instant,
}

pub(super) enum Holder {
    Owner(LockToken, FencingToken),
    /// Reserved for the first in line, from `since`.
    Reserved(Waiter, Instant),
}

/// What handing a key over did: reserved it for a waiter, dropped an expired one.
#[derive(Default)]
pub(super) struct Handed {
    pub(super) reserved: Option<Waiter>,
    pub(super) dropped: Option<Waiter>,
}

impl LockState {
    /// Notes a use of `key`; forgets what idle keys left, when a sweep is due.
    pub(super) fn touch(&mut self, key: &LockKey, now: Instant) {
        let Some(idle) = self.records.touch(key, now) else {
            return;
        };
        for key in &idle {
            self.lines.remove(key);
        }
        self.locks.retain(|_, holding| holding.expires > now);
        self.stops.retain(|_, sender| sender.receiver_count() > 0);
        shrink(&mut self.lines);
        shrink(&mut self.locks);
        shrink(&mut self.stops);
    }

    /// The live holding of `key`, dropping it first if it expired.
    pub(super) fn live(&mut self, key: &LockKey, now: Instant) -> Option<&mut Holding> {
        if self.locks.get(key).is_some_and(|h| h.expires <= now) {
            self.locks.remove(key);
        }
        self.locks.get_mut(key)
    }

    pub(super) fn line(&mut self, key: &LockKey) -> &mut Line {
        self.lines.entry(key.clone()).or_default()
    }

    /// The free key goes to the first in line, as `hand_to_head` in `lock_prelude.lua`.
    pub(super) fn hand_to_head(
        &mut self,
        key: &LockKey,
        drop_expired: bool,
        now: Instant,
        reservation: Duration,
    ) -> Handed {
        let line = self.line(key);
        let mut handed = Handed::default();
        // The waiter whose reservation ran out unused: the first in line, or the one a set's
        // waiter passed the key to.
        if drop_expired
            && let Some(expired) = line.handed.take()
            && line.remove(&expired).is_some()
        {
            handed.dropped = Some(expired);
        }
        let Some(head) = line.head().cloned() else {
            line.handed = None;
            self.lines.remove(key);
            self.locks.remove(key);
            return handed;
        };
        line.handed = Some(head.clone());
        self.locks.insert(
            key.clone(),
            Holding {
                holder: Holder::Reserved(head.clone(), now),
                expires: now + reservation,
            },
        );
        self.records.announce(key, &head);
        handed.reserved = Some(head);
        handed
    }

    fn held(
        &mut self,
        key: &LockKey,
        remaining: Duration,
        waiter: Option<&Waiter>,
        reserved: bool,
    ) -> Acquisition {
        Acquisition::Held {
            remaining: Some(remaining),
            ahead: self.lines.get(key).map_or(0, |line| line.ahead_of(waiter)),
            typical_hold: self.records.typical_hold(key),
            reserved,
        }
    }

    pub(super) fn take(
        &mut self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        now: Instant,
        waiter: Option<&Waiter>,
    ) -> FencingToken {
        let fence = FencingToken(next_fences(self.records.counter(key), 1));
        self.locks.insert(
            key.clone(),
            Holding {
                holder: Holder::Owner(token, fence),
                expires: now + ttl,
            },
        );
        if let Some(waiter) = waiter
            && let Some(line) = self.lines.get_mut(key)
        {
            line.remove(waiter);
            if line.handed.as_ref() == Some(waiter) {
                line.handed = None;
            }
            if line.order.is_empty() {
                self.lines.remove(key);
            }
        }
        fence
    }
}

impl MemoryStore {
    /// The lock operations' state and the reservation time, for one operation on `key`.
    pub(super) fn with_locks<R>(
        &self,
        key: &LockKey,
        f: impl FnOnce(&mut LockState, Instant, Duration) -> R,
    ) -> R {
        let mut state = self.locks();
        let now = Instant::now();
        state.touch(key, now);
        f(&mut state, now, self.reservation)
    }
}

impl MemoryStore {
    pub(super) async fn acquire_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> Result<Acquisition, StoreError> {
        // The counter moves either way (it is free here); the token is handed out only when asked.
        let fenced = |fence: FencingToken| (fencing == Fencing::On).then_some(fence);
        let mut handed = Handed::default();
        let acquisition = self.with_locks(key, |state, now, reservation| {
            match state.live(key, now) {
                Some(Holding {
                    holder: Holder::Owner(holder, fence),
                    expires,
                }) => {
                    if *holder != token {
                        let remaining = *expires - now;
                        return state.held(key, remaining, waiter, false);
                    }
                    // A re-sent acquire: the lock is already ours.
                    *expires = now + ttl;
                    return Acquisition::Acquired(fenced(*fence));
                }
                Some(Holding {
                    holder: Holder::Reserved(for_whom, since),
                    expires,
                }) => {
                    if waiter != Some(&*for_whom) {
                        let remaining = *expires - now;
                        return state.held(key, remaining, waiter, true);
                    }
                    metric_names::handoff_taken(now - *since);
                }
                None => {
                    let head = state.lines.get(key).and_then(|line| line.head().cloned());
                    if head.is_some() && head.as_ref() != waiter {
                        handed = state.hand_to_head(key, true, now, reservation);
                        if handed.reserved.as_ref() != waiter {
                            return state.held(key, reservation, waiter, true);
                        }
                        handed.reserved = None; // handed to the caller, who takes it now
                    }
                }
            }
            Acquisition::Acquired(fenced(state.take(key, token, ttl, now, waiter)))
        });
        reservation_expired(key, handed.dropped.as_ref());
        hand_over(self, key, handed.reserved).await;
        Ok(acquisition)
    }

    pub(super) async fn extend_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with_locks(key, |state, now, _| match state.live(key, now) {
            Some(Holding {
                holder: Holder::Owner(holder, _),
                expires,
            }) if *holder == token => {
                *expires = now + ttl;
                true
            }
            _ => false,
        }))
    }

    pub(super) async fn release_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let handed = self.with_locks(key, |state, now, reservation| {
            match state.live(key, now) {
                Some(Holding {
                    holder: Holder::Owner(holder, _),
                    ..
                }) if *holder == token => {}
                _ => return None,
            }
            if let Some(held) = held_for {
                state.records.record_hold(key, held);
            }
            let handed = state.hand_to_head(key, false, now, reservation);
            let runner_up = state
                .lines
                .get(key)
                .and_then(|line| line.order.values().nth(1).cloned());
            Some((handed, runner_up))
        });
        let Some((handed, runner_up)) = handed else {
            return Ok(false);
        };
        hand_over_with_runner_up(self, key, handed.reserved, runner_up, self.reservation).await;
        Ok(true)
    }

    pub(super) async fn join_lock_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
    ) -> Result<LineJoin, StoreError> {
        let joined = self.with_locks(key, |state, now, reservation| {
            let reserved_for = match state.live(key, now) {
                Some(Holding {
                    holder: Holder::Reserved(head, _),
                    ..
                }) => Some(head.clone()),
                _ => None,
            };
            let line = state.line(key);
            let room = line.make_room(waiter, replacing, cap, |candidate| {
                reserved_for.as_ref() == Some(candidate)
            });
            if room.is_err() && line.order.is_empty() {
                state.lines.remove(key);
            }
            let evicted = room?;
            state.line(key).join(waiter, replacing);
            let handed = match state.live(key, now) {
                Some(_) => Handed::default(),
                None => state.hand_to_head(key, true, now, reservation),
            };
            let ahead = state.lines.get(key).map_or(0, |line| line.ahead_of(Some(waiter)));
            Ok((handed, ahead, evicted))
        });
        let (handed, ahead, evicted) = match joined {
            Ok(joined) => joined,
            Err(waiting) => return Ok(LineJoin::Full { waiting }),
        };
        reservation_expired(key, handed.dropped.as_ref());
        hand_over(self, key, handed.reserved).await;
        Ok(LineJoin::Joined { ahead, evicted })
    }

    pub(super) async fn leave_lock_line(&self, key: &LockKey, waiter: &Waiter) -> Result<(), StoreError> {
        let next = self.pass_on_now(key, waiter);
        hand_over(self, key, next).await;
        Ok(())
    }

    pub(super) fn lock_handoffs(&self, key: &LockKey) -> Handoffs {
        self.with_locks(key, |state, _, _| state.records.handoffs(key))
    }
}

impl MemoryStore {
    /// Takes `waiter` out of the line; hands the key on if it was reserved for it.
    pub(super) fn pass_on_now(&self, key: &LockKey, waiter: &Waiter) -> Option<Waiter> {
        self.with_locks(key, |state, now, reservation| {
            if let Some(line) = state.lines.get_mut(key) {
                line.remove(waiter);
            }
            let reserved_for_it = matches!(
                state.live(key, now),
                Some(Holding { holder: Holder::Reserved(for_whom, _), .. }) if for_whom == waiter
            );
            if reserved_for_it {
                state.hand_to_head(key, false, now, reservation).reserved
            } else {
                if state.lines.get(key).is_some_and(|line| line.order.is_empty()) {
                    state.lines.remove(key);
                }
                None
            }
        })
    }
}

impl crate::store::ListLocks for MemoryStore {
    async fn list_locks(&self, limit: usize) -> Result<Vec<crate::store::LockInfo>, StoreError> {
        let mut locks: Vec<crate::store::LockInfo> = {
            let state = self.locks();
            let now = Instant::now();
            let mut held: Vec<crate::store::LockInfo> = state
                .locks
                .iter()
                .filter(|(_, holding)| holding.expires > now)
                .take(limit)
                .map(|(key, holding)| {
                    let reserved_for = match &holding.holder {
                        Holder::Reserved(waiter, _) => Some(waiter.to_string()),
                        Holder::Owner(..) => None,
                    };
                    crate::store::LockInfo {
                        key: key.as_str().to_string(),
                        remaining: Some(holding.expires - now),
                        fence: state.records.fence(key),
                        waiters: state.lines.get(key).map_or(0, |line| line.order.len() as u64),
                        holders: u64::from(reserved_for.is_none()),
                        limit: Some(1),
                        reserved_for,
                        writing: false,
                        writers_waiting: 0,
                        next_slot: None,
                        closed_for: None,
                    }
                })
                .collect();
            // Keys with a line and no holder (a reservation ran out unused): their waiters wait.
            let unheld = state
                .lines
                .iter()
                .filter(|(key, line)| {
                    !line.order.is_empty()
                        && state.locks.get(*key).is_none_or(|holding| holding.expires <= now)
                })
                .take(limit.saturating_sub(held.len()))
                .map(|(key, line)| crate::store::LockInfo {
                    key: key.as_str().to_string(),
                    remaining: None,
                    fence: state.records.fence(key),
                    waiters: line.order.len() as u64,
                    holders: 0,
                    limit: Some(1),
                    reserved_for: None,
                    writing: false,
                    writers_waiting: 0,
                    next_slot: None,
                    closed_for: None,
                });
            held.extend(unheld.collect::<Vec<_>>());
            held
        };
        locks.extend(self.list_semaphores(limit - locks.len()));
        locks.extend(self.list_throttles(limit - locks.len()));
        Ok(locks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::LockStore;
    use crate::store::lifetimes::IDLE_KEY_TTL;

    /// A process that locks each of many keys once keeps only the last minute's state: the
    /// counters, the last holds and the lines of idle keys are forgotten, and a key used again
    /// after that still gets a higher token.
    #[tokio::test(start_paused = true)]
    async fn the_state_of_idle_keys_is_forgotten() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(5);
        let mut fences = HashMap::new();
        for n in 0..1_000 {
            let key = LockKey::new(format!("order:{n}")).unwrap();
            let token = LockToken::random();
            let Acquisition::Acquired(Some(fence)) = store.try_acquire(&key, token, ttl).await.unwrap()
            else {
                panic!("the key is free");
            };
            fences.insert(key.clone(), fence);
            assert!(store.release_after(&key, token, Some(ttl / 2)).await.unwrap());
        }
        {
            let state = store.locks();
            assert_eq!(
                (state.records.fences.len(), state.records.holds.len()),
                (1_000, 1_000)
            );
        }

        tokio::time::advance(2 * IDLE_KEY_TTL).await;
        let again = LockKey::new("order:7").unwrap();
        let Acquisition::Acquired(Some(fence)) =
            store.try_acquire(&again, LockToken::random(), ttl).await.unwrap()
        else {
            panic!("the key is free");
        };
        let state = store.locks();
        assert_eq!(
            state.records.fences.len(),
            1,
            "only the key used since is remembered"
        );
        assert!(state.records.fences[&again] >= fence.0);
        assert!(state.records.holds.is_empty() && state.lines.is_empty());
        assert!(
            state.records.fences.capacity() < 100,
            "the map gave its room back"
        );
        assert!(fence > fences[&again], "{fence:?} after {:?}", fences[&again]);
    }
}
