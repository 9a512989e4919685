//! Refuse at once.

use std::future::{Future, ready};

use super::{Conflict, ConflictStrategy, Decision};
use crate::error::BoxError;

/// Refuses a request whose lock is held, with the holder's remaining TTL as the hint of when to
/// try again: [`Error::Locked`](crate::Error::Locked) `{ key, retry_after }`. An HTTP service
/// turns it into `409 Conflict` or `429 Too Many Requests` with `Retry-After`. Over a
/// [throttle](crate::throttle)'s rate, the answer is
/// [`Error::Throttled`](crate::Error::Throttled) with the exact time to the key's next slot.
///
/// The default strategy of [`LockLayer`](crate::LockLayer).
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{Error, LockKey, LockLayer, LockToken, MemoryStore};
/// use redefer::lock::{Fencing, Holders, LockStore};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// // Another request holds order 7 for 30 s.
/// let holder = LockToken::random();
/// store.acquire(&LockKey::new("order:7")?, holder, Duration::from_secs(30), Holders::One, None, Fencing::On)
///     .await?;
///
/// let service = LockLayer::new(store, |order: &u64| Some(format!("order:{order}")))
///     .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }));
/// match service.oneshot(7).await {
///     Err(Error::Locked { retry_after: Some(after), .. }) => assert!(after <= Duration::from_secs(30)),
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FailFast;

impl<Req> ConflictStrategy<Req> for FailFast {
    fn on_conflict(
        &self,
        conflict: Conflict,
        _request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        ready(Ok(Decision::Reject {
            retry_after: conflict.retry_after,
        }))
    }
}
