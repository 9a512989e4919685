//! The set guard's operations in the in-memory store: the steps of the set scripts
//! (`set_acquire.lua`, `set_join.lua`, `set_leave.lua`) under the lock state's one mutex.

use std::time::Duration;

use tokio::time::Instant;

use super::MemoryStore;
use super::line::Line;
use super::lock::{Handed, Holder, Holding, LockState};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{Fencing, LineCap, LineJoin, LockToken, Waiter};
use crate::lock_set::{HeldKey, LockSetStore, SetAcquisition};
use crate::store::handover::{hand_over, reservation_expired};

/// What handing keys over did, by the key's place in the set: for the store to finish after
/// the mutex (promote a job handed a key, count a reservation that ran out).
type Handoffs = Vec<(usize, Handed)>;

impl LockState {
    /// Whether `key` is free for `token` as `waiter`: free with nobody in line before it,
    /// reserved for it, or already `token`'s. A free key that others wait for is handed to the
    /// first of them now (nobody handed it: a holder's TTL ran out).
    fn free_for(
        &mut self,
        key: &LockKey,
        token: LockToken,
        waiter: Option<&Waiter>,
        now: Instant,
        reservation: Duration,
    ) -> (bool, Handed) {
        match self.live(key, now) {
            Some(Holding {
                holder: Holder::Owner(holder, _),
                ..
            }) => (*holder == token, Handed::default()),
            Some(Holding {
                holder: Holder::Reserved(for_whom, _),
                ..
            }) => (waiter == Some(&*for_whom), Handed::default()),
            None => {
                let head = self.lines.get(key).and_then(|line| line.head().cloned());
                if head.is_none() || head.as_ref() == waiter {
                    return (true, Handed::default());
                }
                let handed = self.hand_to_head(key, true, now, reservation);
                (handed.reserved.as_ref() == waiter, handed)
            }
        }
    }

    /// What the caller meets on `key`, the set's `index`-th, which is not free for it.
    fn held_key(&self, index: usize, key: &LockKey, waiter: Option<&Waiter>, now: Instant) -> HeldKey {
        let holding = self.locks.get(key);
        HeldKey {
            index,
            remaining: holding.map(|holding| holding.expires.saturating_duration_since(now)),
            ahead: self.lines.get(key).map_or(0, |line| line.ahead_of(waiter)),
            typical_hold: self.records.typical_hold(key),
            reserved: holding.is_some_and(|holding| matches!(holding.holder, Holder::Reserved(..))),
        }
    }

    /// Whether `key` is reserved for `waiter`.
    fn reserved_for(&mut self, key: &LockKey, waiter: &Waiter, now: Instant) -> bool {
        matches!(
            self.live(key, now),
            Some(Holding { holder: Holder::Reserved(for_whom, _), .. }) if for_whom == waiter
        )
    }

    /// Puts `waiter` in `key`'s line (or in the place of `replacing`), handing a free key to the
    /// head of its line.
    fn join_key(
        &mut self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        now: Instant,
        reservation: Duration,
    ) -> Handed {
        self.line(key).join(waiter, replacing);
        match self.live(key, now) {
            Some(_) => Handed::default(),
            None => self.hand_to_head(key, true, now, reservation),
        }
    }

    /// Passes `key`, reserved for `waiter`, to the next in line behind it, as `pass_after` in
    /// `set_prelude.lua`: without anyone behind, the key is free.
    fn pass_after(&mut self, key: &LockKey, waiter: &Waiter, now: Instant, reservation: Duration) -> Handed {
        let line = self.line(key);
        let next = line
            .place
            .get(waiter)
            .and_then(|place| line.order.range(place + 1..).next())
            .map(|(_, next)| next.clone());
        line.handed.clone_from(&next);
        let Some(next) = next else {
            self.locks.remove(key);
            return Handed::default();
        };
        self.locks.insert(
            key.clone(),
            Holding {
                holder: Holder::Reserved(next.clone(), now),
                expires: now + reservation,
            },
        );
        self.records.announce(key, &next);
        Handed {
            reserved: Some(next),
            dropped: None,
        }
    }

    /// Whether `waiter` is first in the line of every key of `keys`.
    fn first_everywhere(&self, keys: &[LockKey], waiter: &Waiter) -> bool {
        keys.iter()
            .all(|key| self.lines.get(key).and_then(Line::head) == Some(waiter))
    }

    /// A waiter found in some of its set's lines and not in the others (a reservation of one
    /// key ran out unused, and the next attempt on it dropped the waiter) leaves every line and
    /// joins them all again at the end, as `set_acquire.lua` does: the lines keep one order.
    fn keep_one_order(
        &mut self,
        keys: &[LockKey],
        waiter: &Waiter,
        now: Instant,
        reservation: Duration,
        handoffs: &mut Handoffs,
    ) {
        let in_line = |state: &LockState, key: &LockKey| {
            state
                .lines
                .get(key)
                .is_some_and(|line| line.place.contains_key(waiter))
        };
        let found = keys.iter().filter(|key| in_line(self, key)).count();
        if found == 0 || found == keys.len() {
            return;
        }
        for (index, key) in keys.iter().enumerate() {
            if let Some(line) = self.lines.get_mut(key) {
                line.remove(waiter);
            }
            if self.reserved_for(key, waiter, now) {
                handoffs.push((index, self.hand_to_head(key, false, now, reservation)));
            }
        }
        for (index, key) in keys.iter().enumerate() {
            handoffs.push((index, self.join_key(key, waiter, None, now, reservation)));
        }
    }
}

