//! A held key's line as a conflict strategy sees it: how many may wait in it, and a handle
//! that joins it within that cap.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Waiter;
use crate::error::StoreError;

/// The most requests a key's line holds, and what a request that finds it full does. Set on a
/// deferring strategy ([`Defer::max_waiting`](crate::strategy::Defer::max_waiting),
/// [`Coalesce::max_waiting`](crate::strategy::Coalesce::max_waiting)); it counts every waiter of
/// the key (deferred jobs and callers waiting in place), and holds however many producers
/// defer at once: the check and the join are one step in the store.
///
/// ```
/// use redefer::guard::{LineCap, Overflow};
///
/// let cap: LineCap = serde_json::from_str(r#"{ "max": 10, "overflow": "drop_oldest" }"#)?;
/// assert_eq!(cap, LineCap::new(10).drop_oldest());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineCap {
    /// The most waiters in the line.
    pub max: u64,
    /// What a request does when the line is full.
    #[serde(default)]
    pub overflow: Overflow,
}

/// What a request that finds its key's line full does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// It is refused: the caller gets [`Error::LineFull`](crate::Error::LineFull), with when
    /// trying again may succeed, and nothing is stored.
    #[default]
    RefuseNewest,
    /// The oldest deferred jobs in line make room: each goes to its queue's dead-letter set
    /// with the reason "superseded by a newer request". Callers waiting in place are never
    /// dropped (they could not be told); a line of callers only refuses the newest.
    DropOldest,
}

impl LineCap {
    /// At most `max` waiters, the newest refused beyond it.
    pub fn new(max: u64) -> Self {
        LineCap {
            max,
            overflow: Overflow::RefuseNewest,
        }
    }

    /// The same cap, the oldest deferred jobs dropped to make room.
    pub fn drop_oldest(self) -> Self {
        LineCap {
            overflow: Overflow::DropOldest,
            ..self
        }
    }
}

/// The reason a job dropped from a full line is buried with.
pub const SUPERSEDED_BY_NEWER: &str = "superseded by a newer request";

/// What a join within a cap did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineJoin {
    /// The waiter is in line (or already was).
    Joined {
        /// How many are in line before it.
        ahead: u64,
        /// The waiters taken out of the line to make room ([`Overflow::DropOldest`]): jobs, for
        /// their queues to bury.
        evicted: Vec<Waiter>,
    },
    /// The line is full: the waiter was not added.
    Full {
        /// How many wait in it.
        waiting: u64,
    },
}

/// A held key's line, which a [`Conflict`](crate::strategy::Conflict) of a lock or a semaphore
/// carries: a deferring strategy with a [`LineCap`] joins it with the job it stored, within
/// the cap, before telling the caller the request is deferred (otherwise the layer puts the
/// job in line itself); a [`Supersede`](crate::strategy::Supersede) strategy asks the key's
/// holders to stop through it.
#[derive(Clone)]
pub struct Line {
    actions: Arc<dyn LineActions>,
}

/// A future of the line's store.
pub(crate) type LineFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

/// What a strategy does with one key's line; object-safe, so that [`Line`] names no store type.
pub(crate) trait LineActions: Send + Sync {
    fn join(&self, waiter: Waiter, cap: LineCap) -> LineFuture<LineJoin>;
    fn ask_holders_to_stop(&self) -> LineFuture<()>;
}

impl Line {
    /// A line whose actions go to `actions` (a guard's store).
    pub(crate) fn new(actions: Arc<dyn LineActions>) -> Self {
        Line { actions }
    }

    /// Puts `waiter` at the end of the line (or in the place of the caller that waited in it)
    /// unless the line holds `cap.max` already, making room as `cap.overflow` says. Already in
    /// line, it keeps its place.
    pub fn join(
        &self,
        waiter: Waiter,
        cap: LineCap,
    ) -> impl Future<Output = Result<LineJoin, StoreError>> + Send + 'static {
        self.actions.join(waiter, cap)
    }

    /// Asks the key's holders to stop, on behalf of the request that met the key held: a
    /// holder under a layer whose strategy supersedes hears it through
    /// [`HeldLock::superseded`](crate::HeldLock::superseded), in whatever process it runs.
    pub fn ask_holders_to_stop(&self) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        self.actions.ask_holders_to_stop()
    }
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Line").finish_non_exhaustive()
    }
}
