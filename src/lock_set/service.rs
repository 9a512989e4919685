//! The service that runs requests while they hold their sets of keys: what the set's guard
//! does with a request.

use std::sync::Arc;

use tower::Service;

use super::{KeySetExtractor, LockSetLayer, MAX_SET_KEYS};
use crate::error::KeyError;
use crate::guard::{Contended, Guard, GuardService, GuardedResult, Nesting, OverHandler, call_contended};
use crate::key::LockKey;
use crate::sealed::SealedGuard;

/// Runs each request while it holds every key of its set; built by [`LockSetLayer`].
///
/// An uncontended request costs one store round trip to take its set (per hash slot on Redis
/// Cluster) and one release per key, sent together. Requests whose extractor returns `None`
/// pass through unlocked; `Some` of no keys is refused ([`KeyError::EmptySet`]).
pub type LockSetService<S, St, X, Strat> = GuardService<S, LockSetLayer<St, X, Strat>>;

impl<St, X, Strat> SealedGuard for LockSetLayer<St, X, Strat> {}

/// The set is its service's guard by the call path every guard shares (its part: `call.rs`).
impl<S, St, X, Strat, Req> Guard<S, Req> for LockSetLayer<St, X, Strat>
where
    Self: Contended<S, Req, Over = OverHandler, Key = Vec<LockKey>>,
    OverHandler: Nesting<S, Req>,
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
    X: KeySetExtractor<Req>,
{
    type Over = OverHandler;
    type Key = Vec<LockKey>;

    fn key(&self, request: &Req) -> Result<Option<Vec<LockKey>>, KeyError> {
        let Some(names) = self.lock.extractor.lock_keys(request) else {
            return Ok(None);
        };
        let mut keys = names
            .into_iter()
            .map(LockKey::new)
            .collect::<Result<Vec<_>, _>>()?;
        // One order for every set: the store's groups and the holdings follow it.
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > MAX_SET_KEYS {
            return Err(KeyError::TooManyKeys {
                count: keys.len(),
                max: MAX_SET_KEYS,
            });
        }
        if keys.is_empty() {
            return Err(KeyError::EmptySet);
        }
        Ok(Some(keys))
    }

    fn call(
        self: Arc<Self>,
        keys: Vec<LockKey>,
        inner: S,
        request: Req,
    ) -> impl Future<Output = GuardedResult<S, Req, Self>> + Send + 'static {
        call_contended(self, keys, inner, request)
    }
}
