//! The locked call, the algorithm of the middleware: acquire (asking the strategy on
//! conflict), run the handler with the lock renewed, release.

use std::panic::{AssertUnwindSafe, resume_unwind};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use rand::RngExt;
use tokio::time::{Instant, sleep};
use tower::Service;
use tracing::Instrument;

use super::LockLayer;
use super::holds::DEFAULT_TYPICAL_HOLD;
use crate::guard::current_job;
use crate::guard::{Error, Outcome};
use crate::key::LockKey;
use crate::lock::{
    Acquisition, Handoffs, HeldLock, LockStore, LockToken, ReleaseOnDrop, StopListener, Waiter, run_holding,
};
use crate::metric_names;
use crate::renewal::{Renewal, while_valid};
use crate::strategy::{Conflict, ConflictKind, ConflictStrategy, Decision, HeldConflict};

/// The whole locked call. The lock is released on success, inner error and panic before the
/// caller sees the result; on cancellation by [`ReleaseOnDrop`].
pub(super) async fn call_locked<S, St, X, Strat, Req>(
    shared: Arc<LockLayer<St, X, Strat>>,
    key: LockKey,
    mut inner: S,
    request: Req,
) -> Result<Outcome<S::Response>, Error<S::Error>>
where
    S: Service<Req>,
    St: LockStore,
    Strat: ConflictStrategy<Req>,
{
    let span = tracing::debug_span!("redefer.lock", %key, fence = tracing::field::Empty);
    async move {
        // Its own answer: nobody holds a closed key, there is no wait to estimate, and a
        // deferral would only wait for whoever opens it.
        if shared.store.is_closed(&key) {
            return Err(Error::Closed { key });
        }
        let token = LockToken::random();
        let mut guard = ReleaseOnDrop::new(shared.store.clone(), key.clone(), token);
        // A re-injected job meets the lock as its own waiter: the key may be reserved for it.
        let job_waiter = current_job().map(|job| Waiter::job(&job.shard, &job.id));
        // Who this call is, in the key's line and to its holders; built only when needed (a
        // conflict, a superseding strategy): an uncontended call allocates nothing for it.
        let caller = || job_waiter.clone().unwrap_or_else(|| Waiter::caller(token));
        let mut line = PlaceInLine::default();
        let mut attempt = 0;
        let started = Instant::now();
        let (fence, acquired_at) = loop {
            let sent = Instant::now();
            guard.arm();
            let me = line.place.as_ref().or(job_waiter.as_ref());
            let acquisition = shared
                .store
                .acquire(
                    &key,
                    token,
                    shared.ttl,
                    shared.store.holders(&key),
                    me,
                    shared.fencing,
                )
                .await;
            let (remaining, ahead, typical_hold, reserved) = match acquisition {
                Ok(Acquisition::Acquired(fence)) => {
                    guard.holding();
                    break (fence, sent);
                }
                Ok(Acquisition::Held {
                    remaining,
                    ahead,
                    typical_hold,
                    reserved,
                }) => (remaining, ahead, typical_hold, reserved),
                Err(error) => {
                    // Not knowing whether the acquire took effect, the guard stays armed and
                    // releases by token on its way out (and leaves the line).
                    return Err(Error::Store(error));
                }
            };
            guard.disarm();
            ::metrics::gauge!(metric_names::LOCK_WAITERS).set(ahead as f64);
            let conflict = Conflict::new(
                key.clone(),
                attempt,
                started.elapsed(),
                estimate_wait(
                    remaining,
                    ahead,
                    typical_hold.or_else(|| shared.holds.typical()),
                    shared.ttl,
                ),
                ConflictKind::Held(HeldConflict {
                    remaining,
                    reserved,
                    ahead,
                    line: crate::lock::line_of(
                        shared.store.clone(),
                        key.clone(),
                        line.place.clone(),
                        caller(),
                    ),
                }),
            );
            let retry_after = conflict.retry_after;
            let decision = match shared.strategy.on_conflict(conflict, &request).await {
                Ok(decision) => decision,
                Err(error) => {
                    line.leave(&shared.store, &key, &mut guard).await;
                    return Err(Error::Strategy(error));
                }
            };
            match decision {
                Decision::RetryAfter(delay) => {
                    tracing::debug!(attempt, ?remaining, ahead, ?delay, "lock held: waiting in line");
                    metric_names::conflict("retry");
                    if let Err(error) = line.join(&shared.store, &key, caller(), &mut guard).await {
                        return Err(Error::Store(error));
                    }
                    line.wait_turn(delay).await;
                    attempt += 1;
                }
                Decision::Reject { retry_after: hint } => {
                    tracing::debug!(attempt, ?hint, "lock held: rejected");
                    metric_names::conflict("reject");
                    match &job_waiter {
                        // A job waits in line: its scheduler puts it back to wait for its turn.
                        Some(me) => {
                            // A holder's TTL bounds its lock should it die; a reservation's
                            // runs out into the next handoff, not into a free key.
                            crate::guard::lock_met(remaining.filter(|_| !reserved));
                            if let Err(error) = shared.store.join(&key, me, line.place.as_ref()).await {
                                return Err(Error::Store(error));
                            }
                            guard.waiting_as(None);
                        }
                        None => line.leave(&shared.store, &key, &mut guard).await,
                    }
                    return Err(Error::Locked {
                        key,
                        retry_after: hint.or(retry_after),
                    });
                }
                Decision::Superseded { by } => {
                    tracing::debug!(attempt, job_id = %by, "lock held: a newer request waits");
                    metric_names::conflict("superseded");
                    line.leave(&shared.store, &key, &mut guard).await;
                    return Err(Error::Superseded { key, by });
                }
                Decision::LineFull {
                    waiting,
                    retry_after: hint,
                } => {
                    tracing::debug!(attempt, waiting, "lock held: its line is full");
                    metric_names::conflict("line_full");
                    line.leave(&shared.store, &key, &mut guard).await;
                    return Err(Error::LineFull {
                        key,
                        waiting,
                        retry_after: hint.or(retry_after),
                    });
                }
                Decision::Deferred(deferred) => {
                    tracing::debug!(attempt, job_id = %deferred.job_id, "lock held: deferred");
                    metric_names::conflict("defer");
                    match &deferred.queue {
                        // The strategy put it in line (in the caller's place, if it had one).
                        Some(_) if deferred.in_line => guard.waiting_as(None),
                        // The job takes the caller's place in line, or the end of it.
                        Some(queue) => {
                            let job = Waiter::job(queue, &deferred.job_id);
                            if let Err(error) = shared.store.join(&key, &job, line.place.as_ref()).await {
                                // Stored, but not in line: it runs at its fallback due time.
                                tracing::warn!(%error, "the deferred job could not join the line");
                                line.leave(&shared.store, &key, &mut guard).await;
                            }
                            guard.waiting_as(None);
                        }
                        None => line.leave(&shared.store, &key, &mut guard).await,
                    }
                    return Ok(Outcome::Deferred(deferred));
                }
            }
        };
        if let Some(fence) = fence {
            tracing::Span::current().record("fence", fence.0);
        }
        tracing::debug!(attempt, "lock acquired");
        ::metrics::counter!(metric_names::LOCK_ACQUIRED).increment(1);

        // Under a strategy that supersedes, holders hear newer requests that want the key.
        let stop = shared
            .strategy
            .supersedes()
            .then(|| StopListener::start(&shared.store, &key, caller()));
        let held = HeldLock::new(
            key.clone(),
            fence,
            stop.as_ref().map(StopListener::signal).unwrap_or_default(),
        );
        let renewal = Renewal::start("lock", shared.ttl, acquired_at, {
            let (store, key, ttl) = (shared.store.clone(), key.clone(), shared.ttl);
            move || {
                let (store, key) = (store.clone(), key.clone());
                async move { store.extend_holding(&key, token, ttl, store.holders(&key)).await }
            }
        });
        let lease = renewal.lease();
        let handler = while_valid(
            &lease,
            run_holding(
                held,
                AssertUnwindSafe(async move { inner.call(request).await }).catch_unwind(),
            ),
        );
        let ended = tokio::select! {
            // The renewal first, and the handler polled only while the lock is surely ours: a
            // process resumed after a pause longer than the TTL stops its handler before it
            // takes another step.
            biased;
            lost = renewal => Err(lost),
            finished = handler => finished,
        };
        // A handler that blocked its thread returns in the poll that blocked: if the renewal
        // gave up meanwhile, its work overlapped a lock that was no longer ours.
        let ended = match ended {
            Ok(Ok(response)) => lease.lost().map_or(Ok(Ok(response)), Err),
            other => other,
        };
        let finished = match ended {
            Ok(finished) => finished,
            Err(lost) => {
                ::metrics::counter!(metric_names::LOCK_LOST).increment(1);
                // The handler's future is dropped: it stops here. The guard, still armed,
                // releases by token in the background, in case the store comes back while the
                // lock still holds our token; the caller does not wait for that.
                return Err(Error::LockLost { key, reason: lost });
            }
        };
        crate::guard::handler_returned();
        let held = acquired_at.elapsed();
        ::metrics::histogram!(metric_names::LOCK_HOLD).record(held.as_secs_f64());
        shared.holds.record(held);
        // One release in `HOLD_SAMPLING` reports its hold: the key's last hold, for the
        // `retry_after` of callers that meet it, at a fraction of the cost of a write per release.
        let held_for = rand::rng().random_ratio(1, HOLD_SAMPLING).then_some(held);
        guard.release_after(held_for);
        match finished {
            Ok(Ok(response)) => Ok(Outcome::Done(response)),
            Ok(Err(error)) => Err(Error::Inner(error)),
            Err(panic) => resume_unwind(panic),
        }
    }
    .instrument(span)
    .await
}

