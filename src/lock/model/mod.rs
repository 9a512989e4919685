//! The lock's state machine in plain Rust: what the lock scripts do (`lock_prelude.lua`,
//! `lock_acquire.lua`, `lock_release.lua`, `lock_join.lua`, `lock_leave.lua`, the lines of
//! `line.lua` and `line_join.lua`), written once, with the clock passed in.
//!
//! [`LockModel`] is the in-memory store's lock (the store adds a mutex, the announcements of
//! handoffs and the idle sweep), and the reference the Redis scripts are checked against:
//! `tests/lock_model.rs` runs the same operations on both and compares every reply, and
//! `tests/lock_protocol.rs` explores every interleaving of a few callers on it. No I/O, no
//! tokio: an operation takes the time and returns what it answered and what it handed over.
//!
//! ```
//! use std::time::Duration;
//! use redefer::lock::model::{LockModel, Now};
//! use redefer::lock::{Acquisition, LockToken};
//! use redefer::guard::Waiter;
//! use redefer::LockKey;
//!
//! let mut model = LockModel::new(Duration::from_secs(2));
//! let key = LockKey::new("order:42")?;
//! let (first, second) = (LockToken::random(), LockToken::random());
//! let ttl = Duration::from_secs(5);
//! let now = Now::at(Duration::ZERO);
//!
//! assert!(matches!(model.acquire(&key, first, ttl, None, now).acquisition, Acquisition::Acquired(_)));
//! // The second caller waits in the key's line: the release reserves the key for it.
//! let waiter = Waiter::caller(second);
//! model.join(&key, &waiter, None, None, now).expect("no cap");
//! let released = model.release(&key, first, None, now).expect("held by `first`");
//! assert_eq!(released.handed.reserved, Some(waiter.clone()));
//! assert!(matches!(model.acquire(&key, second, ttl, Some(&waiter), now).acquisition, Acquisition::Acquired(_)));
//! # Ok::<(), redefer::KeyError>(())
//! ```

mod waiters;

use std::collections::HashMap;
use std::time::Duration;

pub(crate) use self::waiters::Waiters;
use super::{Acquisition, FencingToken, LockToken, next_fences};
use crate::guard::{LineCap, Waiter};
use crate::key::LockKey;

/// The time of an operation: the store's clock, which TTLs and reservations run on, and the
/// wall clock in µs, the floor of new fencing tokens (as `TIME` is in `fence.lua`: a counter
/// that was lost starts again above every token handed out before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Time on the store's clock (from any origin, the same for every operation).
    pub time: Duration,
    /// The wall clock in µs.
    pub wall_micros: u64,
}

impl Now {
    /// `time` on the store's clock, with a wall clock that gives fencing tokens no floor.
    pub fn at(time: Duration) -> Self {
        Now { time, wall_micros: 0 }
    }
}

/// Who has a key: its holder, or the first in line it is reserved for while handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A holder, with its fencing token.
    Owner(LockToken, FencingToken),
    /// Reserved for a waiter, handed the key at `since`.
    Reserved {
        /// The waiter the key waits for.
        waiter: Waiter,
        /// When it was handed the key.
        since: Duration,
    },
}

/// A key's holder and when its TTL (or the reservation) runs out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// Who has the key.
    pub holder: Holder,
    /// When it stops having it, on the store's clock.
    pub expires: Duration,
}

/// What handing a key over did: reserved it for a waiter, dropped one whose reservation ran
/// out unused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handed {
    /// The waiter the key is now reserved for.
    pub reserved: Option<Waiter>,
    /// The waiter dropped from the line: its reservation ran out and it never came.
    pub dropped: Option<Waiter>,
}

/// What an acquire answered and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The answer, with the fencing token on success.
    pub acquisition: Acquisition,
    /// A key found free with others in line went to the first of them.
    pub handed: Handed,
    /// A waiter took the key reserved for it: how long after it was handed it.
    pub handoff_waited: Option<Duration>,
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// Who the key went to.
    pub handed: Handed,
    /// The next in line after it (its job may be made due a reservation later).
    pub runner_up: Option<Waiter>,
}

