//! The throttle's part of the one call path (`guard/call.rs`): an attempt decides the request
//! against its key's rate (a booked slot is redeemed), a conflict says when the next slot
//! opens; waiting as long as the slot takes books it; the request then runs, and nothing is
//! given back (a slot is spent once taken).

use std::time::Duration;

use tokio::time::sleep;
use tower::Service;

use super::{Admission, ThrottleLayer, ThrottleScope, ThrottleStore};
use crate::error::{KeyError, StoreError};
use crate::guard::{Attempt, CallResult, Contended, Woken, admitted_at_rate, current_job_waiter};
use crate::guard::{ConflictKind, Error, Nesting, NextSlot, ThrottledConflict, Waiter};
use crate::guard::{KeyExtractor, guarded_key};
use crate::key::LockKey;
use crate::lock::LockToken;
use crate::strategy::{ConflictStrategy, Decision};

/// What one throttled call keeps from attempt to attempt.
pub struct ThrottleAttempts {
    /// The booked slot the call holds, as whom: a re-injected job may hold one.
    booked_as: Option<Waiter>,
    /// The last conflict's next slot.
    next_slot: Option<NextSlot>,
}

impl ThrottleAttempts {
    /// When the last conflict's next slot opens.
    fn opens_in(&self) -> Duration {
        self.next_slot
            .as_ref()
            .map(NextSlot::opens_in)
            .unwrap_or_default()
    }
}

impl<S, Req, St, X, Strat, N> Contended<S, Req> for ThrottleLayer<St, X, Strat, N>
where
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
    St: ThrottleStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
    N: Nesting<S, Req>,
{
    type Over = N;
    type Key = LockKey;
    type Strategy = Strat;
    type Attempts = ThrottleAttempts;
    type Holding = ();

    fn key(&self, request: &Req) -> Result<Option<LockKey>, KeyError> {
        guarded_key(&self.extractor, request)
    }

    fn strategy(&self) -> &Strat {
        &self.strategy
    }

    fn span(&self, key: &LockKey) -> tracing::Span {
        tracing::debug_span!("redefer.throttle", %key)
    }

    fn count_conflict(&self, decision: &'static str) {
        metrics::counter!("redefer_throttle_conflicts_total", "decision" => decision).increment(1);
    }

    fn start<E>(&self, _: &LockKey) -> Result<ThrottleAttempts, Error<E>> {
        Ok(ThrottleAttempts {
            // A re-injected job may hold a booked slot: the throttle admits it there.
            booked_as: current_job_waiter(),
            next_slot: None,
        })
    }

    async fn attempt(
        &self,
        key: &LockKey,
        attempts: &mut ThrottleAttempts,
    ) -> Result<Attempt<()>, StoreError> {
        let opens_in = match self
            .store
            .admit(key, self.rate, attempts.booked_as.as_ref())
            .await?
        {
            Admission::Admitted => {
                admitted_at_rate();
                return Ok(Attempt::Taken(()));
            }
            Admission::Redeemed { wait } => {
                // Its slot not yet come (due in whole milliseconds), or runs before it late.
                if !wait.is_zero() {
                    sleep(wait).await;
                }
                admitted_at_rate();
                return Ok(Attempt::Taken(()));
            }
            Admission::Throttled { opens_in } => opens_in,
        };
        let next_slot = super::book::next_slot(opens_in, self.store.clone(), key.clone(), self.rate);
        attempts.next_slot = Some(next_slot.clone());
        Ok(Attempt::Met {
            at: key.clone(),
            kind: ConflictKind::Throttled(ThrottledConflict { next_slot }),
            retry_after: Some(opens_in),
        })
    }

    async fn wait(
        &self,
        _: &LockKey,
        attempts: &mut ThrottleAttempts,
        delay: Duration,
    ) -> Result<Woken, StoreError> {
        match &attempts.next_slot {
            // Waiting as long as the slot takes: book it, so that nobody takes it meanwhile,
            // and come back as its holder when it opens.
            Some(next_slot) if delay >= next_slot.opens_in() => {
                let me = Waiter::caller(LockToken::random());
                let booking = next_slot.book_for(me.clone()).await?;
                tracing::debug!(wait = ?booking.wait, "over the rate: waiting for the booked slot");
                attempts.booked_as = Some(me);
                sleep(booking.wait).await;
            }
            _ => sleep(delay).await,
        }
        Ok(Woken::Timer)
    }

    async fn stop_trying(
        &self,
        _: &LockKey,
        _: &mut ThrottleAttempts,
        _: Option<&Decision>,
    ) -> Result<(), StoreError> {
        // A throttle keeps no place: its bookings are its order, and a booking is the job's.
        Ok(())
    }

    fn refused<E>(
        &self,
        key: LockKey,
        attempts: &ThrottleAttempts,
        retry_after: Option<Duration>,
    ) -> Error<E> {
        Error::Throttled {
            key,
            retry_after: retry_after.unwrap_or_else(|| attempts.opens_in()),
        }
    }

    async fn run(
        &self,
        key: LockKey,
        _: ThrottleAttempts,
        (): (),
        inner: S,
        request: Req,
    ) -> CallResult<S, Req, N> {
        // The handler may close this key, or another of this throttle (`close.rs`).
        let scope = ThrottleScope::new(key, self.store.clone(), self.rate);
        let result = scope.clone().run(N::call(inner, request)).await;
        match scope.reopening() {
            // It asked its request to wait for a reopening: a job goes back without an attempt.
            Some((key, retry_after)) => Err(Error::Throttled { key, retry_after }),
            None => result,
        }
    }
}
