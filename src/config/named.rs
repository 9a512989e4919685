//! A guard of `[guards]` taken apart: its settings, its store under the configured prefix, and
//! its strategy, for any guard kind (a set of keys, readers beside writers, a throttle that
//! fails fast and so needs no queue), where the `*_layer_named` builders make the common
//! three whole.

use std::time::Duration;

use super::validate::missing;
use super::{Config, ConfigError, FallThrough, GuardConfig};
use crate::lock::Fencing;
use crate::queue::DelayQueue;
use crate::sealed::Sealed;
use crate::strategy::{FailFast, Retry};
use crate::throttle::Rate;

use super::layers::{ConfiguredStrategy, strategy_of};

/// A guard of `[guards]`, validated ([`Config::guard_named`]): what a layer of any kind is
/// built from.
///
/// A set of accounts deferred to a queue, and a crawler's throttle that fails fast (no queue):
///
/// ```
/// use redefer::{Config, MemoryStore};
/// use redefer::lock_set::LockSetLayer;
/// use redefer::throttle::ThrottleLayer;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = Config::from_toml_str(r#"
///     [queues.transfers]
///
///     [guards.transfers]
///     lock = { ttl = "30s" }
///     strategy = { then = "defer" }
///     queue = "transfers"
///
///     [guards.crawler]
///     rate = { count = 5, per = "1s" }
/// "#)?;
/// let store = MemoryStore::new();
/// let queue = config.queue_named::<Vec<String>, _>("transfers", store.clone())?;
///
/// let transfers = config.guard_named("transfers")?;
/// let sets = LockSetLayer::new(transfers.store(store.clone())?, |accounts: &Vec<String>| Some(accounts.clone()))
///     .ttl(transfers.ttl())
///     .fencing(transfers.fencing())
///     .on_conflict(transfers.deferring_to(queue)?);
///
/// let crawler = config.guard_named("crawler")?;
/// let fetches = ThrottleLayer::new(crawler.store(store)?, |domain: &String| Some(domain.clone()), crawler.rate()?)
///     .on_conflict(crawler.failing_fast()?);
/// # let _ = (sets, fetches);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NamedGuard<'c> {
    config: &'c Config,
    name: &'c str,
    pub(super) guard: &'c GuardConfig,
}

impl Config {
    /// The guard `name` of `[guards]`, validated with the whole configuration; an error names
    /// a guard that is not configured.
    pub fn guard_named<'c>(&'c self, name: &'c str) -> Result<NamedGuard<'c>, ConfigError> {
        self.validate()?;
        let guard = self
            .guards
            .get(name)
            .ok_or_else(|| missing(format!("guards.{name}"), "is not configured"))?;
        Ok(NamedGuard {
            config: self,
            name,
            guard,
        })
    }
}

impl NamedGuard<'_> {
    /// `store`, its keys under the configured prefix.
    pub fn store<St: Sealed>(&self, store: St) -> Result<St, ConfigError> {
        Ok(store.under_prefix(self.config.prefix()?))
    }

    /// How long its locks live unless renewed (`lock.ttl`).
    pub fn ttl(&self) -> Duration {
        self.guard.lock.ttl
    }

    /// Whether its handlers get fencing tokens (`lock.fencing`).
    pub fn fencing(&self) -> Fencing {
        self.guard.lock.fencing
    }

    /// How many may hold a key at once (`lock.permits`): `None` for a mutex.
    pub fn permits(&self) -> Option<u32> {
        self.guard.lock.permits
    }

    /// Its rate (`rate`); an error when it has none.
    pub fn rate(&self) -> Result<Rate, ConfigError> {
        self.guard.rate.ok_or_else(|| {
            missing(
                format!("guards.{}.rate", self.name),
                "is not set: a throttle needs its rate",
            )
        })
    }

    /// Its strategy, when it never defers (`strategy.then = "fail_fast"`, the default): retry
    /// within its limits, then refuse. No queue needed. An error when it defers.
    pub fn failing_fast(&self) -> Result<Retry<FailFast>, ConfigError> {
        match self.guard.strategy.then {
            FallThrough::FailFast => Ok(Retry::from_limits(self.guard.strategy.retry)),
            FallThrough::Defer => Err(missing(
                format!("guards.{}.strategy.then", self.name),
                "is \"defer\": build its strategy with deferring_to(queue)",
            )),
        }
    }

    /// Its strategy, retry within its limits then fail fast or defer to `queue`, which must be
    /// its `queue` (an error names another).
    pub fn deferring_to<Req, Q>(
        &self,
        queue: DelayQueue<Req, Q>,
    ) -> Result<ConfiguredStrategy<Req, Q>, ConfigError> {
        if let Some(wanted) = &self.guard.queue
            && wanted.as_str() != queue.name().as_str()
        {
            return Err(missing(
                format!("guards.{}.queue", self.name),
                "names another queue than the one given to build it",
            ));
        }
        Ok(strategy_of(&self.guard.strategy, queue))
    }
}
