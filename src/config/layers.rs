//! The layers a configuration builds: the stack's mutex, semaphore and throttle, and the named
//! guards, with their configured strategy.

use std::future::Future;

use futures_util::future::Either;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::BoxError;
use crate::lock::LockLayer;
use crate::lock::LockStore;
use crate::queue::QueueStore;
use crate::queue::{DelayQueue, Json};
use crate::semaphore::Permits;
use crate::strategy::{Conflict, ConflictStrategy, Decision, Defer, FailFast, Retry};
use crate::throttle::{ThrottleLayer, ThrottleStore};

use super::validate::missing;
use super::{Config, ConfigError, FallThrough, LockConfig, NamedGuard, StrategyConfig};
use crate::sealed::Sealed;
use crate::throttle::Rate;

impl Config {
    /// The guard `name` of `[guards]`, validated, whose kind is `kind`.
    fn guard<'c>(&'c self, name: &'c str, kind: GuardKind) -> Result<NamedGuard<'c>, ConfigError> {
        let named = self.guard_named(name)?;
        let found = match (named.guard.rate, named.guard.lock.permits) {
            (Some(_), _) => GuardKind::Throttle,
            (None, Some(_)) => GuardKind::Semaphore,
            (None, None) => GuardKind::Mutex,
        };
        if found != kind {
            return Err(missing(format!("guards.{name}"), found.built_by()));
        }
        Ok(named)
    }

