//! The sections of a configuration: lock, strategy, queue, throttle, and a named guard.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lock::Fencing;
use crate::queue::{Counters, DEFAULT_MAX_PAYLOAD, Retention, RetryPolicy};
use crate::strategy::RetryLimits;
use crate::throttle::Rate;

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
    /// [`semaphore_layer`](super::Config::semaphore_layer) (none by default: a mutex, built by
    /// [`lock_layer`](super::Config::lock_layer)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            ttl: crate::guard::DEFAULT_TTL,
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
    /// finds it full does (none by default; see [`Defer::max_waiting`](crate::strategy::Defer::max_waiting)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_waiting: Option<crate::guard::LineCap>,
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
    /// [`DelayQueue::shards`](crate::queue::DelayQueue::shards)). Every process of a queue must use the same count.
    pub shards: usize,
    /// The largest encoded job in bytes (default 1 MiB).
    pub max_payload: usize,
    /// The backoff between a job's attempts and how many it gets.
    pub retry: RetryPolicy,
    /// Which finished jobs to keep for [`DelayQueue::status`](crate::queue::DelayQueue::status) (default: none), e.g.
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
