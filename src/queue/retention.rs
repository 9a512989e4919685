//! How long a queue keeps its finished jobs, so that their status can be asked after the fact.

use std::time::Duration;

/// Which finished jobs a queue keeps: the newest `max_count`, none older than `max_age` as of
/// the latest ack. Off by default: an acked job is deleted at once. With a retention, the ack
/// moves the job's envelope to the queue's done set instead.
///
/// **When a job is forgotten.** Only an ack forgets: each ack (of the same shard) first keeps
/// the jobs it finishes, then forgets the kept jobs older than `max_age` and the oldest beyond
/// `max_count` (on Redis at most 1,000 of each per ack, at least as many as the ack keeps, so a
/// backlog shrinks over the next acks). Nothing forgets a job at its `max_age` by itself: on a
/// queue that acks nothing more, finished jobs stay, and [`status`](super::DelayQueue::status)
/// answers `Done` for them past `max_age`, until the next ack.
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
///
/// A job past `max_age` is kept until the next ack:
///
/// ```
/// use std::time::Duration;
/// use redefer::MemoryStore;
/// use redefer::queue::{DelayQueue, JobStatus, Retention};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "jobs")?
///     .retain_finished(Retention::new(10_000, Duration::from_millis(10)));
/// let run = async |item| -> Result<_, Box<dyn std::error::Error>> {
///     let id = queue.push(&item, Duration::ZERO).await?.id;
///     let job = queue.claim(1, Duration::from_secs(30)).await?.jobs.remove(0);
///     queue.ack(&job.lease).await?;
///     Ok(id)
/// };
/// let first = run(1).await?;
/// tokio::time::sleep(Duration::from_millis(50)).await;
/// assert!(matches!(queue.status(&first).await?, JobStatus::Done { .. }), "past max_age, still kept");
/// let second = run(2).await?;
/// assert_eq!(queue.status(&first).await?, JobStatus::Unknown, "forgotten by the next ack");
/// assert!(matches!(queue.status(&second).await?, JobStatus::Done { .. }));
/// # Ok(()) }
/// ```
///
/// As configuration, either bound may be left out (`{ max_count = 10 }`): it keeps its
/// default, 10,000 jobs or a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// The most finished jobs kept (at least 1).
    pub max_count: usize,
    /// The longest a finished job is kept.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

impl Default for Retention {
    /// At most 10,000 finished jobs, none older than a day.
    fn default() -> Self {
        Retention {
            max_count: 10_000,
            max_age: Duration::from_secs(24 * 60 * 60),
        }
    }
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
