//! The set's state machine in plain Rust, on the lock's model ([`LockModel`]): what the set
//! scripts do (`set_prelude.lua`, `set_acquire.lua`, `set_join.lua`, `set_leave.lua`), with
//! the clock passed in. The in-memory store runs it under its mutex; `tests/lock_model.rs`
//! checks the scripts against it.

use std::time::Duration;

use super::{HeldKey, SetAcquisition};
use crate::guard::{LineCap, Waiter};
use crate::key::LockKey;
use crate::lock::LockToken;
use crate::lock::model::{Handed, KeyState, LockModel, Now};

/// What handing keys over did, by the key's place in the set: for the store to finish (make a
/// job handed a key due, count a reservation that ran out).
pub type SetHandoffs = Vec<(usize, Handed)>;

impl KeyState {
    /// Whether the key is free for `token` as `waiter`: free with nobody in line before it,
    /// reserved for it, or already `token`'s. A free key that others wait for is handed to the
    /// first of them now (nobody handed it: a holder's TTL ran out).
    fn free_for(
        &mut self,
        token: LockToken,
        waiter: Option<&Waiter>,
        now: Duration,
        reservation: Duration,
    ) -> (bool, Handed) {
        use crate::lock::model::{Holder, Holding};
        match &self.holding {
            Some(Holding {
                holder: Holder::Owner(holder, _),
                ..
            }) => (*holder == token, Handed::default()),
            Some(Holding {
                holder: Holder::Reserved { waiter: for_whom, .. },
                ..
            }) => (waiter == Some(for_whom), Handed::default()),
            None => {
                let head = self.waiters.head();
                if head.is_none() || head == waiter {
                    return (true, Handed::default());
                }
                let handed = self.hand_to_head(true, now, reservation);
                // Free for the caller too when nobody is left in line (the one whose
                // reservation ran out was dropped).
                (
                    handed.reserved.is_none() || handed.reserved.as_ref() == waiter,
                    handed,
                )
            }
        }
    }

    /// Passes the key, reserved for `waiter`, to the next in line behind it, as `pass_after`
    /// in `set_prelude.lua`: without anyone behind, the key is free.
    fn pass_after(&mut self, waiter: &Waiter, now: Duration, reservation: Duration) -> Handed {
        let next = self
            .waiters
            .place
            .get(waiter)
            .and_then(|place| self.waiters.order.range(place + 1..).next())
            .map(|(_, next)| next.clone());
        self.reserve(next.clone(), now, reservation);
        Handed {
            reserved: next,
            dropped: None,
        }
    }

    /// Puts `waiter` in the line (or in the place of `replacing`), handing a free key to the
    /// head of its line.
    fn join_line(
        &mut self,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        now: Duration,
        reservation: Duration,
    ) -> Handed {
        self.waiters.join(waiter, replacing);
        match self.holding {
            Some(_) => Handed::default(),
            None => self.hand_to_head(true, now, reservation),
        }
    }

    /// Takes `waiter` out of the line; a key reserved for it goes to the next.
    fn leave_line(&mut self, waiter: &Waiter, now: Duration, reservation: Duration) -> Handed {
        self.waiters.remove(waiter);
        if self.reserved_for(waiter) {
            return self.hand_to_head(false, now, reservation);
        }
        Handed::default()
    }
}

impl LockModel {
    /// Every key of `keys`, each with a holding whose time ran out dropped.
    fn live_set(&mut self, keys: &[LockKey], now: Duration) {
        for key in keys {
            self.live(key, now);
        }
    }

    /// The state of `key`, made live by [`live_set`](Self::live_set).
    fn key(&mut self, key: &LockKey) -> &mut KeyState {
        self.keys.entry(key.clone()).or_default()
    }

    /// Takes every key of `keys` for `token` for `ttl`, or none, as `waiter` if given (see
    /// `set_acquire.lua`): each must be free for the caller. A caller that is not served and
    /// is first in every line of its set keeps the keys reserved for it free, itself first in
    /// their lines; one that others wait before in some line passes them to the next behind
    /// it.
    pub fn acquire_set(
        &mut self,
        keys: &[LockKey],
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        now: Now,
    ) -> (SetAcquisition, SetHandoffs) {
        let reservation = self.reservation;
        self.live_set(keys, now.time);
        let mut handoffs = SetHandoffs::new();
        if let Some(waiter) = waiter {
            self.keep_one_order(keys, waiter, now.time, &mut handoffs);
        }
        let mut blocked = Vec::new();
        for (index, key) in keys.iter().enumerate() {
            let state = self.key(key);
            let (free, mut handed) = state.free_for(token, waiter, now.time, reservation);
            if free {
                // Handed to the caller, who takes it now or keeps it reserved.
                handed.reserved = None;
            } else {
                blocked.push(held_key(index, state, waiter, now.time, reservation));
            }
            handoffs.push((index, handed));
        }
        if !blocked.is_empty() {
            if let Some(waiter) = waiter {
                let first_everywhere = keys
                    .iter()
                    .all(|key| self.key(key).waiters.head() == Some(waiter));
                for (index, key) in keys.iter().enumerate() {
                    let state = self.key(key);
                    if !state.reserved_for(waiter) {
                        continue;
                    }
                    if first_everywhere {
                        state.reserve(None, now.time, reservation);
                    } else {
                        handoffs.push((index, state.pass_after(waiter, now.time, reservation)));
                    }
                }
            }
            return (SetAcquisition::Held(blocked), handoffs);
        }
        let fences = keys
            .iter()
            .map(|key| Some(self.key(key).take(token, ttl, waiter, now)))
            .collect();
        (SetAcquisition::Acquired(fences), handoffs)
    }