/// What joining a line did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// How many wait before the waiter.
    pub ahead: u64,
    /// The jobs evicted to make room.
    pub evicted: Vec<Waiter>,
    /// A free key went to the first in line.
    pub handed: Handed,
}

/// One key: its holding, its line, its fencing counter and its typical hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyState {
    pub(crate) holding: Option<Holding>,
    pub(crate) waiters: Waiters,
    /// The last fencing token handed out.
    pub(crate) fence: u64,
    /// The key's typical hold: its last hold reported, in whole ms (a caller reports one
    /// release in a few), as `HOLDS` of the scripts.
    typical_hold: Option<Duration>,
}

impl KeyState {
    /// The key's typical hold, once one was recorded.
    pub(crate) fn typical_hold(&self) -> Option<Duration> {
        self.typical_hold
    }

    /// Whether the key is reserved for `waiter` (a live reservation: `live` ran first).
    pub(crate) fn reserved_for(&self, waiter: &Waiter) -> bool {
        matches!(&self.holding, Some(Holding { holder: Holder::Reserved { waiter: w, .. }, .. }) if w == waiter)
    }

    /// The waiter a live reservation is for.
    fn reserved_waiter(&self) -> Option<&Waiter> {
        match &self.holding {
            Some(Holding {
                holder: Holder::Reserved { waiter, .. },
                ..
            }) => Some(waiter),
            _ => None,
        }
    }

    /// What a caller (in line as `waiter`, if it is) meets on the key held by another.
    pub(crate) fn held(&self, waiter: Option<&Waiter>, now: Duration) -> Acquisition {
        Acquisition::Held {
            remaining: self
                .holding
                .as_ref()
                .map(|holding| holding.expires.saturating_sub(now)),
            ahead: self.waiters.ahead_of(waiter),
            typical_hold: self.typical_hold(),
            reserved: self.reserved_waiter().is_some(),
        }
    }

    /// Hands the free key to the first in line, as `hand_to_head` in `lock_prelude.lua`:
    /// reserved for it for `reservation`. With `drop_expired`, the waiter whose reservation
    /// ran out unused (the first in line, or the one a set's waiter passed the key to) leaves
    /// the line first. Without a line, the key is free.
    pub(crate) fn hand_to_head(
        &mut self,
        drop_expired: bool,
        now: Duration,
        reservation: Duration,
    ) -> Handed {
        let mut handed = Handed::default();
        if drop_expired
            && let Some(expired) = self.waiters.handed.take()
            && self.waiters.remove(&expired).is_some()
        {
            handed.dropped = Some(expired);
        }
        let head = self.waiters.head().cloned();
        self.reserve(head.clone(), now, reservation);
        handed.reserved = head;
        handed
    }

    /// Reserves the key for `waiter` (freeing it, for none) and notes whom it was handed.
    pub(crate) fn reserve(&mut self, waiter: Option<Waiter>, now: Duration, reservation: Duration) {
        self.holding = waiter.clone().map(|waiter| Holding {
            holder: Holder::Reserved { waiter, since: now },
            expires: now + reservation,
        });
        self.waiters.handed = waiter;
    }

    /// Takes the key for `token` for `ttl` as `waiter` (if in line, it leaves it). Returns the
    /// holding's fencing token.
    pub(crate) fn take(
        &mut self,
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        now: Now,
    ) -> FencingToken {
        if let Some(waiter) = waiter {
            self.waiters.remove(waiter);
            if self.waiters.handed.as_ref() == Some(waiter) {
                self.waiters.handed = None;
            }
        }
        let fence = FencingToken(next_fences(&mut self.fence, 1, now.wall_micros));
        self.holding = Some(Holding {
            holder: Holder::Owner(token, fence),
            expires: now.time + ttl,
        });
        fence
    }
}

