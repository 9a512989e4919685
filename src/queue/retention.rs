//! How long a queue keeps its finished jobs, so that their status can be asked after the fact.

use std::time::Duration;

/// Which finished jobs a queue keeps: at most `max_count`, none older than `max_age`. Off by
/// default: an acked job is deleted at once. With a retention, the ack moves the job's
/// envelope to the queue's done set instead, and forgets the oldest beyond either bound, a
/// bounded number per ack.
///
/// A kept job's id is free for a new job: pushing it again stores the new job, and its status
/// is the new job's.
///
/// ```
/// use std::time::Duration;
/// use redefer::MemoryStore;
/// use redefer::queue::{DelayQueue, JobStatus, Retention};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "jobs")?
///     .retain_finished(Retention::new(10_000, Duration::from_secs(3600)));
/// let id = queue.push(&7, Duration::ZERO).await?.id;
/// let job = queue.claim(1, Duration::from_secs(30)).await?.jobs.remove(0);
/// queue.ack(&job.lease).await?;
/// assert!(matches!(queue.status(&id).await?, JobStatus::Done { attempts: Some(1), .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// The most finished jobs kept (at least 1).
    pub max_count: usize,
    /// The longest a finished job is kept.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

impl Retention {
    /// Keeps at most `max_count` finished jobs (at least 1), none older than `max_age`.
    pub fn new(max_count: usize, max_age: Duration) -> Self {
        Retention {
            max_count: max_count.max(1),
            max_age,
        }
    }
}