/// One release in this many tells the store how long the lock was held.
const HOLD_SAMPLING: u32 = 8;

/// A call's place in its key's line while it waits in place (the `Retry` strategy).
#[derive(Default)]
struct PlaceInLine {
    place: Option<Waiter>,
    handoffs: Option<Handoffs>,
}

impl PlaceInLine {
    /// Joins the line as `me`, once: later retries keep the place.
    async fn join<St: LockStore>(
        &mut self,
        store: &St,
        key: &LockKey,
        me: Waiter,
        guard: &mut ReleaseOnDrop<St>,
    ) -> Result<(), crate::error::StoreError> {
        if self.place.is_some() {
            return Ok(());
        }
        // Listen before joining: the key may be handed to us as we join.
        self.handoffs = Some(store.line_handoffs(key, store.holders(key)));
        guard.waiting_as(Some(me.clone()));
        store.join(key, &me, None).await?;
        self.place = Some(me);
        Ok(())
    }

    /// Waits until the key is handed to us, or `delay` passes (the fallback poll).
    async fn wait_turn(&mut self, delay: Duration) {
        let (Some(me), Some(handoffs)) = (&self.place, &mut self.handoffs) else {
            sleep(delay).await;
            return;
        };
        let my_turn = async {
            loop {
                match handoffs.next().await {
                    Some(waiter) if waiter == *me => return,
                    Some(_) => continue,
                    None => return, // announcements missed: look again
                }
            }
        };
        tokio::select! {
            () = my_turn => {}
            () = sleep(delay) => {}
        }
    }

