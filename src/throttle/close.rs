//! Limits the handler learns: a handler that hears "429, retry after 30 s" from an upstream
//! closes its throttled key (or another key of the same throttle, such as the domain) until
//! then, for every process at once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Rate, ThrottleStore};
use crate::error::{KeyError, StoreError};
use crate::key::LockKey;

tokio::task_local! {
    static ADMITTED: ThrottleScope;
}

/// What a throttled handler's task carries: the key its request was admitted on, the
/// throttle's store and rate (to close keys with), and whether the handler asked its request
/// to wait for a reopening.
#[derive(Clone)]
pub(crate) struct ThrottleScope {
    key: LockKey,
    closer: Arc<dyn Closer>,
    reopening: Arc<Mutex<Option<(LockKey, Instant)>>>,
}

/// A throttle's store and rate, behind one type whatever the store's.
trait Closer: Send + Sync {
    fn close(
        &self,
        key: LockKey,
        duration: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Duration, StoreError>> + Send>>;
}

struct StoreCloser<St> {
    store: St,
    rate: Rate,
}

impl<St: ThrottleStore> Closer for StoreCloser<St> {
    fn close(
        &self,
        key: LockKey,
        duration: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Duration, StoreError>> + Send>> {
        let (store, rate) = (self.store.clone(), self.rate);
        Box::pin(async move { store.close_for(&key, rate, duration).await })
    }
}

/// The scope is updated in one step each time: a panic elsewhere cannot leave it half-changed.
fn lock_unpoisoned<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ThrottleScope {
    /// The scope of a request admitted on `key` by a throttle of `store` at `rate`.
    pub(crate) fn new<St: ThrottleStore>(key: LockKey, store: St, rate: Rate) -> Self {
        ThrottleScope {
            key,
            closer: Arc::new(StoreCloser { store, rate }),
            reopening: Arc::default(),
        }
    }

    /// Runs `work` (the handler, or the guards inside) in this scope.
    pub(crate) fn run<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        ADMITTED.scope(self, work)
    }

    /// The key whose reopening the handler asked its request to wait for, and how long from
    /// now that is.
    pub(crate) fn reopening(&self) -> Option<(LockKey, Duration)> {
        let (key, at) = lock_unpoisoned(&self.reopening).clone()?;
        Some((key, at.saturating_duration_since(Instant::now())))
    }
}

/// A key closed by [`close_for`] or [`close_key_for`]: which, and until when.
#[derive(Clone)]
pub struct Closed {
    key: LockKey,
    opens_in: Duration,
    at: Instant,
    reopening: Arc<Mutex<Option<(LockKey, Instant)>>>,
}

impl fmt::Debug for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Closed")
            .field("key", &self.key)
            .field("opens_in", &self.opens_in)
            .finish()
    }
}

impl Closed {
    /// The key closed.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// How long it stays closed from when it was closed, by the store's clock (longer than
    /// asked when its schedule was already later).
    pub fn opens_in(&self) -> Duration {
        self.opens_in
    }

    /// Ends the current request as throttled once its handler returns, whatever the handler
    /// returns (its response or error is dropped): a caller gets
    /// [`Error::Throttled`](crate::Error::Throttled) with the time to the reopening, and a job
    /// goes back to wait for it without using an attempt (its scheduler makes it due then).
    pub fn retry_at_reopening(&self) {
        *lock_unpoisoned(&self.reopening) = Some((self.key.clone(), self.at + self.opens_in));
    }
}

/// Why a key could not be closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// Called outside a handler a [`ThrottleLayer`](super::ThrottleLayer) admitted: there is
    /// no throttle to close a key of. (A task the handler spawned is outside too.)
    #[error("not inside a throttled handler: there is no throttle to close a key of")]
    NotThrottled,
    /// The key named is not a valid key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The store failed: the key may or may not be closed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The key was asked to close for longer than [`MAX_CLOSE`]: a "retry after" that far off is
    /// a mistake (a timestamp read as seconds, a unit mixed up), and the key would stay closed
    /// for it. Nothing was closed.
    #[error("a key closes for at most {max:?}, not {asked:?}")]
    TooLong {
        /// How long the key was asked to close.
        asked: Duration,
        /// The longest a key may close.
        max: Duration,
    },
}

/// The longest a key may close for ([`close_for`], [`close_key_for`]): a day, the longest an
/// upstream's quota window usually runs (a daily quota reopens within one).
pub const MAX_CLOSE: Duration = Duration::from_secs(24 * 60 * 60);

/// Closes the key the current request was admitted on, for `duration` from now (by the
/// store's clock): an upstream answered "429, retry after". Every process sees it at once:
/// requests and jobs for the key wait for the reopening (a [`FailFast`](crate::strategy::FailFast)
/// caller is told exactly when, a [`Retry`](crate::strategy::Retry) caller books the first
/// slot after it and sleeps until then, a [`Defer`](crate::strategy::Defer) job is due at its
/// booked slot after it), and the key keeps its rate after it: no burst of what waited.
/// Other keys are not slowed.
///
/// Inside the innermost [`ThrottleLayer`](super::ThrottleLayer)'s handler; elsewhere,
/// [`CloseError::NotThrottled`]. For at most [`MAX_CLOSE`] (a day); longer is
/// [`CloseError::TooLong`], and nothing is closed.
///
/// ```
/// use std::time::Duration;
/// use redefer::{MemoryStore, Error};
/// use redefer::throttle::{close_for, Rate, ThrottleLayer};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let fetch = ThrottleLayer::new(MemoryStore::new(), |domain: &String| Some(domain.clone()), Rate::per_second(10)?)
///     .layer(service_fn(|_: String| async move {
///         // The upstream said: 429, Retry-After: 2.
///         let closed = close_for(Duration::from_secs(2)).await?;
///         closed.retry_at_reopening();
///         Ok::<_, redefer::throttle::CloseError>(())
///     }));
/// match fetch.clone().oneshot("example.com".to_string()).await {
///     Err(Error::Throttled { retry_after, .. }) => assert!(retry_after > Duration::from_millis(1_900)),
///     other => panic!("{other:?}"),
/// }
/// // Everyone waits for the reopening.
/// assert!(matches!(fetch.oneshot("example.com".to_string()).await, Err(Error::Throttled { .. })));
/// # Ok(()) }
/// ```
pub async fn close_for(duration: Duration) -> Result<Closed, CloseError> {
    let key = ADMITTED
        .try_with(|scope| scope.key.clone())
        .map_err(|_| CloseError::NotThrottled)?;
    close(key, duration).await
}

/// Closes `key`, another key of the current request's throttle (the domain of a URL, the API
/// key of a tenant), for `duration` from now, as [`close_for`] closes the request's own.
pub async fn close_key_for(key: &str, duration: Duration) -> Result<Closed, CloseError> {
    let key = LockKey::new(key)?;
    close(key, duration).await
}

async fn close(key: LockKey, duration: Duration) -> Result<Closed, CloseError> {
    if duration > MAX_CLOSE {
        return Err(CloseError::TooLong {
            asked: duration,
            max: MAX_CLOSE,
        });
    }
    let scope = ADMITTED
        .try_with(ThrottleScope::clone)
        .map_err(|_| CloseError::NotThrottled)?;
    let at = Instant::now();
    let opens_in = scope.closer.close(key.clone(), duration).await?;
    metrics::counter!("redefer_throttle_closed_total").increment(1);
    tracing::info!(%key, ?opens_in, "key closed by its handler");
    Ok(Closed {
        key,
        opens_in,
        at,
        reopening: scope.reopening,
    })
}
