//! The lock's part of the one call path (`guard/call.rs`): an attempt acquires the key (in the
//! caller's place in line, if it has one), a conflict says who holds it and who waits; waiting
//! is in line, told of the handoff; the request runs with the lock renewed, and the lock is
//! released on every exit path.

use std::panic::resume_unwind;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::holds::DEFAULT_TYPICAL_HOLD;
use super::{ExpiryWatches, LISTEN_WITHIN, LockLayer, Watching, wait_for_turn};
use crate::error::{KeyError, StoreError};
use crate::guard::{Attempt, CallResult, Contended, Woken};
use crate::guard::{ConflictKind, Error, HeldConflict, OverHandler};
use crate::guard::{KeyExtractor, SendHandler, Waiter, guarded_key};
use crate::key::LockKey;
use crate::lock::{
    Acquisition, Caller, FencingToken, Handoffs, HeldLock, Holders, LockSpace, LockStore, ReleaseOnDrop,
    StopListener, held_by_caller, hold_ended, run_renewed,
};
use crate::metric_names;
use crate::renewal::{Lease, Renewal};
use crate::strategy::{ConflictStrategy, Decision};

/// What one locked call keeps from attempt to attempt.
pub struct LockAttempts<St: LockStore> {
    /// Where the key is held: this layer's store, as a mutex or as permits.
    space: LockSpace,
    caller: Caller,
    /// Releases the key (and leaves the line) on every exit path, cancellation included. It
    /// keeps the store as this call holds its key: the layer's, or its writers' side (a
    /// read-write lock's write), which every step of the call uses.
    release: ReleaseOnDrop<St>,
    line: PlaceInLine,
}

impl<St: LockStore> LockAttempts<St> {
    /// The store as this call holds its key.
    fn store(&self) -> &St {
        self.release.store()
    }
}

/// The key acquired: its fencing token, and when the acquire was sent (the lease runs from
/// there).
pub struct Acquired {
    fence: Option<FencingToken>,
    at: Instant,
}

