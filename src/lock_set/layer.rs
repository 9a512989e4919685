//! The layer that builds [`LockSetService`]s, and what gives a request its set of keys.

use std::time::Duration;

use tower::Layer;

use super::LockSetService;
use crate::LockLayer;
use crate::guard::GuardService;
use crate::lock::Fencing;
use crate::strategy::FailFast;

/// The most keys one set holds: a request that asks for more is refused before any store call
/// ([`KeyError::TooManyKeys`](crate::KeyError::TooManyKeys)). It bounds the work of one
/// script.
pub const MAX_SET_KEYS: usize = 64;

/// Maps a request to the keys it must hold together, or `None` to pass it through unlocked.
/// The keys may come in any order and more than once: a set is a set. `Some` of no keys is
/// refused ([`KeyError::EmptySet`](crate::KeyError::EmptySet)), not run unlocked: an
/// extractor that lost its keys fails closed.
///
/// Implemented for every `Fn(&Req) -> Option<Vec<String>>`:
///
/// ```
/// use redefer::lock_set::KeySetExtractor;
///
/// struct Transfer { from: u64, to: u64 }
///
/// let accounts = |t: &Transfer| Some(vec![format!("account:{}", t.from), format!("account:{}", t.to)]);
/// assert_eq!(
///     accounts.lock_keys(&Transfer { from: 7, to: 3 }),
///     Some(vec!["account:7".to_string(), "account:3".to_string()])
/// );
/// ```
pub trait KeySetExtractor<Req> {
    /// The keys `request` must hold together, or `None` when it needs no lock.
    fn lock_keys(&self, request: &Req) -> Option<Vec<String>>;
}

impl<Req, F> KeySetExtractor<Req> for F
where
    F: Fn(&Req) -> Option<Vec<String>>,
{
    fn lock_keys(&self, request: &Req) -> Option<Vec<String>> {
        self(request)
    }
}

/// Runs each request while it holds every key of its set, in `store`, with `strategy`
/// deciding what a request does when a key of its set is held. A set of one key is the mutex.
///
/// ```
/// use std::convert::Infallible;
/// use redefer::lock_set::LockSetLayer;
/// use redefer::{current_lock, Backoff, MemoryStore, strategy::Retry};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// struct Transfer { from: u64, to: u64, cents: i64 }
///
/// let service = ServiceBuilder::new()
///     .layer(
///         LockSetLayer::new(MemoryStore::new(), |t: &Transfer| {
///             Some(vec![format!("account:{}", t.from), format!("account:{}", t.to)])
///         })
///         .on_conflict(Retry::new(Backoff::default())),
///     )
///     .service(service_fn(|t: Transfer| async move {
///         // Both accounts are ours here, each with its fencing token.
///         assert!(current_lock().is_some());
///         Ok::<_, Infallible>(t.cents)
///     }));
///
/// let moved = service.oneshot(Transfer { from: 1, to: 2, cents: 250 }).await.unwrap();
/// assert_eq!(moved.done(), Some(250));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockSetLayer<St, X, Strat = FailFast> {
    /// The lock's layer: each key of a set is held as it holds a key, with its store, TTL,
    /// fencing and strategy; its extractor gives the set.
    pub(crate) lock: LockLayer<St, X, Strat>,
}

impl<St, X> LockSetLayer<St, X, FailFast> {
    /// Locks each request on the keys `extractor` gives it, failing fast on conflicts, with
    /// the default TTL of 10 s.
    pub fn new(store: St, extractor: X) -> Self {
        LockSetLayer {
            lock: LockLayer::new(store, extractor),
        }
    }
}

impl<St, X, Strat> LockSetLayer<St, X, Strat> {
    /// How long each key's lock lives unless renewed, as [`LockLayer::ttl`].
    ///
    /// # Panics
    ///
    /// If `ttl` is shorter than 3 ms, too short to renew.
    pub fn ttl(self, ttl: Duration) -> Self {
        LockSetLayer {
            lock: self.lock.ttl(ttl),
        }
    }

    /// Whether handlers get a fencing token per key (on by default), as
    /// [`LockLayer::fencing`].
    pub fn fencing(self, fencing: Fencing) -> Self {
        LockSetLayer {
            lock: self.lock.fencing(fencing),
        }
    }

    /// What a request does when a key of its set is held.
    pub fn on_conflict<Strat2>(self, strategy: Strat2) -> LockSetLayer<St, X, Strat2> {
        LockSetLayer {
            lock: self.lock.on_conflict(strategy),
        }
    }
}

impl<S, St: Clone, X: Clone, Strat: Clone> Layer<S> for LockSetLayer<St, X, Strat> {
    type Service = LockSetService<S, St, X, Strat>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}