    /// The mutex `name` of `[guards]` (neither `lock.permits` nor `rate` set), over `store`,
    /// deferring (if its strategy does) to `queue`, which must be the guard's `queue`.
    ///
    /// ```
    /// use redefer::{Config, MemoryStore};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = Config::from_toml_str(r#"
    ///     [queues.orders]
    ///
    ///     [guards.orders]
    ///     lock = { ttl = "30s" }
    ///     strategy = { then = "defer", retry = { max_attempts = 2 } }
    ///     queue = "orders"
    ///
    ///     [guards.exports]
    ///     lock = { permits = 4 }
    ///     queue = "orders"
    ///
    ///     [guards.refunds]
    ///     rate = { count = 10, per = "1s", burst = 5 }
    /// "#)?;
    /// let store = MemoryStore::new();
    /// let orders = config.queue_named::<u64, _>("orders", store.clone())?;
    /// let by_order = |order: &u64| Some(format!("order:{order}"));
    /// let mutex = config.lock_layer_named("orders", store.clone(), by_order, orders.clone())?;
    /// let semaphore = config.semaphore_layer_named("exports", store.clone(), by_order, orders.clone())?;
    /// let throttle = config.throttle_layer_named("refunds", store.clone(), by_order, orders.clone())?;
    /// // A guard built as what it is not says what builds it.
    /// assert!(config.lock_layer_named("refunds", store, by_order, orders).is_err());
    /// # let _ = (mutex, semaphore, throttle);
    /// # Ok(()) }
    /// ```
    pub fn lock_layer_named<St: LockStore, X, Req, Q>(
        &self,
        name: &str,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<LockLayer<St, X, ConfiguredStrategy<Req, Q>>, ConfigError> {
        let guard = self.guard(name, GuardKind::Mutex)?;
        self.mutex_of(&guard.guard.lock, store, extractor, guard.deferring_to(queue)?)
    }

    /// The semaphore `name` of `[guards]` (its `lock.permits` set); see
    /// [`lock_layer_named`](Config::lock_layer_named).
    pub fn semaphore_layer_named<St: LockStore, X, Req, Q>(
        &self,
        name: &str,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<ConfiguredSemaphore<St, X, Req, Q>, ConfigError> {
        let guard = self.guard(name, GuardKind::Semaphore)?;
        let permits = guard.permits().unwrap_or(1);
        Ok(self
            .mutex_of(&guard.guard.lock, store, extractor, guard.deferring_to(queue)?)?
            .permits(permits))
    }

    /// The throttle `name` of `[guards]` (its `rate` set); see
    /// [`lock_layer_named`](Config::lock_layer_named).
    pub fn throttle_layer_named<St: ThrottleStore, X, Req, Q>(
        &self,
        name: &str,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<ThrottleLayer<St, X, ConfiguredStrategy<Req, Q>>, ConfigError> {
        let guard = self.guard(name, GuardKind::Throttle)?;
        self.throttle_of(guard.rate()?, store, extractor, guard.deferring_to(queue)?)
    }

    /// The configured lock layer: `store` holds the locks (under the configured prefix),
    /// `queue` takes deferred requests. With `[lock] permits` set, this is an error: build with
    /// [`semaphore_layer`](Config::semaphore_layer).
    pub fn lock_layer<St: LockStore, X, Req, Q>(
        &self,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<LockLayer<St, X, ConfiguredStrategy<Req, Q>>, ConfigError> {
        if self.lock.permits.is_some() {
            return Err(ConfigError::OutOfRange {
                field: "lock.permits".to_string(),
                problem: "is set: a semaphore is built by Config::semaphore_layer, not lock_layer",
            });
        }
        self.validate()?;
        self.mutex_of(&self.lock, store, extractor, strategy_of(&self.strategy, queue))
    }

    /// The configured semaphore: the lock layer with `[lock] permits` holders per key.
    ///
    /// ```
    /// use redefer::{Config, MemoryStore};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config: Config = toml::from_str("[lock]\npermits = 4")?;
    /// let store = MemoryStore::new();
    /// let queue = config.queue::<u64, _>(store.clone())?;
    /// let layer = config.semaphore_layer(store, |tenant: &u64| Some(format!("tenant:{tenant}")), queue)?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn semaphore_layer<St: LockStore, X, Req, Q>(
        &self,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<ConfiguredSemaphore<St, X, Req, Q>, ConfigError> {
        let Some(permits) = self.lock.permits else {
            return Err(ConfigError::OutOfRange {
                field: "lock.permits".to_string(),
                problem: "is not set: a semaphore needs its number of holders per key",
            });
        };
        self.validate()?;
        Ok(self
            .mutex_of(&self.lock, store, extractor, strategy_of(&self.strategy, queue))?
            .permits(permits))
    }

    /// The configured throttle: each key admitted at `[throttle] rate`, over the rate the
    /// configured strategy (`Retry` books the next slot, `Defer` books it for the job).
    ///
    /// ```
    /// use redefer::{Config, MemoryStore};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config: Config = toml::from_str(r#"
    ///     [strategy]
    ///     then = "defer"
    ///
    ///     [throttle]
    ///     rate = { count = 10, per = "1s", burst = 5 }
    /// "#)?;
    /// let store = MemoryStore::new();
    /// let queue = config.queue::<u64, _>(store.clone())?;
    /// let layer = config.throttle_layer(store, |customer: &u64| Some(format!("customer:{customer}")), queue)?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn throttle_layer<St: ThrottleStore, X, Req, Q>(
        &self,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<ThrottleLayer<St, X, ConfiguredStrategy<Req, Q>>, ConfigError> {
        let Some(throttle) = self.throttle else {
            return Err(ConfigError::OutOfRange {
                field: "throttle".to_string(),
                problem: "is not set: a throttle needs its rate",
            });
        };
        self.validate()?;
        self.throttle_of(
            throttle.rate,
            store,
            extractor,
            strategy_of(&self.strategy, queue),
        )
    }

    /// A lock layer of `lock`'s settings and `strategy` over `store` (moved under the
    /// configured prefix): the stack's `[lock]` or a named guard's; a semaphore adds its permits.
    fn mutex_of<St: Sealed, X, S>(
        &self,
        lock: &LockConfig,
        store: St,
        extractor: X,
        strategy: S,
    ) -> Result<LockLayer<St, X, S>, ConfigError> {
        Ok(LockLayer::new(store.under_prefix(self.prefix()?), extractor)
            .ttl(lock.ttl)
            .fencing(lock.fencing)
            .on_conflict(strategy))
    }

    /// A throttle at `rate` with `strategy` over `store` (moved under the configured prefix).
    fn throttle_of<St: Sealed, X, S>(
        &self,
        rate: Rate,
        store: St,
        extractor: X,
        strategy: S,
    ) -> Result<ThrottleLayer<St, X, S>, ConfigError> {
        Ok(ThrottleLayer::new(store.under_prefix(self.prefix()?), extractor, rate).on_conflict(strategy))
    }
}

/// A configured strategy: retry within the limits, then fail fast or defer to `queue`.
pub(super) fn strategy_of<Req, Q>(
    strategy: &StrategyConfig,
    queue: DelayQueue<Req, Q>,
) -> ConfiguredStrategy<Req, Q> {
    let then = match strategy.then {
        FallThrough::FailFast => Fallback::FailFast,
        FallThrough::Defer => Fallback::Defer(match strategy.max_waiting {
            Some(cap) => Defer::new(queue).max_waiting(cap),
            None => Defer::new(queue),
        }),
    };
    Retry::from_limits(strategy.retry).then(then)
}

/// What a named guard is, by what its table sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GuardKind {
    Mutex,
    Semaphore,
    Throttle,
}

impl GuardKind {
    /// Which builder makes a guard of this kind, for the error of building it as another.
    fn built_by(self) -> &'static str {
        match self {
            GuardKind::Mutex => {
                "is a mutex (no lock.permits, no rate): build it with Config::lock_layer_named"
            }
            GuardKind::Semaphore => {
                "is a semaphore (lock.permits): build it with Config::semaphore_layer_named"
            }
            GuardKind::Throttle => "is a throttle (rate): build it with Config::throttle_layer_named",
        }
    }
}

/// The strategy a [`Config`] describes: retry within limits, then fail fast or defer.
pub type ConfiguredStrategy<Req, St> = Retry<Fallback<Req, St>>;

/// The semaphore a [`Config`] describes ([`Config::semaphore_layer`]): the lock layer over the
/// permits of `St`, with the configured strategy deferring to a queue in `Q`.
pub type ConfiguredSemaphore<St, X, Req, Q> = LockLayer<Permits<St, u32>, X, ConfiguredStrategy<Req, Q>>;

/// What a configured strategy falls through to.
// A layer holds one, built once: boxing its `Defer` would cost every deferral an indirection
// to save a few hundred bytes per layer.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Fallback<Req, St, Enc = Json> {
    /// Refuse.
    FailFast,
    /// Store in the queue.
    Defer(Defer<Req, St, Enc>),
}

impl<Req, St: Clone, Enc: Clone> Clone for Fallback<Req, St, Enc> {
    fn clone(&self) -> Self {
        match self {
            Fallback::FailFast => Fallback::FailFast,
            Fallback::Defer(defer) => Fallback::Defer(defer.clone()),
        }
    }
}

impl<Req, St> ConflictStrategy<Req> for Fallback<Req, St>
where
    Req: Serialize + DeserializeOwned + 'static,
    St: QueueStore,
{
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        match self {
            Fallback::FailFast => Either::Left(FailFast.on_conflict(conflict, request)),
            Fallback::Defer(defer) => Either::Right(defer.on_conflict(conflict, request)),
        }
    }
}
