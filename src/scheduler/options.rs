//! How a scheduler claims and runs jobs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;

/// How a [`Scheduler`](super::Scheduler) claims and runs jobs.
///
/// ```
/// use redefer::SchedulerOptions;
///
/// let options: SchedulerOptions = serde_json::from_str(
///     r#"{ "concurrency": 8, "lease": "1m", "shutdown_grace": "20s" }"#,
/// )?;
/// assert_eq!(options.concurrency, 8);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerOptions {
    /// How many jobs run at once.
    pub concurrency: usize,
    /// The most jobs one claim takes.
    pub batch: usize,
    /// How long a claimed job stays ours without renewal; renewed every third of it while the
    /// job runs. After a crash, the job is delivered again once this runs out.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long one attempt of a job may run; past it, the handler is stopped and the attempt
    /// fails with "timed out after D" (counted like any failed attempt). A handler that never
    /// returns would otherwise hold its job in flight forever, renewing its lease. For a limit
    /// per request type, or one that covers only the handler, see where `TimeoutLayer` goes
    /// ([`guide::strategies`](crate::guide::strategies)).
    ///
    /// The handler is stopped at its next `.await`: code that blocks its thread runs on until
    /// it returns or awaits (its lease is renewed meanwhile), and work it handed to
    /// `spawn_blocking` is not stopped at all.
    #[serde(with = "humantime_serde")]
    pub time_limit: Duration,
    /// The longest the scheduler sleeps without looking at the queue, should a wake-up be missed.
    #[serde(with = "humantime_serde")]
    pub max_idle: Duration,
    /// How long a shutdown waits for running jobs before giving the rest back to the queue.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// The waits between attempts to reach a failing store.
    pub error_backoff: Backoff,
    /// How often the scheduler counts its queue's jobs for the `redefer_queue_jobs` gauges
    /// (one `stats` call per shard); zero never does. (The scheduler puts its queue in the
    /// store's registry again every 10 s whatever this says: a Redis restart without
    /// persistence empties the registry, which the command and the dashboard read.)
    #[serde(with = "humantime_serde")]
    pub stats_every: Duration,
}

impl Default for SchedulerOptions {
    /// 32 jobs at once, batches of 64, 30 s leases, 5 minutes per attempt, at most 1 s idle,
    /// 10 s grace, queue gauges every 10 s.
    fn default() -> Self {
        SchedulerOptions {
            concurrency: 32,
            batch: 64,
            lease: Duration::from_secs(30),
            time_limit: Duration::from_secs(5 * 60),
            max_idle: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            error_backoff: Backoff {
                initial: Duration::from_millis(50),
                factor: 2.0,
                cap: Duration::from_secs(5),
                jitter: 0.5,
            },
            stats_every: Duration::from_secs(10),
        }
    }
}
