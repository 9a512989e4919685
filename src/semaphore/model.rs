//! The permits' state machine in plain Rust: what the permit scripts do (`permit_prelude.lua`,
//! `permit_acquire.lua`, `permit_acquire_free.lua`, `permit_release.lua`, `permit_extend.lua`,
//! `permit_join.lua`, `permit_leave.lua`), written once, with the clock passed in. A key's
//! permits are held by up to its limit of readers, or by one writer alone (the
//! [read-write lock](crate::read_write)); the free ones go to the line in its order.
//!
//! [`PermitModel`] is the in-memory store's semaphore (the store adds a mutex, the
//! announcements of handoffs and the idle sweep), and the reference the Redis scripts are
//! checked against (`tests/permit_model.rs`, `tests/permit_protocol.rs`).
//!
//! ```
//! use std::time::Duration;
//! use redefer::lock::model::Now;
//! use redefer::lock::{Acquisition, Holders, LockToken};
//! use redefer::semaphore::model::PermitModel;
//! use redefer::LockKey;
//!
//! let mut model = PermitModel::new(Duration::from_secs(2));
//! let key = LockKey::new("tenant:7")?;
//! let now = Now::at(Duration::ZERO);
//! let ttl = Duration::from_secs(5);
//! let take = |model: &mut PermitModel| model.acquire(&key, LockToken::random(), ttl, Holders::Permits(2), None, now).acquisition;
//! assert!(matches!(take(&mut model), Acquisition::Acquired(_)));
//! assert!(matches!(take(&mut model), Acquisition::Acquired(_)));
//! assert!(matches!(take(&mut model), Acquisition::Held { .. }), "two permits");
//! # Ok::<(), redefer::KeyError>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::guard::{LineCap, Waiter};
use crate::key::LockKey;
use crate::lock::model::{Now, Waiters};
use crate::lock::{Acquisition, FencingToken, Holders, LockToken, next_fences};

/// One key's permits and line (`PERMITS`, `FENCES`, `LIMIT`, `WAITERS` and `WRITERS` of the
/// scripts), its fencing counter and its typical hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyPermits {
    /// Holder -> its fencing token and lease deadline.
    pub(crate) holders: HashMap<LockToken, (FencingToken, Duration)>,
    /// The holder that writes, when it still holds: a writer holds the key alone.
    pub(crate) writer: Option<LockToken>,
    /// Waiter -> the deadline of the permit reserved for it.
    pub(crate) reserved: HashMap<Waiter, Duration>,
    pub(crate) line: Waiters,
    /// The waiters in line that write.
    pub(crate) writers: HashSet<Waiter>,
    /// The limit the last acquire asked for.
    pub(crate) limit: u32,
    /// The last fencing token handed out.
    pub(crate) fence: u64,
    /// The last hold reported, in whole ms.
    typical_hold: Option<Duration>,
}

impl KeyPermits {
    /// Permits held or reserved: what counts against the limit.
    fn taken(&self) -> usize {
        self.holders.len() + self.reserved.len()
    }

    /// Whether a writer holds the key, or has it reserved.
    pub(crate) fn written(&self) -> bool {
        self.writer
            .is_some_and(|writer| self.holders.contains_key(&writer))
            || self.reserved.keys().any(|waiter| self.writers.contains(waiter))
    }

    /// Whether a writer holds the key (alone, then).
    fn writes_now(&self) -> bool {
        self.writer
            .is_some_and(|writer| self.holders.contains_key(&writer))
    }

    /// Whether `token` holds a permit as `holders` says: writing, or reading.
    fn holds_as(&self, token: LockToken, holders: Holders) -> bool {
        self.holders.contains_key(&token) && (self.writer == Some(token)) == holders.writes()
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
    fn prune(&mut self, now: Duration) -> Vec<Waiter> {
        self.holders.retain(|_, (_, deadline)| *deadline > now);
        let mut expired: Vec<Waiter> = self
            .reserved
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(waiter, _)| waiter.clone())
            .collect();
        expired.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
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
    fn hand_to_line(&mut self, now: Duration, limit: u32, reservation: Duration) -> Vec<Waiter> {
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
    fn first_deadline(&self) -> Option<Duration> {
        let holders = self.holders.values().map(|(_, deadline)| *deadline);
        holders.chain(self.reserved.values().copied()).min()
    }

    /// The last deadline among the permits and reservations: until when the key is in use.
    pub(crate) fn last_deadline(&self) -> Option<Duration> {
        let holders = self.holders.values().map(|(_, deadline)| *deadline);
        holders.chain(self.reserved.values().copied()).max()
    }
}

/// What one operation did to a key's line: the waiters permits were reserved for, and those
/// dropped for a reservation that ran out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermitsHanded {
    /// The waiters a permit was reserved for.
    pub reserved: Vec<Waiter>,
    /// The waiters dropped from the line: their reservation ran out and they never came.
    pub dropped: Vec<Waiter>,
}

/// What an acquire answered and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitAcquired {
    /// The answer, with the fencing token on success.
    pub acquisition: Acquisition,
    /// Permits found free went to the line.
    pub handed: PermitsHanded,
    /// A waiter took the permit reserved for it: how long after it was handed it.
    pub handoff_waited: Option<Duration>,
}