    /// A waiter found in some of its set's lines and not in the others (a reservation of one
    /// key ran out unused, and the next attempt on it dropped the waiter) leaves every line and
    /// joins them all again at the end, as `set_acquire.lua` does: the lines keep one order.
    fn keep_one_order(
        &mut self,
        keys: &[LockKey],
        waiter: &Waiter,
        now: Duration,
        handoffs: &mut SetHandoffs,
    ) {
        let reservation = self.reservation;
        let found = keys
            .iter()
            .filter(|key| self.key(key).waiters.place.contains_key(waiter))
            .count();
        if found == 0 || found == keys.len() {
            return;
        }
        for (index, key) in keys.iter().enumerate() {
            handoffs.push((index, self.key(key).leave_line(waiter, now, reservation)));
        }
        for (index, key) in keys.iter().enumerate() {
            handoffs.push((index, self.key(key).join_line(waiter, None, now, reservation)));
        }
    }

    /// Puts `waiter` in the line of every key of `keys` in one step, within `cap` (see
    /// `set_join.lua`): a line that would refuse it refuses it for the whole set (`Err`, with
    /// how many wait there; nothing changed). Returns how many wait before it in its longest
    /// line and the jobs evicted to make room.
    pub fn join_set(
        &mut self,
        keys: &[LockKey],
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
        now: Now,
    ) -> (Result<(u64, Vec<Waiter>), u64>, SetHandoffs) {
        let reservation = self.reservation;
        self.live_set(keys, now.time);
        let mut handoffs = SetHandoffs::new();
        // Every line is looked at before any changes.
        let mut evictions = Vec::with_capacity(keys.len());
        for key in keys {
            let state = self.key(key);
            let reserved = |candidate: &Waiter| state.reserved_for(candidate);
            match state.waiters.room_for(waiter, replacing, cap, reserved) {
                Ok(evicted) => evictions.push(evicted),
                Err(waiting) => return (Err(waiting), handoffs),
            }
        }
        let (mut ahead, mut evicted) = (0, Vec::new());
        for ((index, key), gone) in keys.iter().enumerate().zip(evictions) {
            let state = self.key(key);
            for waiter in &gone {
                state.waiters.remove(waiter);
            }
            evicted.extend(gone);
            handoffs.push((index, state.join_line(waiter, replacing, now.time, reservation)));
            ahead = ahead.max(state.waiters.ahead_of(Some(waiter)));
        }
        evicted.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        evicted.dedup();
        (Ok((ahead, evicted)), handoffs)
    }

    /// Takes `waiter` out of the line of every key of `keys`; a key reserved for it goes to
    /// the next in line (see `set_leave.lua`).
    pub fn leave_set(&mut self, keys: &[LockKey], waiter: &Waiter, now: Now) -> SetHandoffs {
        let reservation = self.reservation;
        self.live_set(keys, now.time);
        keys.iter()
            .enumerate()
            .map(|(index, key)| (index, self.key(key).leave_line(waiter, now.time, reservation)))
            .collect()
    }
}

/// What the caller meets on a key of its set (the `index`-th) that is not free for it.
fn held_key(
    index: usize,
    state: &KeyState,
    waiter: Option<&Waiter>,
    now: Duration,
    reservation: Duration,
) -> HeldKey {
    HeldKey {
        index,
        // A key handed on as the caller came: its reservation's time.
        remaining: Some(
            state
                .holding
                .as_ref()
                .map_or(reservation, |holding| holding.expires.saturating_sub(now)),
        ),
        ahead: state.waiters.ahead_of(waiter),
        typical_hold: state.typical_hold(),
        reserved: state
            .holding
            .as_ref()
            .is_some_and(|holding| matches!(holding.holder, crate::lock::model::Holder::Reserved { .. })),
    }
}
