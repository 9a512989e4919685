//! One serde struct for the whole stack: lock, conflict strategy, queue, scheduler; and for a
//! service with several, its queues and guards by name.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures_util::future::Either;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::error::{BoxError, KeyError};
use crate::key::{DEFAULT_PREFIX, Prefix};
use crate::lock::{Fencing, LockStore};
use crate::middleware::LockLayer;
use crate::queue::QueueStore;
use crate::queue::{Counters, DEFAULT_MAX_PAYLOAD, DelayQueue, Json, Retention, RetryPolicy};
use crate::scheduler::SchedulerOptions;
use crate::semaphore::{Permits, SemaphoreStore};
use crate::strategy::{Conflict, ConflictStrategy, Decision, Defer, FailFast, Retry, RetryLimits};
use crate::throttle::{Rate, ThrottleLayer, ThrottleStore};

/// The configuration of a redefer stack, TOML- and JSON-friendly, durations in human form
/// (`"250ms"`, `"30s"`, `"5m"`). Every field has a default, so a file names only what it changes.
///
/// ```
/// use redefer::Config;
///
/// let config: Config = toml::from_str(r#"
///     prefix = "billing"
///
///     [lock]
///     ttl = "15s"
///
///     [strategy]
///     then = "defer"                               # after the retries: defer (or "fail_fast")
///     retry = { max_attempts = 3, max_wait = "500ms", backoff = { initial = "50ms" } }
///
///     [queue]
///     name = "charges"
///     retry = { max_attempts = 8, backoff = { initial = "1s", cap = "10m" } }
///
///     [scheduler]
///     concurrency = 16
///     lease = "1m"
/// "#)?;
/// config.validate()?;
/// assert_eq!(config.scheduler.concurrency, 16);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Config {
    /// The prefix of every Redis key (default `redefer`).
    pub prefix: String,
    /// The lock.
    pub lock: LockConfig,
    /// What a request does when its lock is held.
    pub strategy: StrategyConfig,
    /// The delay queue deferred requests wait in.
    pub queue: QueueConfig,
    /// The scheduler that runs them.
    pub scheduler: SchedulerOptions,
    /// A rate per key, for [`throttle_layer`](Config::throttle_layer) (none by default).
    pub throttle: Option<ThrottleConfig>,
    /// A service's queues, by name (`[queues.charges]`): each a [`QueueConfig`] whose name is
    /// the table's, built by [`queue_named`](Config::queue_named).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub queues: BTreeMap<String, QueueConfig>,
    /// The schedulers of the named queues (`[schedulers.charges]`), for
    /// [`scheduler_named`](Config::scheduler_named); a queue without one runs with
    /// `[scheduler]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub schedulers: BTreeMap<String, SchedulerOptions>,
    /// A service's guards, by name (`[guards.exports]`): each a mutex, a semaphore or a
    /// throttle with its own strategy and queue, built by
    /// [`lock_layer_named`](Config::lock_layer_named),
    /// [`semaphore_layer_named`](Config::semaphore_layer_named) or
    /// [`throttle_layer_named`](Config::throttle_layer_named).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub guards: BTreeMap<String, GuardConfig>,
}

/// One guard of a service (`[guards.<name>]`): a mutex (the default), a semaphore (`lock`'s
/// `permits` set) or a throttle (`rate` set), with its own strategy and the named queue it
/// defers to.
///
/// ```toml
/// [guards.exports]
/// lock = { permits = 4, ttl = "1m" }
/// strategy = { then = "defer" }
/// queue = "exports"
///
/// [guards.refunds]
/// rate = { count = 10, per = "1s", burst = 5 }   # answered 429 by a FailFast
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct GuardConfig {
    /// The lock's settings; `permits` makes the guard a semaphore.
    pub lock: LockConfig,
    /// What a request does when the guard refuses it.
    pub strategy: StrategyConfig,
    /// A rate per key: the guard is a throttle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The queue (a name in `[queues]`, or `[queue]`'s) its deferrals go to; needed with
    /// `strategy.then = "defer"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prefix: DEFAULT_PREFIX.to_string(),
            lock: LockConfig::default(),
            strategy: StrategyConfig::default(),
            queue: QueueConfig::default(),
            scheduler: SchedulerOptions::default(),
            throttle: None,
            queues: BTreeMap::new(),
            schedulers: BTreeMap::new(),
            guards: BTreeMap::new(),
        }
    }
}

