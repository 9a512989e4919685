//! A strategy per request: one stack serves callers that want different answers to a conflict.

use std::future::Future;

use futures_util::future::Either;

use super::{Conflict, ConflictStrategy, Decision, FailFast};
use crate::error::BoxError;

/// Answers a request's conflict with one strategy when `predicate` holds for the request,
/// with another otherwise ([`FailFast`] unless set with [`otherwise`](Switch::otherwise)).
/// Both strategies are typed: no boxing, and switches nest for more than two.
///
/// One stack where interactive callers fail fast and webhooks defer:
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{LockKey, LockLayer, LockToken, MemoryStore, Outcome, Error};
/// use redefer::lock::{Fencing, Holders, LockStore};
/// use redefer::queue::DelayQueue;
/// use redefer::strategy::{Defer, FailFast, Switch};
/// use serde::{Deserialize, Serialize};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct Change { order: u64, from_webhook: bool }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let queue = DelayQueue::<Change, _>::new(store.clone(), "changes")?;
/// let service = LockLayer::new(store.clone(), |c: &Change| Some(format!("order:{}", c.order)))
///     .on_conflict(Switch::when(|c: &Change| c.from_webhook, Defer::new(queue)).otherwise(FailFast))
///     .layer(service_fn(|_: Change| async { Ok::<_, Infallible>(()) }));
///
/// let holder = LockToken::random();
/// store.acquire(&LockKey::new("order:7")?, holder, Duration::from_secs(30), Holders::One, None, Fencing::On)
///     .await?;
/// let webhook = service.clone().oneshot(Change { order: 7, from_webhook: true }).await?;
/// assert!(matches!(webhook, Outcome::Deferred(_)));
/// let person = service.oneshot(Change { order: 7, from_webhook: false }).await;
/// assert!(matches!(person, Err(Error::Locked { .. })));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Switch<P, A, B = FailFast> {
    predicate: P,
    when: A,
    otherwise: B,
}

impl<P, A> Switch<P, A, FailFast> {
    /// `strategy` for the requests `predicate` holds for; the others fail fast.
    pub fn when(predicate: P, strategy: A) -> Self {
        Switch {
            predicate,
            when: strategy,
            otherwise: FailFast,
        }
    }
}

impl<P, A, B> Switch<P, A, B> {
    /// `strategy` for the requests the predicate does not hold for.
    pub fn otherwise<C>(self, strategy: C) -> Switch<P, A, C> {
        Switch {
            predicate: self.predicate,
            when: self.when,
            otherwise: strategy,
        }
    }
}

impl<Req, P, A, B> ConflictStrategy<Req> for Switch<P, A, B>
where
    P: Fn(&Req) -> bool + Send + Sync + 'static,
    A: ConflictStrategy<Req>,
    B: ConflictStrategy<Req>,
{
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        if (self.predicate)(request) {
            Either::Left(self.when.on_conflict(conflict, request))
        } else {
            Either::Right(self.otherwise.on_conflict(conflict, request))
        }
    }

    fn supersedes(&self) -> bool {
        self.when.supersedes() || self.otherwise.supersedes()
    }
}
