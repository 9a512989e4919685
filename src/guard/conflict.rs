//! What a request meets when its key is taken: a [`Conflict`], which a
//! [`ConflictStrategy`](crate::strategy::ConflictStrategy) decides about. What every conflict
//! says (the key, how long the call has tried) is its own; what a guard of one kind says (a
//! held key's holder and line, a throttled key's next slot) is that kind's ([`ConflictKind`]).

use std::time::Duration;

use super::{Line, NextSlot};
use crate::key::LockKey;

/// One failed attempt at a key, as a strategy sees it.
///
/// ```
/// use redefer::strategy::{Conflict, ConflictKind};
///
/// fn describe(conflict: &Conflict) -> String {
///     match &conflict.kind {
///         ConflictKind::Held(held) => format!("{} held, {} waiting before us", conflict.key, held.ahead),
///         ConflictKind::Throttled(throttled) => {
///             format!("{} over its rate, next slot in {:?}", conflict.key, throttled.next_slot.opens_in())
///         }
///         _ => format!("{} taken", conflict.key),
///     }
/// }
/// # let _ = describe;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Conflict {
    /// The key that is taken.
    pub key: LockKey,
    /// What the request waits for, as one key: its own key, or for a set of keys
    /// ([`LockSetLayer`](crate::lock_set::LockSetLayer)) one key naming the whole set (the
    /// keys joined by `+`), or for a write of a [read-write lock](crate::read_write) a name of
    /// its own (a read waits for its key). A deferring strategy that keeps one waiting job per
    /// key ([`Coalesce`](crate::strategy::Coalesce)) keeps it under this.
    pub waits_for: LockKey,
    /// How many conflicts this call met before this one (0 for the first).
    pub attempt: u32,
    /// How long this call has already waited for the key.
    pub waited: Duration,
    /// When the key may be this request's: for a lock, the holder's expected rest and a typical
    /// hold for each waiter ahead, from the key's recent holds (each at most the TTL); for a
    /// throttle, exactly when its next slot opens.
    pub retry_after: Option<Duration>,
    /// What the guard that met it says: a held key's holder and line, or a throttled key's
    /// next slot.
    pub kind: ConflictKind,
}

/// What a conflict says about the key, by the kind of guard that met it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ConflictKind {
    /// The key is held: a lock's holder, or every permit of a semaphore.
    Held(HeldConflict),
    /// The key is over its rate (a [`ThrottleLayer`](crate::throttle::ThrottleLayer)).
    Throttled(ThrottledConflict),
}

/// A key held by another, as a strategy sees it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HeldConflict {
    /// How long the holder's lock still lives, if it has a TTL (or the reservation, while the
    /// key is handed to the first in line).
    pub remaining: Option<Duration>,
    /// The key is being handed to the first in line (reserved), not held by a holder.
    pub reserved: bool,
    /// How many wait in the key's line before this request.
    pub ahead: u64,
    /// The key's line: a deferring strategy with a [`LineCap`](crate::guard::LineCap) joins it
    /// with the job it stored, within the cap; [`Supersede`](crate::strategy::Supersede) asks
    /// its holders to stop.
    pub line: Line,
}

/// A key over its rate, as a strategy sees it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ThrottledConflict {
    /// The key's next slot, which a strategy may book instead of trying again:
    /// [`Retry`](crate::strategy::Retry) waits exactly until it,
    /// [`Defer`](crate::strategy::Defer) stores the job due at it.
    pub next_slot: NextSlot,
}

impl Conflict {
    pub(crate) fn new(
        key: LockKey,
        waits_for: LockKey,
        attempt: u32,
        waited: Duration,
        retry_after: Option<Duration>,
        kind: ConflictKind,
    ) -> Self {
        Conflict {
            key,
            waits_for,
            attempt,
            waited,
            retry_after,
            kind,
        }
    }

    /// The holder and line of a held key (`None` for a throttled one).
    pub fn held(&self) -> Option<&HeldConflict> {
        match &self.kind {
            ConflictKind::Held(held) => Some(held),
            ConflictKind::Throttled(_) => None,
        }
    }

    /// The next slot of a throttled key (`None` for a held one).
    pub fn next_slot(&self) -> Option<&NextSlot> {
        match &self.kind {
            ConflictKind::Throttled(throttled) => Some(&throttled.next_slot),
            ConflictKind::Held(_) => None,
        }
    }

    /// The line of a held key (`None` for a throttled one).
    pub fn line(&self) -> Option<&Line> {
        self.held().map(|held| &held.line)
    }

    /// When a held key's holder (or its reservation for the first in line) ends, if it has a
    /// TTL: `None` for a throttled key.
    pub fn remaining(&self) -> Option<Duration> {
        self.held().and_then(|held| held.remaining)
    }

    /// How many wait in a held key's line before this request (0 for a throttled key).
    pub fn ahead(&self) -> u64 {
        self.held().map_or(0, |held| held.ahead)
    }
}
