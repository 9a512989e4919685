//! The renewal of one lease: registered with the watchdog when the lease is granted, run as a
//! task of its own from the first extension on.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, sleep_until, timeout_at};

use super::lease::{Lease, LossReason};
use super::watchdog::{self, Watched};

/// Keeps one lease alive while its holder works: extends it every third of its TTL from a task
/// of its own, so that a holder blocking its thread keeps its lease.
///
/// As a future, it resolves when the renewal gave up (the holder must stop then); dropping it
/// (the holder is done, on any path) stops the renewal.
pub(crate) struct Renewal {
    ends_lease: EndOnDrop,
    // Starts the renewal from the watchdog's thread when the first extension is due. Not a
    // tokio timer: one costs a registration with the runtime's timer wheel and its removal on
    // every request, most of which end long before; and a task spawned from the watchdog's
    // thread is taken by any worker, where one spawned by the holder's task would wait in its
    // worker's next-task slot, which other workers never steal from, behind a holder that
    // blocks that worker.
    _watched: Watched,
}

impl Renewal {
    /// Arms the renewal of a lease taken by a request sent at `granted_at`, for `ttl`, that
    /// `extend` extends by `ttl` from now (`Ok(false)`: the lease is gone). `what` names the
    /// lease in logs.
    ///
    /// Call it from within a tokio runtime: the renewal runs on that runtime.
    pub(crate) fn start<F, Fut, E>(what: &'static str, ttl: Duration, granted_at: Instant, extend: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let lease = Arc::new(Lease::granted(granted_at, ttl));
        let start = Start {
            lease: Arc::clone(&lease),
            what,
            ttl,
            runtime: Handle::current(),
            extend: Mutex::new(Some(extend)),
        };
        let start = Waker::from(Arc::new(start));
        Renewal {
            ends_lease: EndOnDrop(lease),
            _watched: watchdog::wake_at((granted_at + ttl / 3).into_std(), start),
        }
    }

    /// The lease, for [`while_valid`](super::while_valid).
    pub(crate) fn lease(&self) -> Arc<Lease> {
        Arc::clone(&self.ends_lease.0)
    }
}

impl Future for Renewal {
    type Output = LossReason;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LossReason> {
        self.ends_lease.0.poll_lost(cx)
    }
}

/// Ends the lease when the holder is done, however it ends.
struct EndOnDrop(Arc<Lease>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Starts the renewal task when woken: the first extension is due.
struct Start<F> {
    lease: Arc<Lease>,
    what: &'static str,
    ttl: Duration,
    runtime: Handle,
    /// Taken by the first wake: the renewal starts once.
    extend: Mutex<Option<F>>,
}

impl<F, Fut, E> Wake for Start<F>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<bool, E>> + Send + 'static,
    E: std::fmt::Display,
{
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let extend = self.extend.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(extend) = extend else { return };
        if self.lease.has_ended() {
            return;
        }
        let lease = Arc::clone(&self.lease);
        let (what, ttl) = (self.what, self.ttl);
        // A runtime shut down meanwhile drops the task: its holders are gone too.
        drop(self.runtime.spawn(async move {
            tokio::select! {
                biased;
                () = lease.ended() => {}
                lost = renew_until_lost(what, ttl, &lease, extend) => lease.lose(lost),
            }
        }));
    }
}

/// Calls `extend` every third of `ttl`, and returns only when the lease can no longer be counted
/// on.
///
/// A failed extension is retried until the TTL would have run out, then the lease counts as
/// lost: the work must not go on past a lease that may have expired.
async fn renew_until_lost<F, Fut, E>(what: &str, ttl: Duration, lease: &Lease, mut extend: F) -> LossReason
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let period = ttl / 3;
    let retry_gap = (ttl / 10).max(Duration::from_millis(1));
    let mut valid_until = lease.valid_until();
    let mut next = valid_until - ttl + period;
    loop {
        sleep_until(next).await;
        let sent = Instant::now();
        match timeout_at(valid_until, extend()).await {
            Ok(Ok(true)) => {
                tracing::trace!(what, "renewed");
                valid_until = sent + ttl;
                lease.confirmed_until(valid_until);
                next = sent + period;
            }
            Ok(Ok(false)) => {
                tracing::warn!(what, "lost: another holder has it or it was deleted");
                return LossReason::Gone;
            }
            Ok(Err(error)) => {
                tracing::warn!(what, %error, "renewal failed; retrying until the TTL runs out");
                next = (Instant::now() + retry_gap).min(valid_until);
            }
            Err(_deadline) => {
                tracing::warn!(what, "lost: no renewal confirmed before the TTL ran out");
                return LossReason::Unconfirmed;
            }
        }
    }
}