/// The permits of every key: up to a limit of holders (or one writer) per key, a line of
/// waiters, a fencing counter, handoffs in the line's order. See the [module](self).
#[derive(Debug, Clone)]
pub struct PermitModel {
    pub(crate) keys: HashMap<LockKey, KeyPermits>,
    /// How long a permit handed to a waiter stays reserved for it.
    pub(crate) reservation: Duration,
}

impl PermitModel {
    /// No permit held, nobody in line; a handed permit is reserved for `reservation`.
    pub fn new(reservation: Duration) -> Self {
        PermitModel {
            keys: HashMap::new(),
            reservation,
        }
    }

    /// `key`'s permits with the run-out ones dropped, and the waiters dropped with them.
    fn live(&mut self, key: &LockKey, now: Duration) -> (&mut KeyPermits, Vec<Waiter>) {
        let permits = self.keys.entry(key.clone()).or_default();
        let dropped = permits.prune(now);
        (permits, dropped)
    }

    /// Takes one of `key`'s permits (`holders` says how many there are, and whether the caller
    /// writes) for `token` for `ttl`, as `waiter` if given: one reserved for it, or a free one
    /// that fits when no waiter without a reservation is ahead of it. A re-sent acquire finds
    /// its permit. Free permits go to the line first.
    pub fn acquire(
        &mut self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
        waiter: Option<&Waiter>,
        now: Now,
    ) -> PermitAcquired {
        let (limit, writes) = (holders.limit(), holders.writes());
        let reservation = self.reservation;
        let (state, dropped) = self.live(key, now.time);
        let mut handed = PermitsHanded {
            dropped,
            ..PermitsHanded::default()
        };
        let answer = |acquisition, handed, handoff_waited| PermitAcquired {
            acquisition,
            handed,
            handoff_waited,
        };
        if let Some((fence, deadline)) = state.holders.get_mut(&token) {
            // A re-sent acquire: the permit is already ours.
            *deadline = now.time + ttl;
            return answer(Acquisition::Acquired(Some(*fence)), handed, None);
        }
        let mut reserved = waiter.and_then(|waiter| state.reserved.remove(waiter));
        if reserved.is_none() && !state.may_take(waiter, writes, limit) {
            // The line first: the permits that are free go to it; then the caller may still
            // find one.
            handed.reserved = state.hand_to_line(now.time, limit, reservation);
            reserved = waiter.and_then(|waiter| state.reserved.remove(waiter));
            if let Some(me) = waiter.filter(|_| reserved.is_some()) {
                // Handed to the caller itself, here: nobody is to be woken for it.
                handed.reserved.retain(|other| other != me);
            } else if !state.may_take(waiter, writes, limit) {
                let held = Acquisition::Held {
                    remaining: state
                        .first_deadline()
                        .map(|deadline| deadline.saturating_sub(now.time)),
                    ahead: state.line.ahead_of(waiter),
                    typical_hold: state.typical_hold.map(|hold| hold / limit.max(1)),
                    // Only reservations stand in the way: no holder it could not join.
                    reserved: state.holders.is_empty()
                        || !(writes || state.holders.len() >= limit as usize || state.writes_now()),
                };
                return answer(held, handed, None);
            }
        }
        let handoff_waited =
            reserved.map(|deadline| reservation.saturating_sub(deadline.saturating_sub(now.time)));
        if let Some(waiter) = waiter {
            state.leave_line(waiter);
        }
        let fence = FencingToken(next_fences(&mut state.fence, 1, now.wall_micros));
        state.holders.insert(token, (fence, now.time + ttl));
        if writes {
            state.writer = Some(token);
        }
        state.limit = limit;
        // Permits still free with waiters behind us (a holder's lease ran out): theirs.
        let next = state.hand_to_line(now.time, limit, reservation);
        handed.reserved.extend(next);
        answer(Acquisition::Acquired(Some(fence)), handed, handoff_waited)
    }

    /// Resets the lease of `token`'s permit of `key` (held as `holders` says: reading or
    /// writing) to `ttl`; `false` when it holds none.
    pub fn extend(
        &mut self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
        now: Now,
    ) -> bool {
        let permit = self
            .keys
            .get_mut(key)
            .filter(|permits| permits.holds_as(token, holders))
            .and_then(|permits| permits.holders.get_mut(&token))
            .filter(|(_, deadline)| *deadline > now.time);
        match permit {
            Some((_, deadline)) => {
                *deadline = now.time + ttl;
                true
            }
            None => false,
        }
    }

