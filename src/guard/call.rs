//! The one call path of every guard whose key a request can meet taken (a lock held, a
//! throttle over its rate): take the key, or meet it taken and ask the strategy; wait as it
//! says and try again, or stop trying (refused, superseded, the line full, deferred); run the
//! request under the key. Written once, as the states of one call; each guard supplies what
//! differs ([`Contended`]): how it takes its key and what its conflict says, how it waits, what
//! stopping leaves behind, how it runs the request and gives the key back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower::Service;
use tracing::Instrument;

use super::{Conflict, ConflictKind, ConflictStrategy, Decision, Error, Nesting, Outcome, out_of_slot};
use super::{Guard, GuardedResult};
use crate::error::{KeyError, StoreError};
use crate::key::LockKey;
use crate::sealed::SealedGuard;

/// The result of a guarded call over `S` whose guard wraps it as `N` says.
pub type CallResult<S, Req, N> =
    Result<Outcome<<N as Nesting<S, Req>>::Response>, Error<<N as Nesting<S, Req>>::Error>>;

/// One attempt at the key.
pub enum Attempt<H> {
    /// The key is the call's, as `H` says (a lock's fence, say).
    Taken(H),
    /// A key is taken: which (one of the call's keys, for a guard of several), what the
    /// guard's kind says about it, and when it may be free.
    Met {
        at: LockKey,
        kind: ConflictKind,
        retry_after: Option<Duration>,
    },
}

/// How a wait before the next attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// A key was handed to the call in its line (or may have been, unheard: the store began
    /// listening only then, or missed announcements): the next attempt is its turn, not a
    /// retry of its own, and counts no attempt against the strategy's bounds. (A set is handed its keys
    /// one at a time, as each holder lets go: a set in several lines would otherwise spend
    /// its attempts on its way to the front of them, as a single key's caller never does.)
    Turn,
    /// The wait ran its time (the fallback poll), or nothing told the call: the next attempt
    /// is a retry.
    Timer,
    /// The holding the call met ran out by its TTL (or a release found it gone), which hands
    /// the key to nobody, and this call is the one of its layer's waiters for the key to look:
    /// the next attempt takes the key, or hands it to the first in line as a release would,
    /// and counts no attempt.
    Look,
}

/// What a guard supplies to the call path ([`call_contended`]).
pub trait Contended<S: Service<Req>, Req>: Send + Sync + 'static {
    /// What the guard wraps: a handler, or another guard's service.
    type Over: Nesting<S, Req>;
    /// What a call is for: one key, or a set of keys taken together.
    type Key: Send + Sync + 'static;
    /// What decides about a conflict.
    type Strategy: ConflictStrategy<Req>;
    /// What one call keeps from attempt to attempt: its place in line or its booking, and the
    /// release of a key it may hold on every exit path.
    type Attempts: Send;
    /// What a call that took the key holds.
    type Holding: Send;

    /// The key of `request`: `None` passes it unguarded, an error refuses it before any store
    /// call.
    fn key(&self, request: &Req) -> Result<Option<Self::Key>, KeyError>;

    /// The guard's strategy.
    fn strategy(&self) -> &Self::Strategy;

    /// What a call for `key` that met `met` taken waits for, as one key
    /// ([`Conflict::waits_for`]): the key it met, unless the guard's key is more (a set).
    fn waits_for(&self, key: &Self::Key, met: &LockKey) -> LockKey {
        let _ = key;
        met.clone()
    }

    /// The span of one call on `key`.
    fn span(&self, key: &Self::Key) -> tracing::Span;

    /// Counts a conflict that ended in `decision` (`retry`, `reject`, ...).
    fn count_conflict(&self, decision: &'static str);

    /// Starts a call on `key`, or refuses it before any attempt (a closed key).
    fn start<E>(&self, key: &Self::Key) -> Result<Self::Attempts, Error<E>>;

    /// One attempt at `key`.
    fn attempt(
        &self,
        key: &Self::Key,
        attempts: &mut Self::Attempts,
    ) -> impl Future<Output = Result<Attempt<Self::Holding>, StoreError>> + Send;

    /// Waits (the strategy said [`Decision::RetryAfter`] `delay`) before the next attempt:
    /// at most `delay`, less when a key is handed to the call.
    fn wait(
        &self,
        key: &Self::Key,
        attempts: &mut Self::Attempts,
        delay: Duration,
    ) -> impl Future<Output = Result<Woken, StoreError>> + Send;

    /// The call stops trying: because of `decision`, or (`None`) because the strategy failed.
    /// What the call leaves behind is the guard's to settle (a place in line is left, or kept
    /// for the job that now waits in it).
    fn stop_trying(
        &self,
        key: &Self::Key,
        attempts: &mut Self::Attempts,
        decision: Option<&Decision>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The error of a call the strategy refused on the key it `met` taken, with the strategy's
    /// hint, else the conflict's.
    fn refused<E>(&self, met: LockKey, attempts: &Self::Attempts, retry_after: Option<Duration>) -> Error<E>;

    /// Runs `request` by `inner` under the key the call took, and gives the key back.
    fn run(
        &self,
        key: Self::Key,
        attempts: Self::Attempts,
        holding: Self::Holding,
        inner: S,
        request: Req,
    ) -> impl Future<Output = CallResult<S, Req, Self::Over>> + Send;
}

/// Marks the guards whose calls take this path: each is its service's [`Guard`] by it. (A
/// bound of its own, not `Contended`'s: no other crate can implement it for the crate's other
/// guards, which is how their own `Guard` impls stay apart from this one.)
pub trait TakesContendedPath: SealedGuard {}

/// Every guard a request can meet taken is its service's guard by this call path.
impl<S, Req, G> Guard<S, Req> for G
where
    G: Contended<S, Req> + TakesContendedPath,
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
{
    type Over = G::Over;
    type Key = G::Key;

    fn key(&self, request: &Req) -> Result<Option<G::Key>, KeyError> {
        Contended::key(self, request)
    }

    fn call(
        self: Arc<Self>,
        key: G::Key,
        inner: S,
        request: Req,
    ) -> impl Future<Output = GuardedResult<S, Req, Self>> + Send + 'static {
        call_contended(self, key, inner, request)
    }
}