impl<S, Req, St, X, Strat> Contended<S, Req> for LockLayer<St, X, Strat>
where
    S: SendHandler<Req>,
    Req: Send + 'static,
    St: LockStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
{
    type Over = OverHandler;
    type Key = LockKey;
    type Strategy = Strat;
    type Attempts = LockAttempts<St>;
    type Holding = Acquired;

    fn key(&self, request: &Req) -> Result<Option<LockKey>, KeyError> {
        guarded_key(&self.extractor, request)
    }

    fn strategy(&self) -> &Strat {
        &self.strategy
    }

    fn span(&self, key: &LockKey) -> tracing::Span {
        tracing::debug_span!("redefer.lock", %key, fence = tracing::field::Empty)
    }

    fn count_conflict(&self, decision: &'static str) {
        metric_names::conflict(decision);
    }

    fn start<E>(&self, key: &LockKey) -> Result<LockAttempts<St>, Error<E>> {
        self.start_holding(key, self.store.clone())
    }

    async fn attempt(
        &self,
        key: &LockKey,
        attempts: &mut LockAttempts<St>,
    ) -> Result<Attempt<Acquired>, StoreError> {
        let sent = Instant::now();
        attempts.release.arm();
        let me = attempts.line.place.as_ref().or(attempts.caller.job.as_ref());
        let holders = attempts.store().holders(key);
        // An error leaves the release armed: not knowing whether the acquire took effect, it
        // releases by token on its way out (and leaves the line).
        let acquisition = attempts
            .store()
            .acquire(key, attempts.caller.token, self.ttl, holders, me, self.fencing)
            .await?;
        let (remaining, ahead, typical_hold, reserved) = match acquisition {
            Acquisition::Acquired(fence) => {
                attempts.release.holding();
                // Out of the line: the key's watch is for those still in it.
                attempts.line.watch = None;
                return Ok(Attempt::Taken(Acquired { fence, at: sent }));
            }
            Acquisition::Held {
                remaining,
                ahead,
                typical_hold,
                reserved,
            } => (remaining, ahead, typical_hold, reserved),
        };
        attempts.release.disarm();
        attempts.caller.met(remaining, reserved, ahead);
        ::metrics::gauge!(metric_names::LOCK_WAITERS).set(ahead as f64);
        let typical_hold = typical_hold.or_else(|| self.holds.typical());
        let line = super::line_of(
            attempts.store().clone(),
            key.clone(),
            attempts.line.place.clone(),
            attempts.caller.waiter(),
        );
        Ok(Attempt::Met {
            at: key.clone(),
            retry_after: estimate_wait(remaining, ahead, typical_hold, self.ttl),
            kind: ConflictKind::Held(HeldConflict {
                remaining,
                reserved,
                ahead,
                line,
            }),
        })
    }

    async fn wait(
        &self,
        key: &LockKey,
        attempts: &mut LockAttempts<St>,
        delay: Duration,
    ) -> Result<Woken, StoreError> {
        let me = attempts.caller.waiter();
        attempts.line.join(key, me, &mut attempts.release).await?;
        attempts.line.watch_for_expiry(
            &self.expiries,
            attempts.release.store(),
            key,
            attempts.space.permits,
            attempts.caller.holder_runs_out_at(),
        );
        Ok(attempts.line.wait_turn(delay).await)
    }

    async fn stop_trying(
        &self,
        key: &LockKey,
        attempts: &mut LockAttempts<St>,
        decision: Option<&Decision>,
    ) -> Result<(), StoreError> {
        let LockAttempts {
            release,
            caller,
            line,
            ..
        } = attempts;
        match (decision, &caller.job) {
            // A job waits in line: its scheduler puts it back to wait for its turn.
            (Some(Decision::Reject { .. } | Decision::BackToQueue { .. }), Some(me)) => {
                caller.tell_job_of_holder();
                let store = release.store();
                store
                    .join_line(key, me, line.place.as_ref(), store.holders(key), None)
                    .await?;
                release.waiting_as(None);
            }
            (Some(Decision::Deferred(deferred)), _) => match &deferred.queue {
                // The strategy put it in line (in the caller's place, if it had one).
                Some(_) if deferred.in_line => release.waiting_as(None),
                // The job takes the caller's place in line, or the end of it.
                Some(queue) => {
                    let job = Waiter::job(queue, &deferred.job_id);
                    let store = release.store();
                    let joined = store.join_line(key, &job, line.place.as_ref(), store.holders(key), None);
                    if let Err(error) = joined.await {
                        // Stored, but not in line: it runs at its fallback due time.
                        tracing::warn!(%error, "the deferred job could not join the line");
                        line.leave(key, release).await;
                    }
                    release.waiting_as(None);
                }
                None => line.leave(key, release).await,
            },
            // A caller that stops waiting must not hold up the others.
            _ => line.leave(key, release).await,
        }
        Ok(())
    }

    fn refused<E>(&self, key: LockKey, _: &LockAttempts<St>, retry_after: Option<Duration>) -> Error<E> {
        Error::Locked { key, retry_after }
    }

    async fn run(
        &self,
        key: LockKey,
        mut attempts: LockAttempts<St>,
        acquired: Acquired,
        inner: S,
        request: Req,
    ) -> CallResult<S, Req, OverHandler> {
        let Acquired {
            fence,
            at: acquired_at,
        } = acquired;
        if let Some(fence) = fence {
            tracing::Span::current().record("fence", fence.0);
        }
        ::metrics::counter!(metric_names::LOCK_ACQUIRED).increment(1);

        // Under a strategy that supersedes, holders hear newer requests that want the key.
        let stop = self
            .strategy
            .supersedes()
            .then(|| StopListener::start(attempts.store(), &key, attempts.caller.waiter()));
        let token = attempts.caller.token;
        let renewal = Renewal::start("lock", self.ttl, acquired_at, {
            let (store, key, ttl) = (attempts.store().clone(), key.clone(), self.ttl);
            move || {
                let (store, key) = (store.clone(), key.clone());
                async move { store.extend_holding(&key, token, ttl, store.holders(&key)).await }
            }
        });
        let holding = |lease: &Arc<Lease>| {
            let stop = stop.as_ref().map(StopListener::signal).unwrap_or_default();
            vec![HeldLock::new(
                key.clone(),
                fence,
                stop,
                attempts.space,
                Arc::clone(lease),
            )]
        };
        let finished = match run_renewed(renewal, holding, inner, request).await {
            Ok(finished) => finished,
            Err(lost) => {
                ::metrics::counter!(metric_names::LOCK_LOST).increment(1);
                // Ours no longer, and released by nobody: whoever waits for it here looks.
                self.expiries.look_now(&key, attempts.space.permits);
                // The handler's future is dropped: it stops here. The release, still armed,
                // releases by token in the background, in case the store comes back while the
                // lock still holds our token; the caller does not wait for that.
                return Err(Error::LockLost { key, reason: lost });
            }
        };
        let held_for = hold_ended(&self.holds, acquired_at);
        if !attempts.release.release(held_for).await {
            // Nobody was handed the key: whoever waits for it here looks.
            self.expiries.look_now(&key, attempts.space.permits);
        }
        match finished {
            Ok(result) => result,
            Err(panic) => resume_unwind(panic),
        }
    }
}