/// The lock of every key: one holder per key, a line of waiters, a fencing counter, handoffs
/// to the first in line. See the [module](self).
#[derive(Debug, Clone)]
pub struct LockModel {
    pub(crate) keys: HashMap<LockKey, KeyState>,
    /// How long a key handed to the first in line stays reserved for it.
    pub(crate) reservation: Duration,
}

impl LockModel {
    /// No key held, nobody in line; a handed key is reserved for `reservation`.
    pub fn new(reservation: Duration) -> Self {
        LockModel {
            keys: HashMap::new(),
            reservation,
        }
    }

    /// `key`'s state, with a holding whose time ran out dropped first.
    pub(crate) fn live(&mut self, key: &LockKey, now: Duration) -> &mut KeyState {
        let state = self.keys.entry(key.clone()).or_default();
        if state
            .holding
            .as_ref()
            .is_some_and(|holding| holding.expires <= now)
        {
            state.holding = None;
        }
        state
    }

    /// Takes `key` for `token` for `ttl`, as `waiter` if given: when nobody has it and nobody
    /// is in line before the caller, or it is reserved for the caller; a key already held by
    /// `token` (a re-sent acquire) is extended and answers its fencing token again. A free key
    /// with others first in line goes to the first of them.
    pub fn acquire(
        &mut self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        now: Now,
    ) -> Acquired {
        let reservation = self.reservation;
        let state = self.live(key, now.time);
        let mut handed = Handed::default();
        let mut handoff_waited = None;
        match &mut state.holding {
            Some(Holding {
                holder: Holder::Owner(holder, fence),
                expires,
            }) => {
                let acquisition = if *holder == token {
                    *expires = now.time + ttl;
                    Acquisition::Acquired(Some(*fence))
                } else {
                    state.held(waiter, now.time)
                };
                return Acquired {
                    acquisition,
                    handed,
                    handoff_waited,
                };
            }
            Some(Holding {
                holder:
                    Holder::Reserved {
                        waiter: for_whom,
                        since,
                    },
                ..
            }) => {
                if waiter != Some(&*for_whom) {
                    return Acquired {
                        acquisition: state.held(waiter, now.time),
                        handed,
                        handoff_waited,
                    };
                }
                handoff_waited = Some(now.time.saturating_sub(*since));
            }
            None => {
                let head = state.waiters.head();
                if head.is_some() && head != waiter {
                    handed = state.hand_to_head(true, now.time, reservation);
                    // Nobody left in line (the one whose reservation ran out was dropped):
                    // the key is the caller's.
                    if handed.reserved.is_some() && handed.reserved.as_ref() != waiter {
                        let acquisition = Acquisition::Held {
                            remaining: Some(reservation),
                            ahead: state.waiters.ahead_of(waiter),
                            typical_hold: state.typical_hold(),
                            reserved: true,
                        };
                        return Acquired {
                            acquisition,
                            handed,
                            handoff_waited,
                        };
                    }
                    handed.reserved = None; // handed to the caller, who takes it now
                }
            }
        }
        let fence = state.take(token, ttl, waiter, now);
        Acquired {
            acquisition: Acquisition::Acquired(Some(fence)),
            handed,
            handoff_waited,
        }
    }

    /// Resets the TTL of `token`'s holding of `key` to `ttl`; `false` when it does not hold it.
    pub fn extend(&mut self, key: &LockKey, token: LockToken, ttl: Duration, now: Now) -> bool {
        match &mut self.live(key, now.time).holding {
            Some(Holding {
                holder: Holder::Owner(holder, _),
                expires,
            }) if *holder == token => {
                *expires = now.time + ttl;
                true
            }
            _ => false,
        }
    }