/// Where one call is.
enum State<H> {
    /// About to try the key.
    Attempt,
    /// The key is the call's: the request runs.
    Run(H),
    /// The key was taken: the strategy decides.
    Conflict(Conflict),
    /// The strategy decided on the conflict met at key `met`; `retry_after` is the conflict's
    /// estimate.
    Decided {
        met: LockKey,
        decision: Decision,
        retry_after: Option<Duration>,
    },
}

/// The whole guarded call of `request` on `key`. The request is owned here and only lent to the
/// strategy for the synchronous part of its decision, so requests need not be `Sync`.
pub(crate) async fn call_contended<G, S, Req>(
    guard: Arc<G>,
    key: G::Key,
    inner: S,
    request: Req,
) -> CallResult<S, Req, G::Over>
where
    G: Contended<S, Req>,
    S: Service<Req>,
{
    let span = guard.span(&key);
    async move {
        let mut attempts = guard.start(&key)?;
        let started = Instant::now();
        let mut attempt = 0;
        let mut state = State::Attempt;
        loop {
            state = match state {
                State::Attempt => match guard.attempt(&key, &mut attempts).await {
                    Ok(Attempt::Taken(holding)) => State::Run(holding),
                    Ok(Attempt::Met {
                        at,
                        kind,
                        retry_after,
                    }) => {
                        let waits_for = guard.waits_for(&key, &at);
                        let elapsed = started.elapsed();
                        State::Conflict(Conflict::new(at, waits_for, attempt, elapsed, retry_after, kind))
                    }
                    // Not knowing whether the attempt took effect, the call's release stays
                    // armed and runs on its way out.
                    Err(error) => return Err(Error::Store(error)),
                },
                State::Run(holding) => {
                    tracing::debug!(attempt, "key taken by this call");
                    return guard.run(key, attempts, holding, inner, request).await;
                }
                State::Conflict(conflict) => {
                    let (met, retry_after) = (conflict.key.clone(), conflict.retry_after);
                    match guard.strategy().on_conflict(conflict, &request).await {
                        Ok(decision) => State::Decided {
                            met,
                            decision,
                            retry_after,
                        },
                        Err(error) => {
                            guard
                                .stop_trying(&key, &mut attempts, None)
                                .await
                                .map_err(Error::Store)?;
                            return Err(Error::Strategy(error));
                        }
                    }
                }
                State::Decided {
                    met,
                    decision,
                    retry_after,
                } => {
                    tracing::debug!(attempt, ?decision, "key taken");
                    guard.count_conflict(label(&decision));
                    if !matches!(decision, Decision::RetryAfter(_)) {
                        guard
                            .stop_trying(&key, &mut attempts, Some(&decision))
                            .await
                            .map_err(Error::Store)?;
                    }
                    match decision {
                        Decision::RetryAfter(delay) => {
                            // A job with a place to wait in gives its scheduler slot back
                            // meanwhile (`job_slot.rs`); its scheduler stopping ends the wait
                            // as its timer would.
                            let woken = match out_of_slot(guard.wait(&key, &mut attempts, delay)).await {
                                Some(woken) => woken.map_err(Error::Store)?,
                                None => Woken::Timer,
                            };
                            if woken == Woken::Timer {
                                attempt += 1;
                            }
                            State::Attempt
                        }
                        Decision::Reject { retry_after: hint }
                        | Decision::BackToQueue { retry_after: hint } => {
                            return Err(guard.refused(met, &attempts, hint.or(retry_after)));
                        }
                        Decision::Superseded { by } => return Err(Error::Superseded { key: met, by }),
                        Decision::LineFull {
                            waiting,
                            retry_after: hint,
                        } => {
                            return Err(Error::LineFull {
                                key: met,
                                waiting,
                                retry_after: hint.or(retry_after),
                            });
                        }
                        Decision::Deferred(deferred) => return Ok(Outcome::Deferred(deferred)),
                    }
                }
            };
        }
    }
    .instrument(span)
    .await
}

/// The metric label of a decision.
fn label(decision: &Decision) -> &'static str {
    match decision {
        Decision::RetryAfter(_) => "retry",
        Decision::Reject { .. } => "reject",
        Decision::BackToQueue { .. } => "back_to_queue",
        Decision::Superseded { .. } => "superseded",
        Decision::LineFull { .. } => "line_full",
        Decision::Deferred(_) => "defer",
    }
}