    /// Leaves the line, if in it: a caller that stops waiting must not hold up the others.
    async fn leave<St: LockStore>(&mut self, store: &St, key: &LockKey, guard: &mut ReleaseOnDrop<St>) {
        let Some(me) = self.place.take() else { return };
        guard.waiting_as(None);
        if let Err(error) = store.leave_line(key, &me, store.holders(key)).await {
            tracing::warn!(%key, %error, "cannot leave the line; the reservation for us will run out");
        }
    }
}

/// When the key may be free for a caller that meets it held: the holder's expected rest (its
/// remaining TTL, at most a typical hold), then a typical hold for each waiter ahead. The
/// typical hold is the key's (its last sampled hold), else the layer's (its average over every
/// key), else [`DEFAULT_TYPICAL_HOLD`]; each hold counts at most the TTL: renewal keeps a
/// lock, but that is what the TTL is sized for.
fn estimate_wait(
    remaining: Option<Duration>,
    ahead: u64,
    typical_hold: Option<Duration>,
    ttl: Duration,
) -> Option<Duration> {
    let per_holder = typical_hold.unwrap_or(DEFAULT_TYPICAL_HOLD).min(ttl);
    let current = match remaining {
        Some(remaining) => remaining.min(per_holder),
        None => per_holder,
    };
    let ahead = u32::try_from(ahead).unwrap_or(u32::MAX);
    Some(current.saturating_add(per_holder.saturating_mul(ahead)))
}

#[cfg(test)]
mod tests {
    use super::estimate_wait;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_wait_grows_with_the_line_and_the_typical_hold() {
        let ttl = 10_000 * MS;
        // No history anywhere: the default typical hold, for the holder and each waiter.
        assert_eq!(estimate_wait(Some(4_000 * MS), 0, None, ttl), Some(100 * MS));
        assert_eq!(estimate_wait(Some(4_000 * MS), 2, None, ttl), Some(300 * MS));
        assert_eq!(estimate_wait(Some(40 * MS), 2, None, ttl), Some(240 * MS));
        // A renewed lock shows a full TTL; its typical hold says better.
        assert_eq!(
            estimate_wait(Some(9_900 * MS), 3, Some(1_500 * MS), ttl),
            Some(6_000 * MS)
        );
        assert_eq!(estimate_wait(None, 1, Some(50_000 * MS), ttl), Some(20_000 * MS));
    }
}