impl MemoryStore {
    /// The lock state, with every key of `keys` touched (noted as used), and the time.
    fn with_set<R>(&self, keys: &[LockKey], f: impl FnOnce(&mut LockState, Instant, Duration) -> R) -> R {
        let mut state = self.locks();
        let now = Instant::now();
        for key in keys {
            state.touch(key, now);
        }
        f(&mut state, now, self.reservation)
    }

    /// Finishes what handing keys over started: jobs handed a key are made due.
    async fn finish_handoffs(&self, keys: &[LockKey], handoffs: Handoffs) {
        for (index, handed) in handoffs {
            let Some(key) = keys.get(index) else { continue };
            reservation_expired(key, handed.dropped.as_ref());
            hand_over(self, key, handed.reserved).await;
        }
    }
}

impl LockSetStore for MemoryStore {
    async fn groups(&self, keys: Vec<LockKey>) -> Result<Vec<Vec<LockKey>>, StoreError> {
        Ok(vec![keys])
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> Result<SetAcquisition, StoreError> {
        let mut handoffs = Handoffs::new();
        let acquisition = self.with_set(keys, |state, now, reservation| {
            if let Some(waiter) = waiter {
                state.keep_one_order(keys, waiter, now, reservation, &mut handoffs);
            }
            let mut blocked = Vec::new();
            for (index, key) in keys.iter().enumerate() {
                let (free, mut handed) = state.free_for(key, token, waiter, now, reservation);
                if free {
                    // Handed to the caller, who takes it now or keeps it reserved.
                    handed.reserved = None;
                } else {
                    blocked.push(state.held_key(index, key, waiter, now));
                }
                handoffs.push((index, handed));
            }
            if !blocked.is_empty() {
                // As set_acquire.lua: a caller first in every line frees the keys reserved for
                // it, staying first in their lines (an attempt on one hands it back); one that
                // others wait before in some line passes them to the next behind it, so that
                // they do not idle.
                if let Some(waiter) = waiter {
                    let keep = state.first_everywhere(keys, waiter);
                    for (index, key) in keys.iter().enumerate() {
                        if !state.reserved_for(key, waiter, now) {
                            continue;
                        }
                        if keep {
                            state.locks.remove(key);
                            if let Some(line) = state.lines.get_mut(key) {
                                line.handed = None;
                            }
                        } else {
                            handoffs.push((index, state.pass_after(key, waiter, now, reservation)));
                        }
                    }
                }
                return SetAcquisition::Held(blocked);
            }
            let fences = keys
                .iter()
                .map(|key| state.take(key, token, ttl, now, waiter))
                .map(|fence| (fencing == Fencing::On).then_some(fence))
                .collect();
            SetAcquisition::Acquired(fences)
        });
        self.finish_handoffs(keys, handoffs).await;
        Ok(acquisition)
    }

    async fn join_set_line(
        &self,
        keys: &[LockKey],
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
    ) -> Result<LineJoin, StoreError> {
        let mut handoffs = Handoffs::new();
        let joined = self.with_set(keys, |state, now, reservation| {
            // Every line is looked at before any changes: a full one refuses the whole set.
            let mut evictions = Vec::with_capacity(keys.len());
            let empty = Line::default();
            for key in keys {
                let reserved_for = match state.live(key, now) {
                    Some(Holding {
                        holder: Holder::Reserved(head, _),
                        ..
                    }) => Some(head.clone()),
                    _ => None,
                };
                let line = state.lines.get(key).unwrap_or(&empty);
                evictions.push(line.room_for(waiter, replacing, cap, |candidate| {
                    reserved_for.as_ref() == Some(candidate)
                })?);
            }
            let (mut ahead, mut evicted) = (0, Vec::new());
            for ((index, key), gone) in keys.iter().enumerate().zip(evictions) {
                let line = state.line(key);
                for waiter in &gone {
                    line.remove(waiter);
                }
                evicted.extend(gone);
                handoffs.push((index, state.join_key(key, waiter, replacing, now, reservation)));
                let line = state.lines.get(key).map_or(0, |line| line.ahead_of(Some(waiter)));
                ahead = ahead.max(line);
            }
            evicted.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
            evicted.dedup();
            Ok((ahead, evicted))
        });
        self.finish_handoffs(keys, handoffs).await;
        match joined {
            Ok((ahead, evicted)) => Ok(LineJoin::Joined { ahead, evicted }),
            Err(waiting) => Ok(LineJoin::Full { waiting }),
        }
    }

    async fn leave_set_line(&self, keys: &[LockKey], waiter: &Waiter) -> Result<(), StoreError> {
        let mut handoffs = Handoffs::new();
        self.with_set(keys, |state, now, reservation| {
            for (index, key) in keys.iter().enumerate() {
                if let Some(line) = state.lines.get_mut(key) {
                    line.remove(waiter);
                    if line.order.is_empty() {
                        state.lines.remove(key);
                    }
                }
                if state.reserved_for(key, waiter, now) {
                    handoffs.push((index, state.hand_to_head(key, false, now, reservation)));
                }
            }
        });
        self.finish_handoffs(keys, handoffs).await;
        Ok(())
    }
}
