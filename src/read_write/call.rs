//! The read-write lock's part of the call path: the lock's (`lock/call.rs`), on the key's
//! permits as a reader holds them, or as a writer does. Every step after the start is the
//! lock's own: the call's store, chosen at its start, holds the key as its access says.

use std::time::Duration;

use super::{Access, AccessExtractor, ReadWriteLayer};
use crate::LockLayer;
use crate::error::{KeyError, StoreError};
use crate::guard::{Attempt, CallResult, Contended, Error, OverHandler, SendHandler, Woken};
use crate::guard::{KeyExtractor, guarded_key};
use crate::key::LockKey;
use crate::lock::LockStore;
use crate::lock::{Acquired, LockAttempts};
use crate::lock_set::digest_name;
use crate::metric_names;
use crate::semaphore::Permits;
use crate::strategy::{ConflictStrategy, Decision};

/// A request's key and what it does to it: what a [`ReadWriteLayer`] guards a request by
/// (its [`Guard`](crate::guard::Guard) key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessedKey {
    pub(crate) key: LockKey,
    pub(crate) access: Access,
}

impl AccessedKey {
    /// The key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// What the request does to it.
    pub fn access(&self) -> Access {
        self.access
    }
}

impl<S, Req, St, X, A, Strat> Contended<S, Req> for ReadWriteLayer<St, X, A, Strat>
where
    LockLayer<Permits<St, u32>, X, Strat>: Contended<
            S,
            Req,
            Over = OverHandler,
            Key = LockKey,
            Strategy = Strat,
            Attempts = LockAttempts<Permits<St, u32>>,
            Holding = Acquired,
        >,
    S: SendHandler<Req>,
    Req: Send + 'static,
    St: LockStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    A: AccessExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
{
    type Over = OverHandler;
    type Key = AccessedKey;
    type Strategy = Strat;
    type Attempts = LockAttempts<Permits<St, u32>>;
    type Holding = Acquired;

    fn key(&self, request: &Req) -> Result<Option<AccessedKey>, KeyError> {
        let Some(key) = guarded_key(&self.lock.extractor, request)? else {
            return Ok(None);
        };
        Ok(Some(AccessedKey {
            key,
            access: self.access.access(request),
        }))
    }

    fn strategy(&self) -> &Strat {
        &self.lock.strategy
    }

    /// A read waits for its key, as the lock's call does; a write for a name of its own, so
    /// that a deferring strategy that keeps one waiting job per key
    /// ([`Coalesce`](crate::strategy::Coalesce)) keeps a waiting write and a waiting read
    /// apart: a read's request never takes the place of a write's, nor the reverse.
    fn waits_for(&self, key: &AccessedKey, met: &LockKey) -> LockKey {
        match key.access {
            Access::Read => met.clone(),
            Access::Write => digest_name(&format!("write\0{met}")),
        }
    }

    fn span(&self, key: &AccessedKey) -> tracing::Span {
        tracing::debug_span!(
            "redefer.read_write",
            key = %key.key,
            access = key.access.as_str(),
            fence = tracing::field::Empty
        )
    }

    fn count_conflict(&self, decision: &'static str) {
        metric_names::conflict(decision);
    }

    fn start<E>(&self, key: &AccessedKey) -> Result<Self::Attempts, Error<E>> {
        let store = match key.access {
            Access::Read => self.lock.store.clone(),
            Access::Write => self.lock.store.writers(),
        };
        self.lock.start_holding(&key.key, store)
    }

    async fn attempt(
        &self,
        key: &AccessedKey,
        attempts: &mut Self::Attempts,
    ) -> Result<Attempt<Acquired>, StoreError> {
        let attempt = Contended::<S, Req>::attempt(&self.lock, &key.key, attempts).await?;
        if let Attempt::Taken(_) = attempt {
            metrics::counter!("redefer_read_write_acquired_total", "access" => key.access.as_str())
                .increment(1);
        }
        Ok(attempt)
    }

    async fn wait(
        &self,
        key: &AccessedKey,
        attempts: &mut Self::Attempts,
        delay: Duration,
    ) -> Result<Woken, StoreError> {
        Contended::<S, Req>::wait(&self.lock, &key.key, attempts, delay).await
    }

    async fn stop_trying(
        &self,
        key: &AccessedKey,
        attempts: &mut Self::Attempts,
        decision: Option<&Decision>,
    ) -> Result<(), StoreError> {
        Contended::<S, Req>::stop_trying(&self.lock, &key.key, attempts, decision).await
    }

    fn refused<E>(&self, met: LockKey, attempts: &Self::Attempts, retry_after: Option<Duration>) -> Error<E> {
        Contended::<S, Req>::refused(&self.lock, met, attempts, retry_after)
    }

    async fn run(
        &self,
        key: AccessedKey,
        attempts: Self::Attempts,
        acquired: Acquired,
        inner: S,
        request: Req,
    ) -> CallResult<S, Req, OverHandler> {
        Contended::<S, Req>::run(&self.lock, key.key, attempts, acquired, inner, request).await
    }
}
