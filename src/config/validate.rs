//! The checks of each section, shared by the single-stack sections and the named ones: each
//! names the field in full (`queues.charges.retry.max_attempts`).

use std::time::Duration;

use crate::scheduler::SchedulerOptions;

use super::{ConfigError, LockConfig, QueueConfig, StrategyConfig};

/// The most jobs a configured scheduler runs at once.
const MAX_CONCURRENCY: usize = 100_000;
/// The most jobs a configured scheduler claims at once (one script's bounded work).
const MAX_BATCH: usize = 10_000;

/// The error of a named section that is missing, or not what it was asked as.
pub(super) fn missing(field: String, problem: &'static str) -> ConfigError {
    ConfigError::OutOfRange { field, problem }
}

/// The error of a value out of range at `field`.
pub(super) fn out_of_range(field: &str, problem: &'static str) -> Result<(), ConfigError> {
    Err(ConfigError::OutOfRange {
        field: field.to_string(),
        problem,
    })
}

/// Checks a lock section (`[lock]`, or a guard's `lock`) at `path`.
pub(super) fn validate_lock(path: &str, lock: &LockConfig) -> Result<(), ConfigError> {
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
pub(super) fn validate_strategy(path: &str, strategy: &StrategyConfig) -> Result<(), ConfigError> {
    match strategy.retry.backoff.problem() {
        Some((part, problem)) => out_of_range(&format!("{path}.retry.backoff.{part}"), problem),
        None => Ok(()),
    }
}

/// Checks a queue section (`[queue]`, or one of `[queues]`) at `path`.
pub(super) fn validate_queue(path: &str, queue: &QueueConfig) -> Result<(), ConfigError> {
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
pub(super) fn validate_scheduler(path: &str, scheduler: &SchedulerOptions) -> Result<(), ConfigError> {
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