/// A throttle's settings: `[throttle] rate = { count = 10, per = "1s", burst = 5 }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleConfig {
    /// The rate each key is admitted at.
    pub rate: Rate,
}

/// The lock's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LockConfig {
    /// How long a lock lives unless renewed (default 10 s); renewed every third of it while
    /// the handler runs.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Whether handlers get fencing tokens: `"on"` (default) or `"off"`, the cheapest
    /// acquire; see [`Fencing`] for what off costs in safety.
    pub fencing: Fencing,
    /// How many may hold a key at once: a semaphore, built by
    /// [`semaphore_layer`](Config::semaphore_layer) (none by default: a mutex, built by
    /// [`lock_layer`](Config::lock_layer)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            ttl: crate::middleware::DEFAULT_TTL,
            fencing: Fencing::On,
            permits: None,
        }
    }
}

/// Retry briefly (or not at all), then fail fast or defer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StrategyConfig {
    /// The waits before falling through; `max_attempts = 0` (the default) falls through at once.
    pub retry: RetryLimits,
    /// What happens after the retries.
    pub then: FallThrough,
    /// With `then = "defer"`, the most requests a key's line holds, and what a request that
    /// finds it full does (none by default; see [`Defer::max_waiting`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_waiting: Option<crate::lock::LineCap>,
}

impl Default for StrategyConfig {
    /// Fail fast, with no retries.
    fn default() -> Self {
        StrategyConfig {
            retry: RetryLimits {
                max_attempts: 0,
                ..RetryLimits::default()
            },
            then: FallThrough::FailFast,
            max_waiting: None,
        }
    }
}

/// The last word of a configured strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallThrough {
    /// Refuse with `Error::Locked { retry_after }`.
    FailFast,
    /// Store the request in the queue for the scheduler.
    Defer,
}

/// The delay queue's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// The queue's name (default `deferred`).
    pub name: String,
    /// How many physical queues the queue spreads over (default 1; see
    /// [`DelayQueue::shards`]). Every process of a queue must use the same count.
    pub shards: usize,
    /// The largest encoded job in bytes (default 1 MiB).
    pub max_payload: usize,
    /// The backoff between a job's attempts and how many it gets.
    pub retry: RetryPolicy,
    /// Which finished jobs to keep for [`DelayQueue::status`] (default: none), e.g.
    /// `retention = { max_count = 100000, max_age = "1h" }`.
    pub retention: Option<Retention>,
    /// Whether the queue's activity is counted per minute for the dashboard (`"on"`, the
    /// default, or `"off"`; see [`Counters`]).
    pub activity: Counters,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            name: "deferred".to_string(),
            shards: 1,
            max_payload: DEFAULT_MAX_PAYLOAD,
            retry: RetryPolicy::default(),
            retention: None,
            activity: Counters::On,
        }
    }
}

/// The most jobs a configured scheduler runs at once.
const MAX_CONCURRENCY: usize = 100_000;
/// The most jobs a configured scheduler claims at once (one script's bounded work).
const MAX_BATCH: usize = 10_000;

