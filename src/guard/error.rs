//! The error of a call through [`LockService`](crate::LockService).

use std::time::Duration;

use thiserror::Error;

use crate::error::{BoxError, KeyError, StoreError};
use crate::key::LockKey;
use crate::queue::JobId;
use crate::renewal::LossReason;

/// What a job whose run ended in an [`Error`] (or a panic, or its time limit) asks of its
/// queue: the scheduler settles the job by it, and needs to know no guard kind.
pub(crate) enum JobAfterError {
    /// The key is held, or closed: the job waits in the key's line, using no attempt.
    /// `retry_after` is the strategy's estimate; `lock_remaining`, how long the lock the run
    /// met was still held for (a closed key has no holder).
    WaitsInLine {
        key: LockKey,
        retry_after: Option<Duration>,
        lock_remaining: Option<Duration>,
    },
    /// The key is over its rate: the job waits for its slot, using no attempt.
    WaitsForSlot { key: LockKey, opens_in: Duration },
    /// The store failed, not the job (Redis unreachable, out of memory, a lock whose loss is
    /// unconfirmed): the job goes back without using an attempt.
    StoreFailed(String),
    /// The job failed: an attempt is used.
    Failed(String),
}

/// Why a call through [`LockService`](crate::LockService) failed. `E` is the inner service's
/// error.
///
/// An HTTP service answers a refused request with `409 Conflict` and `Retry-After`:
///
/// ```
/// use std::time::Duration;
/// use redefer::{Error, LockKey};
///
/// fn respond(error: &Error<std::io::Error>) -> (u16, Option<u64>) {
///     match error {
///         Error::Locked { retry_after, .. } => (409, retry_after.map(|after| after.as_secs_f64().ceil() as u64)),
///         Error::Store(_) => (503, None),
///         _ => (500, None),
///     }
/// }
/// let locked = Error::Locked { key: LockKey::new("order:7")?, retry_after: Some(Duration::from_millis(1500)) };
/// assert_eq!(respond(&locked), (409, Some(2)));
/// # Ok::<(), redefer::KeyError>(())
/// ```
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error<E> {
    /// The inner service failed. The lock was released.
    #[error("inner service failed: {0}")]
    Inner(#[source] E),
    /// Another request holds the lock and the conflict strategy refused to wait.
    #[error("{key:?} is locked by another request{}", retry_hint(*retry_after))]
    Locked {
        /// The key that is held.
        key: LockKey,
        /// When trying again may succeed, as the strategy says; the built-in strategies pass
        /// the layer's estimate: the holder's expected rest (its remaining TTL, at most a
        /// typical hold) plus a typical hold for each request waiting in the key's line. The
        /// typical hold is the key's last sampled hold (one release in eight reports it, kept
        /// an hour), else the average of every hold this layer measured (on any key), else
        /// [`DEFAULT_TYPICAL_HOLD`](crate::lock::DEFAULT_TYPICAL_HOLD) (100 ms); each
        /// hold counts at most the TTL.
        retry_after: Option<Duration>,
    },
    /// The request's key is closed: its permit limit is 0 (a
    /// [`permits_by`](crate::LockLayer::permits_by) closure said so). Nobody holds it and
    /// nothing was stored, whatever the strategy; trying again succeeds once the limit opens
    /// it. A job that meets a closed key goes back to wait, using no attempt. An HTTP service
    /// answers `503 Service Unavailable` (or `423 Locked`).
    #[error("{key:?} is closed (its permit limit is 0)")]
    Closed {
        /// The closed key.
        key: LockKey,
    },
    /// The caller already holds the key, in the same store: a handler (or a task it spawned
    /// with its holding, [`HeldLock::scope`](crate::HeldLock::scope)) called its stack again
    /// for the key it runs under. Refused at once, whatever the strategy, where the call would
    /// have waited for its own caller (and a job deferred for it would run only after it). Run
    /// the step in the handler itself, or push it to the queue to run after the holder.
    #[error("{key:?} is held by this request's own caller; a call under its lock cannot wait for it")]
    HeldByCaller {
        /// The key the caller holds.
        key: LockKey,
    },
    /// The request's key is over its [`Rate`](crate::throttle::Rate) and the conflict strategy
    /// refused to wait. `retry_after` is exact: the key's next slot opens then (unless others
    /// take it first). An HTTP service answers `429 Too Many Requests` with `Retry-After`.
    #[error("{key:?} is over its rate; its next slot opens in {}", humantime::format_duration(*retry_after))]
    Throttled {
        /// The throttled key.
        key: LockKey,
        /// When the key's next slot opens, by the store's clock.
        retry_after: Duration,
    },
    /// A newer request for the key was already waiting, and this one, older, was dropped in
    /// its favour ([`Coalesce::latest`](crate::strategy::Coalesce::latest)): nothing of it is
    /// stored or run; the newer request runs in job `by`.
    #[error("{key:?} has a newer request waiting (job {by}); this one is superseded")]
    Superseded {
        /// The key.
        key: LockKey,
        /// The job that carries the newer request.
        by: JobId,
    },
    /// The key's line is full (its strategy's [`LineCap`](crate::guard::LineCap)): the request
    /// was refused and nothing was stored. An HTTP service answers `429 Too Many Requests` or
    /// `503 Service Unavailable` with `Retry-After`.
    #[error("{key:?} has {waiting} requests waiting, its line's limit{}", retry_hint(*retry_after))]
    LineFull {
        /// The key whose line is full.
        key: LockKey,
        /// How many wait in its line.
        waiting: u64,
        /// When trying again may succeed: the key's expected wait.
        retry_after: Option<Duration>,
    },
    /// The lock stopped being ours while the handler ran (expired during a pause, deleted by an
    /// operator, unreachable store), so the handler was stopped rather than run on unlocked.
    #[error("lost the lock on {key:?} while the handler ran ({reason:?})")]
    LockLost {
        /// The key whose lock was lost.
        key: LockKey,
        /// What the renewal found.
        reason: LossReason,
    },
    /// The key extractor produced a key that is rejected (empty, too long). No Redis call was made.
    #[error("invalid lock key: {0}")]
    InvalidKey(#[from] KeyError),
    /// The store failed; no lock is held.
    #[error("lock store failed: {0}")]
    Store(#[source] StoreError),
    /// The conflict strategy failed (for example, a deferral could not be stored).
    #[error("conflict strategy failed: {0}")]
    Strategy(#[source] BoxError),
}

fn retry_hint(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(after) => format!("; retry after {}", humantime::format_duration(after)),
        None => String::new(),
    }
}

impl<E> Error<E> {
    /// When trying again may succeed, for [`Error::Locked`], [`Error::Throttled`] and
    /// [`Error::LineFull`].
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Locked { retry_after, .. } | Error::LineFull { retry_after, .. } => *retry_after,
            Error::Throttled { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

impl<E: std::fmt::Display> Error<E> {
    /// What a job whose run ended in this error asks of its queue; `lock_remaining`: how long
    /// the lock the run met was still held for, as the run learned it.
    pub(crate) fn for_job(self, lock_remaining: Option<Duration>) -> JobAfterError {
        match self {
            Error::Locked { key, retry_after } => JobAfterError::WaitsInLine {
                key,
                retry_after,
                lock_remaining,
            },
            // A closed key is waited for, as a held one is: its fallback, no attempt.
            Error::Closed { key } => JobAfterError::WaitsInLine {
                key,
                retry_after: None,
                lock_remaining: None,
            },
            Error::Throttled { key, retry_after } => JobAfterError::WaitsForSlot {
                key,
                opens_in: retry_after,
            },
            error @ (Error::Store(_)
            | Error::LockLost {
                reason: LossReason::Unconfirmed,
                ..
            }) => JobAfterError::StoreFailed(error.to_string()),
            error => JobAfterError::Failed(error.to_string()),
        }
    }
}