    /// Releases `token`'s holding of `key`, handing the key to the first in line; `held_for`
    /// goes into the key's typical hold. `None` when `token` does not hold it.
    pub fn release(
        &mut self,
        key: &LockKey,
        token: LockToken,
        held_for: Option<Duration>,
        now: Now,
    ) -> Option<Released> {
        let reservation = self.reservation;
        let state = self.live(key, now.time);
        if !matches!(&state.holding, Some(Holding { holder: Holder::Owner(holder, _), .. }) if *holder == token)
        {
            return None;
        }
        if let Some(held) = held_for {
            state.typical_hold = Some(Duration::from_millis(held.as_millis() as u64));
        }
        let handed = state.hand_to_head(false, now.time, reservation);
        let runner_up = state.waiters.order.values().nth(1).cloned();
        Some(Released { handed, runner_up })
    }

    /// Puts `waiter` in `key`'s line (at the end, or in the place of `replacing`; already in
    /// line, it keeps its place), within `cap`: a full line evicts its oldest jobs (never the
    /// one the key is reserved for) or refuses, with how many wait (`Err`, nothing changed).
    /// A key found free is handed to the first in line.
    pub fn join(
        &mut self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
        now: Now,
    ) -> Result<Joined, u64> {
        let reservation = self.reservation;
        let state = self.live(key, now.time);
        let reserved_for = state.reserved_waiter().cloned();
        let evicted = state.waiters.make_room(waiter, replacing, cap, |candidate| {
            reserved_for.as_ref() == Some(candidate)
        })?;
        state.waiters.join(waiter, replacing);
        let handed = match state.holding {
            Some(_) => Handed::default(),
            None => state.hand_to_head(true, now.time, reservation),
        };
        Ok(Joined {
            ahead: state.waiters.ahead_of(Some(waiter)),
            evicted,
            handed,
        })
    }

    /// Takes `waiter` out of `key`'s line; a key reserved for it goes to the next. Returns who
    /// it went to.
    pub fn leave(&mut self, key: &LockKey, waiter: &Waiter, now: Now) -> Option<Waiter> {
        let reservation = self.reservation;
        let state = self.live(key, now.time);
        state.waiters.remove(waiter);
        if state.reserved_for(waiter) {
            return state.hand_to_head(false, now.time, reservation).reserved;
        }
        None
    }

    /// `key`'s holding (or its reservation) runs out now, as it does when its holder crashed
    /// or the waiter handed the key never came: the key is free; a waiter whose reservation
    /// ran out is dropped from the line at the next attempt on the key.
    pub fn expire(&mut self, key: &LockKey) {
        if let Some(state) = self.keys.get_mut(key) {
            state.holding = None;
        }
    }

    /// Who has `key` now.
    pub fn holding(&mut self, key: &LockKey, now: Duration) -> Option<&Holding> {
        self.live(key, now).holding.as_ref()
    }

    /// `key`'s line, first come first.
    pub fn line(&self, key: &LockKey) -> Vec<Waiter> {
        self.keys
            .get(key)
            .map_or_else(Vec::new, |state| state.waiters.order.values().cloned().collect())
    }

    /// The waiter `key` was last handed to, until it takes it: dropped from the line at the
    /// next attempt on the key once its reservation ran out unused.
    pub fn handed(&self, key: &LockKey) -> Option<&Waiter> {
        self.keys.get(key).and_then(|state| state.waiters.handed.as_ref())
    }

    /// The last fencing token `key` handed out (0 for none).
    pub fn fence(&self, key: &LockKey) -> u64 {
        self.keys.get(key).map_or(0, |state| state.fence)
    }

    /// Forgets what idle keys kept (their line, counter and typical hold, as their Redis keys
    /// expire: a forgotten counter starts again at the clock) and every holding whose time
    /// ran out; a live holding stays.
    pub(crate) fn forget(&mut self, idle: &[LockKey], now: Duration) {
        for key in idle {
            if let Some(state) = self.keys.get_mut(key) {
                *state = KeyState {
                    holding: state.holding.take(),
                    ..KeyState::default()
                };
            }
        }
        self.keys.retain(|_, state| {
            if state
                .holding
                .as_ref()
                .is_some_and(|holding| holding.expires <= now)
            {
                state.holding = None;
            }
            state.holding.is_some() || !state.waiters.order.is_empty() || state.fence != 0
        });
    }
}
