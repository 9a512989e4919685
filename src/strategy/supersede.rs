//! Ask the holder to stop, and take the key as soon as it lets go.

use std::future::Future;
use std::time::Duration;

use futures_util::future::Either;

use super::{Conflict, ConflictStrategy, Decision, FailFast};
use crate::error::BoxError;
use crate::metric_names;

/// The newest request wins: a request that finds its key held asks the holder to stop (cancel
/// in progress), then waits in the key's line and takes the key as soon as it is released (or
/// the holder's lock expires). The holder's handler hears the request through
/// [`HeldLock::superseded`](crate::HeldLock::superseded), in whatever process it runs, as long
/// as its layer's strategy supersedes too (the same stack, deployed many times, does); its
/// late writes carry a lower fencing token than the newer request's.
///
/// The request waits at most [`max_wait`](Supersede::max_wait) (10 s by default, the default
/// lock TTL, within which a holder that ignores the request loses the key anyway); then, or
/// over a throttle's rate (which has no holder to stop), the fallback strategy decides
/// ([`FailFast`] unless set with [`then`](Supersede::then)). While it waits it asks again, at
/// growing intervals: a holder that had only just taken the key may not have been listening
/// yet. A semaphore's holders are all asked.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{current_lock, LockLayer, MemoryStore};
/// use redefer::strategy::Supersede;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // A sync of an account takes `seconds`, unless a newer one supersedes it.
/// let syncs = LockLayer::new(MemoryStore::new(), |(account, _): &(u64, u64)| Some(format!("account:{account}")))
///     .on_conflict(Supersede::new().max_wait(Duration::from_secs(5)))
///     .layer(service_fn(|(_, seconds): (u64, u64)| async move {
///         let lock = current_lock().expect("runs under the lock");
///         tokio::select! {
///             () = lock.superseded() => Ok::<_, Infallible>("superseded"),
///             () = tokio::time::sleep(Duration::from_secs(seconds)) => Ok("synced"),
///         }
///     }));
/// let older = tokio::spawn(syncs.clone().oneshot((7, 60)));
/// tokio::task::yield_now().await;
/// let newer = syncs.oneshot((7, 0)).await.unwrap();
/// assert_eq!(newer.done(), Some("synced"));
/// assert_eq!(older.await.unwrap().unwrap().done(), Some("superseded"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Supersede<F = FailFast> {
    max_wait: Duration,
    fallback: F,
}

/// The first wait between asks, doubling up to [`MAX_ASK_INTERVAL`].
const FIRST_ASK_INTERVAL: Duration = Duration::from_millis(5);
/// The longest wait between asks.
const MAX_ASK_INTERVAL: Duration = Duration::from_millis(200);

impl Supersede<FailFast> {
    /// Supersedes, waiting at most 10 s (the default lock TTL) for the key, then fails fast.
    pub fn new() -> Self {
        Supersede {
            max_wait: crate::guard::DEFAULT_TTL,
            fallback: FailFast,
        }
    }
}

impl Default for Supersede<FailFast> {
    fn default() -> Self {
        Supersede::new()
    }
}

impl<F> Supersede<F> {
    /// Waits at most this long for the holder to let go before falling through.
    pub fn max_wait(self, max_wait: Duration) -> Self {
        Supersede { max_wait, ..self }
    }

    /// What happens when the wait is spent (or the key is throttled, not held).
    pub fn then<G>(self, fallback: G) -> Supersede<G> {
        Supersede {
            max_wait: self.max_wait,
            fallback,
        }
    }
}

impl<Req, F> ConflictStrategy<Req> for Supersede<F>
where
    F: ConflictStrategy<Req>,
{
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        let interval = FIRST_ASK_INTERVAL
            .saturating_mul(1 << conflict.attempt.min(16))
            .min(MAX_ASK_INTERVAL)
            .min(self.max_wait.saturating_sub(conflict.waited));
        let line = match conflict.line() {
            Some(line) if !interval.is_zero() => line.clone(),
            _ => return Either::Right(self.fallback.on_conflict(conflict, request)),
        };
        Either::Left(async move {
            if conflict.attempt == 0 {
                metric_names::supersede_asked();
            }
            line.ask_holders_to_stop().await?;
            // The release hands the key to the line, this request in it, at once.
            Ok(Decision::RetryAfter(interval))
        })
    }

    fn supersedes(&self) -> bool {
        true
    }
}