impl<St: LockStore, X, Strat> LockLayer<St, X, Strat> {
    /// Starts a call that holds `key` as `store` says (the layer's store, or a read-write
    /// lock's writer side of it), or refuses it before any attempt (a closed key, a key its
    /// caller holds).
    pub(crate) fn start_holding<E>(&self, key: &LockKey, store: St) -> Result<LockAttempts<St>, Error<E>> {
        // Its own answer: nobody holds a closed key, there is no wait to estimate, and a
        // deferral would only wait for whoever opens it.
        if store.is_closed(key) {
            return Err(Error::Closed { key: key.clone() });
        }
        let space = LockSpace {
            store: store.instance(),
            permits: store.holders(key) != Holders::One,
        };
        // A call under its own caller's holding would wait for itself.
        if held_by_caller(space, key) {
            return Err(Error::HeldByCaller { key: key.clone() });
        }
        let caller = Caller::new();
        Ok(LockAttempts {
            release: ReleaseOnDrop::new(store, key.clone(), caller.token, self.ttl),
            space,
            caller,
            line: PlaceInLine::default(),
        })
    }
}

/// A call's place in its key's line while it waits in place (the `Retry` strategy).
#[derive(Default)]
struct PlaceInLine {
    place: Option<Waiter>,
    handoffs: Option<Handoffs>,
    /// The call's part in its key's watch, while it waits in place.
    watch: Option<Watching>,
}

impl PlaceInLine {
    /// Joins the line as `me`, once: later retries keep the place.
    async fn join<St: LockStore>(
        &mut self,
        key: &LockKey,
        me: Waiter,
        guard: &mut ReleaseOnDrop<St>,
    ) -> Result<(), StoreError> {
        if self.place.is_some() {
            return Ok(());
        }
        // Listen before joining: the key may be handed to us as we join.
        let store = guard.store();
        let mut handoffs = store.line_handoffs(key, store.holders(key));
        handoffs.listening(LISTEN_WITHIN).await;
        self.handoffs = Some(handoffs);
        guard.waiting_as(Some(me.clone()));
        let store = guard.store();
        store.join_line(key, &me, None, store.holders(key), None).await?;
        self.place = Some(me);
        Ok(())
    }

    /// Watches `key` (held as permits, if `permits`) in `watches` while the call waits in
    /// place, telling the watch when the holder the call met runs out (`runs_out_at`).
    fn watch_for_expiry<St: LockStore>(
        &mut self,
        watches: &Arc<ExpiryWatches>,
        store: &St,
        key: &LockKey,
        permits: bool,
        runs_out_at: Option<Instant>,
    ) {
        let reservation = store.reservation();
        let watch = self
            .watch
            .get_or_insert_with(|| watches.watch(key, permits, reservation));
        if let Some(at) = runs_out_at {
            watch.runs_out_at(at);
        }
    }

    /// Waits until the key is handed to us, or it is our turn to look at it (its holder ran
    /// out), or `delay` passes (the fallback poll).
    async fn wait_turn(&mut self, delay: Duration) -> Woken {
        wait_for_turn(
            self.handoffs.as_mut_slice(),
            self.place.as_ref(),
            self.watch.as_ref(),
            delay,
        )
        .await
    }

    /// Leaves the line, if in it: a caller that stops waiting must not hold up the others.
    async fn leave<St: LockStore>(&mut self, key: &LockKey, guard: &mut ReleaseOnDrop<St>) {
        self.watch = None;
        let Some(me) = self.place.take() else { return };
        guard.waiting_as(None);
        let store = guard.store();
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
pub(crate) fn estimate_wait(
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