    /// Releases `token`'s permit of `key` (held as `holders` says), handing what is free to
    /// the line; `held_for` becomes
    /// the key's typical hold. Whether it held one.
    pub fn release(
        &mut self,
        key: &LockKey,
        token: LockToken,
        holders: Holders,
        held_for: Option<Duration>,
        now: Now,
    ) -> (bool, PermitsHanded) {
        let reservation = self.reservation;
        let (state, dropped) = self.live(key, now.time);
        let released = state.holds_as(token, holders) && state.holders.remove(&token).is_some();
        if released && let Some(held) = held_for {
            state.typical_hold = Some(Duration::from_millis(held.as_millis() as u64));
        }
        let reserved = state.hand_to_line(now.time, holders.limit(), reservation);
        (released, PermitsHanded { reserved, dropped })
    }

    /// Puts `waiter` in `key`'s line (a writer when `holders` says so), within `cap`, as the
    /// lock's line takes it ([`LockModel::join`](crate::lock::model::LockModel::join)); free
    /// permits go to the line. `Err` with how many wait when refused (nothing changed).
    pub fn join(
        &mut self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        holders: Holders,
        cap: Option<LineCap>,
        now: Now,
    ) -> (Result<(u64, Vec<Waiter>), u64>, PermitsHanded) {
        let reservation = self.reservation;
        let (state, dropped) = self.live(key, now.time);
        let mut handed = PermitsHanded {
            dropped,
            ..PermitsHanded::default()
        };
        let reserved = &state.reserved;
        let evicted = match state.line.make_room(waiter, replacing, cap, |candidate| {
            reserved.contains_key(candidate)
        }) {
            Ok(evicted) => evicted,
            Err(waiting) => return (Err(waiting), handed),
        };
        for gone in evicted.iter().chain(replacing) {
            state.writers.remove(gone);
        }
        state.line.join(waiter, replacing);
        if holders.writes() {
            state.writers.insert(waiter.clone());
        } else {
            state.writers.remove(waiter);
        }
        handed.reserved = state.hand_to_line(now.time, holders.limit(), reservation);
        (Ok((state.line.ahead_of(Some(waiter)), evicted)), handed)
    }

    /// Takes `waiter` out of `key`'s line; a permit reserved for it goes to the line.
    pub fn leave(&mut self, key: &LockKey, waiter: &Waiter, holders: Holders, now: Now) -> PermitsHanded {
        let reservation = self.reservation;
        let (state, dropped) = self.live(key, now.time);
        state.leave_line(waiter);
        state.reserved.remove(waiter);
        let reserved = state.hand_to_line(now.time, holders.limit(), reservation);
        PermitsHanded { reserved, dropped }
    }

    /// `token`'s permit of `key` runs out now (its holder crashed).
    pub fn expire_permit(&mut self, key: &LockKey, token: LockToken, now: Duration) {
        if let Some((_, deadline)) = self
            .keys
            .get_mut(key)
            .and_then(|permits| permits.holders.get_mut(&token))
        {
            *deadline = now;
        }
    }

    /// The permit of `key` reserved for `waiter` runs out now (it never came).
    pub fn expire_reservation(&mut self, key: &LockKey, waiter: &Waiter, now: Duration) {
        if let Some(deadline) = self
            .keys
            .get_mut(key)
            .and_then(|permits| permits.reserved.get_mut(waiter))
        {
            *deadline = now;
        }
    }

    /// The holders of `key`'s live permits, and whether each writes.
    pub fn holders(&self, key: &LockKey, now: Duration) -> Vec<(LockToken, bool)> {
        let Some(permits) = self.keys.get(key) else {
            return Vec::new();
        };
        let mut holders: Vec<_> = permits
            .holders
            .iter()
            .filter(|(_, (_, deadline))| *deadline > now)
            .map(|(token, _)| (*token, permits.writer == Some(*token)))
            .collect();
        holders.sort_unstable_by_key(|(token, _)| token.to_hex());
        holders
    }

    /// The waiters `key`'s live reservations are for.
    pub fn reserved(&self, key: &LockKey, now: Duration) -> Vec<Waiter> {
        let Some(permits) = self.keys.get(key) else {
            return Vec::new();
        };
        let mut reserved: Vec<Waiter> = permits
            .reserved
            .iter()
            .filter(|(_, deadline)| **deadline > now)
            .map(|(waiter, _)| waiter.clone())
            .collect();
        reserved.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        reserved
    }

    /// `key`'s line, first come first, each waiter with whether it writes.
    pub fn line(&self, key: &LockKey) -> Vec<(Waiter, bool)> {
        self.keys.get(key).map_or_else(Vec::new, |permits| {
            let line = permits.line.order.values();
            line.map(|waiter| (waiter.clone(), permits.writers.contains(waiter)))
                .collect()
        })
    }

    /// The last fencing token `key` handed out (0 for none).
    pub fn fence(&self, key: &LockKey) -> u64 {
        self.keys.get(key).map_or(0, |permits| permits.fence)
    }

    /// Forgets the idle keys that hold no live permit nor reservation (a permit of a TTL longer
    /// than the idle time may still run unextended: kept, with its key's state).
    pub(crate) fn forget(&mut self, idle: &[LockKey], now: Duration) {
        for key in idle {
            let live = self
                .keys
                .get(key)
                .and_then(KeyPermits::last_deadline)
                .is_some_and(|last| last > now);
            if !live {
                self.keys.remove(key);
            }
        }
    }
}
