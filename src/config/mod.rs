//! One serde struct for the whole stack: lock, conflict strategy, queue, scheduler; and for a
//! service with several, its queues and guards by name.

mod error;
mod layers;
mod named;
mod sections;
#[cfg(test)]
mod tests;
mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::key::{DEFAULT_PREFIX, Prefix};
use crate::queue::DelayQueue;
use crate::queue::QueueStore;
use crate::scheduler::SchedulerOptions;

pub use self::error::ConfigError;
pub use self::layers::{ConfiguredSemaphore, ConfiguredStrategy, Fallback};
pub use self::named::NamedGuard;
pub use self::sections::{FallThrough, GuardConfig, LockConfig, QueueConfig, StrategyConfig, ThrottleConfig};
use self::validate::{
    missing, out_of_range, validate_lock, validate_queue, validate_scheduler, validate_strategy,
};

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
    /// A name that is no configured queue (of `[queues]`, or `[queue]`'s) is an error, as it
    /// is for [`queue_named`](Config::queue_named): a typo would run with the defaults.
    ///
    /// ```
    /// use redefer::Config;
    ///
    /// let config = Config::from_toml_str("[queues.syncs]\n[schedulers.syncs]\nconcurrency = 4")?;
    /// assert_eq!(config.scheduler_named("syncs")?.concurrency, 4);
    /// assert!(config.scheduler_named("syncz").is_err());
    /// # Ok::<(), redefer::ConfigError>(())
    /// ```
    pub fn scheduler_named(&self, name: &str) -> Result<SchedulerOptions, ConfigError> {
        if !self.has_queue(name) {
            return Err(missing(format!("queues.{name}"), "is not configured"));
        }
        Ok(self.schedulers.get(name).copied().unwrap_or(self.scheduler))
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
}
