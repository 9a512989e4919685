//! The layer that builds [`LockSetService`]s, and what gives a request its set of keys.

use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::LockSetService;
use crate::guard::{DEFAULT_TTL, GuardService};
use crate::lock::{Fencing, LayerHolds};
use crate::strategy::FailFast;

/// The most keys one set holds: a request that asks for more is refused before any store call
/// ([`KeyError::TooManyKeys`](crate::KeyError::TooManyKeys)). It bounds the work of one
/// script.
pub const MAX_SET_KEYS: usize = 64;

/// Maps a request to the keys it must hold together, or `None` (or no keys) to pass it
/// through unlocked. The keys may come in any order and more than once: a set is a set.
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
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) strategy: Strat,
    pub(crate) ttl: Duration,
    pub(crate) fencing: Fencing,
    /// The holds this layer's services measured: for a key whose own were never sampled.
    pub(crate) holds: Arc<LayerHolds>,
}

impl<St, X> LockSetLayer<St, X, FailFast> {
    /// Locks each request on the keys `extractor` gives it, failing fast on conflicts, with
    /// the default TTL of 10 s.
    pub fn new(store: St, extractor: X) -> Self {
        LockSetLayer {
            store,
            extractor,
            strategy: FailFast,
            ttl: DEFAULT_TTL,
            fencing: Fencing::On,
            holds: Arc::default(),
        }
    }
}

impl<St, X, Strat> LockSetLayer<St, X, Strat> {
    /// How long each key's lock lives unless renewed, as [`LockLayer::ttl`](crate::LockLayer::ttl).
    ///
    /// # Panics
    ///
    /// If `ttl` is shorter than 3 ms, too short to renew.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        assert!(
            ttl >= Duration::from_millis(3),
            "lock TTL {ttl:?} is shorter than 3 ms"
        );
        self.ttl = ttl;
        self
    }

    /// Whether handlers get a fencing token per key (on by default), as
    /// [`LockLayer::fencing`](crate::LockLayer::fencing).
    pub fn fencing(mut self, fencing: Fencing) -> Self {
        self.fencing = fencing;
        self
    }

    /// What a request does when a key of its set is held.
    pub fn on_conflict<Strat2>(self, strategy: Strat2) -> LockSetLayer<St, X, Strat2> {
        LockSetLayer {
            store: self.store,
            extractor: self.extractor,
            strategy,
            ttl: self.ttl,
            fencing: self.fencing,
            holds: self.holds,
        }
    }
}

impl<S, St: Clone, X: Clone, Strat: Clone> Layer<S> for LockSetLayer<St, X, Strat> {
    type Service = LockSetService<S, St, X, Strat>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}