/// A configuration that cannot work.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The prefix or queue name is rejected.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The configured store could not be reached ([`Config::connect`]).
    #[error(transparent)]
    Store(#[from] crate::error::StoreError),
    /// A value is out of range.
    #[error("{field}: {problem}")]
    OutOfRange {
        /// The field, in full: `section.name`, `strategy.retry.backoff.jitter`.
        field: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The text is not a configuration: TOML syntax, an unknown field, a value of the wrong
    /// kind (the message says where).
    #[error("invalid configuration: {0}")]
    Parse(String),
    /// The file could not be read ([`Config::from_file`]).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Config {
    /// The configuration a TOML text describes, validated: what `Config`'s serde form reads,
    /// then [`validate`](Config::validate).
    ///
    /// ```
    /// use redefer::Config;
    ///
    /// let config = Config::from_toml_str("prefix = \"billing\"\n[queue]\nretention = { max_count = 10 }")?;
    /// assert_eq!(config.prefix, "billing");
    /// assert_eq!(config.queue.retention.map(|r| r.max_count), Some(10));
    /// assert!(Config::from_toml_str("[lock]\nttll = \"10s\"").is_err());
    /// # Ok::<(), redefer::ConfigError>(())
    /// ```
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|error| ConfigError::Parse(error.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration in the TOML file at `path`, validated ([`from_toml_str`](Config::from_toml_str)).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text)
    }

    /// Checks what serde cannot: names, values that would not work, and what the named guards
    /// refer to (every section, named ones included, with its full path in the error).
    pub fn validate(&self) -> Result<(), ConfigError> {
        Prefix::new(self.prefix.as_str())?;
        validate_lock("lock", &self.lock)?;
        validate_strategy("strategy", &self.strategy)?;
        validate_queue("queue", &self.queue)?;
        validate_scheduler("scheduler", &self.scheduler)?;
        for (name, queue) in &self.queues {
            let path = format!("queues.{name}");
            crate::queue::QueueName::new(name.as_str())?;
            if queue.name != QueueConfig::default().name && queue.name != *name {
                return out_of_range(
                    &format!("{path}.name"),
                    "differs from the table's name, which names the queue",
                );
            }
            validate_queue(&path, queue)?;
        }
        for (name, options) in &self.schedulers {
            let path = format!("schedulers.{name}");
            if !self.has_queue(name) {
                return out_of_range(&path, "names no queue of [queues] or [queue]");
            }
            validate_scheduler(&path, options)?;
        }
        for (name, guard) in &self.guards {
            let path = format!("guards.{name}");
            validate_lock(&format!("{path}.lock"), &guard.lock)?;
            validate_strategy(&format!("{path}.strategy"), &guard.strategy)?;
            if guard.rate.is_some() && guard.lock.permits.is_some() {
                return out_of_range(
                    &path,
                    "is a semaphore (lock.permits) or a throttle (rate), not both",
                );
            }
            match &guard.queue {
                Some(queue) if !self.has_queue(queue) => {
                    return out_of_range(&format!("{path}.queue"), "names no queue of [queues] or [queue]");
                }
                None if guard.strategy.then == FallThrough::Defer => {
                    return out_of_range(
                        &format!("{path}.queue"),
                        "is not set: a guard that defers needs its queue",
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether `name` is a queue this configuration describes: `[queue]`'s, or one of `[queues]`.
    fn has_queue(&self, name: &str) -> bool {
        self.queue.name == name || self.queues.contains_key(name)
    }

    /// The validated key prefix.
    pub fn prefix(&self) -> Result<Prefix, ConfigError> {
        Ok(Prefix::new(self.prefix.as_str())?)
    }

    /// Connects to the Redis server at `url` under the configured prefix.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config: redefer::Config = toml::from_str("prefix = \"billing\"")?;
    /// let store = config.connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.prefix().as_str(), "billing");
    /// # Ok(()) }
    /// ```
    pub async fn connect(&self, url: &str) -> Result<crate::RedisStore, ConfigError> {
        Ok(crate::RedisStore::builder()
            .prefix(self.prefix.as_str())?
            .connect(url)
            .await?)
    }

    /// The configured queue of `T`s in `store`, under the configured prefix (a Redis store
    /// connected under another prefix is moved to this one: the app, its workers and the
    /// command must look at the same keys).
    pub fn queue<T, St: QueueStore>(&self, store: St) -> Result<DelayQueue<T, St>, ConfigError> {
        self.build_queue(self.queue.name.as_str(), &self.queue, store)
    }

    /// The queue `name` of `T`s in `store`: one of `[queues]` (its table's name is the
    /// queue's), or `[queue]` when that is its name. Under the configured prefix, as
    /// [`queue`](Config::queue).
    ///
    /// ```
    /// use redefer::{Config, MemoryStore};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = Config::from_toml_str(r#"
    ///     [queues.charges]
    ///     shards = 2
    ///
    ///     [queues.syncs]
    ///     retry = { max_attempts = 3 }
    /// "#)?;
    /// let charges = config.queue_named::<u64, _>("charges", MemoryStore::new())?;
    /// assert_eq!(charges.shard_names().len(), 2);
    /// assert!(config.queue_named::<u64, _>("nope", MemoryStore::new()).is_err());
    /// # Ok(()) }
    /// ```
    pub fn queue_named<T, St: QueueStore>(
        &self,
        name: &str,
        store: St,
    ) -> Result<DelayQueue<T, St>, ConfigError> {
        let queue = match self.queues.get(name) {
            Some(queue) => queue,
            None if self.queue.name == name => &self.queue,
            None => return Err(missing(format!("queues.{name}"), "is not configured")),
        };
        self.build_queue(name, queue, store)
    }

    /// The scheduler options of queue `name`: its `[schedulers.<name>]`, else `[scheduler]`.
    pub fn scheduler_named(&self, name: &str) -> SchedulerOptions {
        self.schedulers.get(name).copied().unwrap_or(self.scheduler)
    }

    /// The queue `name` as `settings` describe it, in `store` under the configured prefix.
    fn build_queue<T, St: QueueStore>(
        &self,
        name: &str,
        settings: &QueueConfig,
        store: St,
    ) -> Result<DelayQueue<T, St>, ConfigError> {
        let store = store.under_prefix(self.prefix()?);
        let queue = DelayQueue::new(store, name)?
            .shards(settings.shards)?
            .retry_policy(settings.retry)
            .max_payload(settings.max_payload)
            .count_activity(settings.activity);
        Ok(match settings.retention {
            Some(retention) => queue.retain_finished(retention),
            None => queue,
        })
    }

    /// The guard `name` of `[guards]`, validated, whose kind is `kind` and whose queue is the
    /// one given (when it defers).
    fn guard<Req, Q>(
        &self,
        name: &str,
        kind: GuardKind,
        queue: &DelayQueue<Req, Q>,
    ) -> Result<&GuardConfig, ConfigError> {
        self.validate()?;
        let path = format!("guards.{name}");
        let guard = self
            .guards
            .get(name)
            .ok_or_else(|| missing(path.clone(), "is not configured"))?;
        let found = match (guard.rate, guard.lock.permits) {
            (Some(_), _) => GuardKind::Throttle,
            (None, Some(_)) => GuardKind::Semaphore,
            (None, None) => GuardKind::Mutex,
        };
        if found != kind {
            return Err(missing(path, found.built_by()));
        }
        if let Some(wanted) = &guard.queue
            && wanted.as_str() != queue.name().as_str()
        {
            return Err(missing(
                format!("{path}.queue"),
                "names another queue than the one given to build it",
            ));
        }
        Ok(guard)
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
        let guard = self.guard(name, GuardKind::Mutex, &queue)?;
        Ok(LockLayer::new(store.under_prefix(self.prefix()?), extractor)
            .ttl(guard.lock.ttl)
            .fencing(guard.lock.fencing)
            .on_conflict(strategy_of(&guard.strategy, queue)))
    }

    /// The semaphore `name` of `[guards]` (its `lock.permits` set); see
    /// [`lock_layer_named`](Config::lock_layer_named).
    pub fn semaphore_layer_named<St: SemaphoreStore, X, Req, Q>(
        &self,
        name: &str,
        store: St,
        extractor: X,
        queue: DelayQueue<Req, Q>,
    ) -> Result<ConfiguredSemaphore<St, X, Req, Q>, ConfigError> {
        let guard = self.guard(name, GuardKind::Semaphore, &queue)?;
        let permits = guard.lock.permits.unwrap_or(1);
        Ok(LockLayer::new(store.under_prefix(self.prefix()?), extractor)
            .ttl(guard.lock.ttl)
            .fencing(guard.lock.fencing)
            .permits(permits)
            .on_conflict(strategy_of(&guard.strategy, queue)))
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
        let guard = self.guard(name, GuardKind::Throttle, &queue)?;
        let Some(rate) = guard.rate else {
            return Err(missing(
                format!("guards.{name}.rate"),
                "is not set: a throttle needs its rate",
            ));
        };
        Ok(
            ThrottleLayer::new(store.under_prefix(self.prefix()?), extractor, rate)
                .on_conflict(strategy_of(&guard.strategy, queue)),
        )
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
        let store = store.under_prefix(self.prefix()?);
        Ok(LockLayer::new(store, extractor)
            .ttl(self.lock.ttl)
            .fencing(self.lock.fencing)
            .on_conflict(strategy_of(&self.strategy, queue)))
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
    pub fn semaphore_layer<St: SemaphoreStore, X, Req, Q>(
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
        let store = store.under_prefix(self.prefix()?);
        Ok(LockLayer::new(store, extractor)
            .ttl(self.lock.ttl)
            .fencing(self.lock.fencing)
            .permits(permits)
            .on_conflict(strategy_of(&self.strategy, queue)))
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
        let store = store.under_prefix(self.prefix()?);
        Ok(ThrottleLayer::new(store, extractor, throttle.rate)
            .on_conflict(strategy_of(&self.strategy, queue)))
    }
}

/// A configured strategy: retry within the limits, then fail fast or defer to `queue`.
fn strategy_of<Req, Q>(strategy: &StrategyConfig, queue: DelayQueue<Req, Q>) -> ConfiguredStrategy<Req, Q> {
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

/// The error of a named section that is missing, or not what it was asked as.
fn missing(field: String, problem: &'static str) -> ConfigError {
    ConfigError::OutOfRange { field, problem }
}

/// The error of a value out of range at `field`.
fn out_of_range(field: &str, problem: &'static str) -> Result<(), ConfigError> {
    Err(ConfigError::OutOfRange {
        field: field.to_string(),
        problem,
    })
}

/// Checks a lock section (`[lock]`, or a guard's `lock`) at `path`.
fn validate_lock(path: &str, lock: &LockConfig) -> Result<(), ConfigError> {
    if lock.ttl < Duration::from_millis(3) {
        return out_of_range(&format!("{path}.ttl"), "must be at least 3 ms, to be renewed");
    }
    if lock.permits == Some(0) {
        return out_of_range(
            &format!("{path}.permits"),
            "must be at least 1 (0 would admit nobody)",
        );
    }
    Ok(())
}

/// Checks a strategy section (`[strategy]`, or a guard's `strategy`) at `path`.
fn validate_strategy(path: &str, strategy: &StrategyConfig) -> Result<(), ConfigError> {
    match strategy.retry.backoff.problem() {
        Some((part, problem)) => out_of_range(&format!("{path}.retry.backoff.{part}"), problem),
        None => Ok(()),
    }
}

/// Checks a queue section (`[queue]`, or one of `[queues]`) at `path`.
fn validate_queue(path: &str, queue: &QueueConfig) -> Result<(), ConfigError> {
    crate::queue::QueueName::new(queue.name.as_str())?;
    if !(1..=crate::queue::MAX_SHARDS).contains(&queue.shards) {
        return out_of_range(&format!("{path}.shards"), "must be within 1 and 1024");
    }
    if queue.retry.max_attempts == 0 {
        return out_of_range(&format!("{path}.retry.max_attempts"), "must be at least 1");
    }
    if let Some((part, problem)) = queue.retry.backoff.problem() {
        return out_of_range(&format!("{path}.retry.backoff.{part}"), problem);
    }
    if let Some(retention) = queue.retention {
        if retention.max_count == 0 {
            return out_of_range(&format!("{path}.retention.max_count"), "must be at least 1");
        }
        if retention.max_age.is_zero() {
            return out_of_range(&format!("{path}.retention.max_age"), "must be more than zero");
        }
    }
    if queue.max_payload == 0 {
        return out_of_range(&format!("{path}.max_payload"), "must be at least 1 byte");
    }
    Ok(())
}

/// Checks a scheduler section (`[scheduler]`, or one of `[schedulers]`) at `path`.
fn validate_scheduler(path: &str, scheduler: &SchedulerOptions) -> Result<(), ConfigError> {
    let field = |name: &str| format!("{path}.{name}");
    if !(1..=MAX_CONCURRENCY).contains(&scheduler.concurrency) {
        return out_of_range(&field("concurrency"), "must be within 1 and 100000");
    }
    if !(1..=MAX_BATCH).contains(&scheduler.batch) {
        return out_of_range(&field("batch"), "must be within 1 and 10000");
    }
    if let Some((part, problem)) = scheduler.error_backoff.problem() {
        return out_of_range(&field(&format!("error_backoff.{part}")), problem);
    }
    if scheduler.max_idle.is_zero() {
        return out_of_range(
            &field("max_idle"),
            "must be more than zero (zero would poll without pause)",
        );
    }
    if scheduler.lease < Duration::from_millis(3) {
        return out_of_range(&field("lease"), "must be at least 3 ms, to be renewed");
    }
    if scheduler.lease > crate::queue::MAX_LEASE {
        return out_of_range(&field("lease"), "must be at most 24 hours (queue::MAX_LEASE)");
    }
    if scheduler.time_limit.is_zero() {
        return out_of_range(&field("time_limit"), "must be more than zero");
    }
    Ok(())
}

/// The strategy a [`Config`] describes: retry within limits, then fail fast or defer.
pub type ConfiguredStrategy<Req, St> = Retry<Fallback<Req, St>>;

/// The semaphore a [`Config`] describes ([`Config::semaphore_layer`]): the lock layer over the
/// permits of `St`, with the configured strategy deferring to a queue in `Q`.
pub type ConfiguredSemaphore<St, X, Req, Q> = LockLayer<Permits<St, u32>, X, ConfiguredStrategy<Req, Q>>;

/// What a configured strategy falls through to.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_are_valid_and_fail_fast() {
        let config = parsed("");
        assert_eq!(config, Config::default());
        config.validate().unwrap();
        assert_eq!(config.strategy.retry.max_attempts, 0);
        assert_eq!(config.strategy.then, FallThrough::FailFast);
    }

    #[test]
    fn values_that_cannot_work_are_rejected() {
        let invalid = [
            ("prefix = \"a{b}\"", "prefix"),
            ("[queue]\nname = \"\"", "queue name"),
            ("[lock]\nttl = \"1ms\"", "lock.ttl"),
            ("[lock]\npermits = 0", "lock.permits"),
            ("[queue.retry]\nmax_attempts = 0", "max_attempts"),
            ("[scheduler]\nconcurrency = 0", "concurrency"),
            ("[queue]\nshards = 0", "queue.shards"),
            ("[scheduler]\nconcurrency = 4931564660701547677", "concurrency"),
            ("[scheduler]\nbatch = 1000000", "batch"),
            (
                "[strategy.retry.backoff]\njitter = -2.0",
                "strategy.retry.backoff.jitter: ",
            ),
            (
                "[queue.retry.backoff]\nfactor = 0.5",
                "queue.retry.backoff.factor: ",
            ),
            (
                "[scheduler.error_backoff]\nfactor = nan",
                "scheduler.error_backoff.factor: ",
            ),
            (
                "[strategy.retry.backoff]\ninitial = \"10s\"\ncap = \"1s\"",
                "strategy.retry.backoff.initial: must not exceed cap",
            ),
            ("[scheduler]\nlease = \"0s\"", "scheduler.lease"),
            ("[scheduler]\nmax_idle = \"0s\"", "scheduler.max_idle: "),
            ("[scheduler]\ntime_limit = \"0s\"", "scheduler.time_limit: "),
            ("[queue]\nmax_payload = 0", "queue.max_payload: "),
            (
                "[queue]\nretention = { max_count = 0, max_age = \"1h\" }",
                "queue.retention.max_count: ",
            ),
            (
                "[queue]\nretention = { max_count = 10, max_age = \"0s\" }",
                "queue.retention.max_age: ",
            ),
        ];
        for (text, mentions) in invalid {
            let error = parsed(text).validate().unwrap_err().to_string();
            assert!(error.contains(mentions), "{text:?}: {error}");
        }
    }

    /// A partial table keeps the documented defaults for what it leaves out.
    #[test]
    fn a_partial_table_gets_the_defaults() {
        let config = parsed("[strategy]\nretry = { max_attempts = 3, backoff = { initial = \"20ms\" } }");
        config.validate().unwrap();
        let defaults = RetryLimits::default();
        assert_eq!(config.strategy.retry.max_attempts, 3);
        assert_eq!(config.strategy.retry.max_wait, defaults.max_wait);
        assert_eq!(config.strategy.retry.backoff.initial, Duration::from_millis(20));
        assert_eq!(config.strategy.retry.backoff.cap, defaults.backoff.cap);
        assert_eq!(config.strategy.retry.backoff.factor, defaults.backoff.factor);
    }

    #[test]
    fn the_configured_retention_reaches_the_queue() {
        let config = parsed("[queue]\nretention = { max_count = 500, max_age = \"2h\" }");
        config.validate().unwrap();
        let queue = config.queue::<u32, _>(crate::MemoryStore::new()).unwrap();
        assert_eq!(
            queue.retention(),
            Some(Retention::new(500, Duration::from_secs(7200)))
        );
        let plain = parsed("").queue::<u32, _>(crate::MemoryStore::new()).unwrap();
        assert_eq!(plain.retention(), None, "none by default");
    }

    #[test]
    fn the_configured_activity_counters_reach_the_queue() {
        let off = parsed("[queue]\nactivity = \"off\"");
        assert_eq!(
            off.queue::<u32, _>(crate::MemoryStore::new()).unwrap().counters(),
            Counters::Off
        );
        let plain = parsed("").queue::<u32, _>(crate::MemoryStore::new()).unwrap();
        assert_eq!(plain.counters(), Counters::On, "on by default");
        assert!(toml::from_str::<Config>("[queue]\nactivity = \"sometimes\"").is_err());
    }

    #[test]
    fn toml_is_read_and_checked_by_the_crate_itself() {
        let partial = Config::from_toml_str("[queue]\nretention = { max_count = 10 }").unwrap();
        let retention = partial.queue.retention.unwrap();
        assert_eq!(retention.max_count, 10);
        assert_eq!(retention.max_age, crate::queue::Retention::default().max_age);
        assert!(matches!(
            Config::from_toml_str("[queue]\nretention = { max_count = 10, keep = 3 }"),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            Config::from_toml_str("[scheduler]\nmax_idle = \"0s\""),
            Err(ConfigError::OutOfRange { .. })
        ));
        assert!(matches!(
            Config::from_file("/nonexistent/redefer.toml"),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn the_line_cap_and_the_re_deferral_cap_are_read_from_their_sections() {
        let config = parsed(
            "[strategy]\nthen = \"defer\"\nmax_waiting = { max = 3, overflow = \"drop_oldest\" }\n\
             [queue]\nretry = { max_lock_waits = 50 }",
        );
        assert_eq!(
            config.strategy.max_waiting,
            Some(crate::lock::LineCap::new(3).drop_oldest())
        );
        assert_eq!(config.queue.retry.max_lock_waits, 50);
        assert_eq!(parsed("").strategy.max_waiting, None);
        assert!(
            toml::from_str::<Config>("[strategy]\nmax_waiting = { max = 3, overflow = \"newest\" }").is_err()
        );
    }

    #[test]
    fn the_semaphore_and_the_throttle_are_built_from_their_sections() {
        let store = crate::MemoryStore::new();
        let by_key = |n: &u64| Some(format!("key:{n}"));
        let plain = parsed("");
        let queue = || plain.queue::<u64, _>(store.clone()).unwrap();
        assert!(plain.lock_layer(store.clone(), by_key, queue()).is_ok());
        let missing = |error: ConfigError| error.to_string();
        let no_permits = plain
            .semaphore_layer(store.clone(), by_key, queue())
            .map(|_| ())
            .unwrap_err();
        assert!(missing(no_permits).contains("lock.permits"));
        let no_rate = plain
            .throttle_layer(store.clone(), by_key, queue())
            .map(|_| ())
            .unwrap_err();
        assert!(missing(no_rate).contains("throttle"));

        let both = parsed("[lock]\npermits = 3\n[throttle]\nrate = { count = 600, per = \"1m\", burst = 4 }");
        assert!(both.semaphore_layer(store.clone(), by_key, queue()).is_ok());
        assert!(both.throttle_layer(store.clone(), by_key, queue()).is_ok());
        let rate = both.throttle.unwrap().rate;
        assert_eq!(
            (rate.interval(), rate.burst_size()),
            (Duration::from_millis(100), 4)
        );
        // A mutex asked of a semaphore's configuration is a mistake, not a silent mutex.
        let mutex = both
            .lock_layer(store.clone(), by_key, queue())
            .map(|_| ())
            .unwrap_err();
        assert!(missing(mutex).contains("lock.permits"));
        assert!(toml::from_str::<Config>("[throttle]\nrate = { count = 0, per = \"1s\" }").is_err());
    }

    #[test]
    fn unknown_fields_and_bad_durations_do_not_parse() {
        assert!(toml::from_str::<Config>("[lock]\nttl = \"10 parsecs\"").is_err());
        assert!(toml::from_str::<Config>("[lock]\nttll = \"10s\"").is_err());
        assert!(toml::from_str::<Config>("[strategy]\nthen = \"pray\"").is_err());
        assert!(
            toml::from_str::<Config>(
                "[queue]\nretention = { max_count = 1, max_age = \"1h\", max_size = 2 }"
            )
            .is_err()
        );
    }

    /// A service with several queues and guards, each with its own strategy, in one file: every
    /// part is built by name, and what the names refer to is checked.
    #[test]
    fn a_whole_service_is_described_and_built_by_name() {
        let config = Config::from_toml_str(
            r#"
            prefix = "shop"

            [queues.exports]
            shards = 2
            [queues.syncs]
            retry = { max_attempts = 3 }
            [schedulers.syncs]
            concurrency = 4

            [guards.exports]
            lock = { permits = 4 }
            strategy = { then = "defer" }
            queue = "exports"

            [guards.customers]
            rate = { count = 10, per = "1s", burst = 5 }

            [guards.syncs]
            strategy = { then = "defer", max_waiting = { max = 100 } }
            queue = "syncs"
            "#,
        )
        .unwrap();
        let store = crate::MemoryStore::new();
        let exports = config.queue_named::<u64, _>("exports", store.clone()).unwrap();
        let syncs = config.queue_named::<u64, _>("syncs", store.clone()).unwrap();
        assert_eq!(exports.shard_names().len(), 2);
        assert_eq!(syncs.policy().max_attempts, 3);
        assert_eq!(config.scheduler_named("syncs").concurrency, 4);
        assert_eq!(config.scheduler_named("exports"), config.scheduler);
        let by_key = |n: &u64| Some(n.to_string());
        assert!(
            config
                .semaphore_layer_named("exports", store.clone(), by_key, exports.clone())
                .is_ok()
        );
        assert!(
            config
                .throttle_layer_named("customers", store.clone(), by_key, syncs.clone())
                .is_ok()
        );
        assert!(
            config
                .lock_layer_named("syncs", store.clone(), by_key, syncs.clone())
                .is_ok()
        );
        let error = |result: Result<(), ConfigError>| result.unwrap_err().to_string();
        assert!(
            error(
                config
                    .lock_layer_named("exports", store.clone(), by_key, exports.clone())
                    .map(|_| ())
            )
            .contains("semaphore_layer_named")
        );
        assert!(
            error(
                config
                    .lock_layer_named("syncs", store.clone(), by_key, exports.clone())
                    .map(|_| ())
            )
            .contains("guards.syncs.queue")
        );
        assert!(
            error(
                config
                    .lock_layer_named("nope", store, by_key, exports)
                    .map(|_| ())
            )
            .contains("guards.nope")
        );

        for (text, field) in [
            ("[guards.a]\nqueue = \"nowhere\"", "guards.a.queue"),
            ("[guards.a]\nstrategy = { then = \"defer\" }", "guards.a.queue"),
            (
                "[guards.a]\nlock = { permits = 2 }\nrate = { count = 1, per = \"1s\" }",
                "guards.a",
            ),
            ("[guards.a]\nlock = { permits = 0 }", "guards.a.lock.permits"),
            (
                "[queues.q]\nretry = { max_attempts = 0 }",
                "queues.q.retry.max_attempts",
            ),
            ("[queues.q]\nname = \"other\"", "queues.q.name"),
            ("[schedulers.nowhere]\nconcurrency = 2", "schedulers.nowhere"),
            (
                "[queues.q]\n[schedulers.q]\nconcurrency = 0",
                "schedulers.q.concurrency",
            ),
        ] {
            let refused = Config::from_toml_str(text).unwrap_err().to_string();
            assert!(refused.starts_with(field), "{text}: {refused}");
        }
    }
}
