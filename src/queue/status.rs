//! A job's status, asked after the fact: by the id a deferral or a push returned.

use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Codec, DelayQueue, InspectQueue, JobId, JobInfo, JobSet, QueueError, RawJobState};

/// Where a job is, as [`DelayQueue::status`] finds it. `attempts` counts the runs of the job's
/// handler (for a job in flight, the current one included); `None` when its bytes do not
/// decode. A claim that met the job's lock held, or was buried before the handler was called,
/// is no run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobStatus {
    /// Waiting to become due, or due and not yet claimed.
    Waiting {
        /// When it is due.
        #[serde(with = "humantime_serde")]
        due: SystemTime,
        /// Runs so far (each failed).
        attempts: Option<u32>,
    },
    /// A scheduler is running it.
    InFlight {
        /// When its lease runs out unless renewed.
        #[serde(with = "humantime_serde")]
        lease_until: SystemTime,
        /// Runs so far, this one included.
        attempts: Option<u32>,
    },
    /// It finished: its handler succeeded and it was acknowledged. Known only while the
    /// queue's [`Retention`](super::Retention) keeps it.
    Done {
        /// When it was acknowledged.
        #[serde(with = "humantime_serde")]
        finished_at: SystemTime,
        /// Runs it took, the successful one included.
        attempts: Option<u32>,
    },
    /// In the dead-letter set.
    Dead {
        /// When it was buried.
        #[serde(with = "humantime_serde")]
        buried_at: SystemTime,
        /// Why.
        reason: Option<String>,
        /// Runs it had before it was buried: its last failed run included, a last claim that
        /// met its lock held (buried after `max_lock_wait`) not. Runs whose lease ran out (a
        /// crash, a hang) are not counted here: the reason says how many leases ran out.
        attempts: Option<u32>,
    },
    /// No such job: never pushed, cancelled, purged, or finished and not (or no longer) kept.
    Unknown,
}

/// The `attempts` a job in `set` is reported with (by [`JobStatus`], the command's `list` and
/// the dashboard alike), from its envelope's count of failed attempts: the runs it has had,
/// the one under way (in flight) or the successful one (done) included; a dead job's envelope
/// counts its last failed run already.
pub fn attempts_in(set: JobSet, failed: u32) -> u32 {
    match set {
        JobSet::Waiting | JobSet::Dead => failed,
        JobSet::InFlight | JobSet::Done => failed.saturating_add(1),
    }
}

impl JobStatus {
    /// The status of a job as [`QueueOperator::job`](crate::queue::QueueOperator::job) read it (`None`: no such job).
    pub fn of<T>(job: Option<&JobInfo<T>>) -> JobStatus {
        let Some(job) = job else {
            return JobStatus::Unknown;
        };
        let failed = match &job.envelope {
            Some(Ok(envelope)) => Some(envelope.attempt),
            _ => None,
        };
        let runs = failed.map(|failed| attempts_in(JobSet::Done, failed));
        match job.state.clone() {
            RawJobState::Delayed { due } => JobStatus::Waiting {
                due,
                attempts: failed,
            },
            RawJobState::InFlight { lease_until } => JobStatus::InFlight {
                lease_until,
                attempts: runs,
            },
            RawJobState::Done { finished_at } => JobStatus::Done {
                finished_at,
                attempts: runs,
            },
            // A failed last run is counted in the envelope the burial wrote.
            RawJobState::Dead { buried_at, reason } => JobStatus::Dead {
                buried_at,
                reason,
                attempts: failed,
            },
            RawJobState::Missing => JobStatus::Unknown,
        }
    }
}

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: InspectQueue,
    Enc: Codec,
{
    /// Where the job `id` is. A finished job is [`JobStatus::Done`] only with a
    /// [`retain_finished`](Self::retain_finished) retention; without one, or once the retention
    /// forgot it, it is [`JobStatus::Unknown`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::{DelayQueue, JobStatus};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "jobs")?;
    /// let id = queue.push(&7, Duration::from_secs(60)).await?.id;
    /// assert!(matches!(queue.status(&id).await?, JobStatus::Waiting { attempts: Some(0), .. }));
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, id: &JobId) -> Result<JobStatus, QueueError> {
        Ok(JobStatus::of(self.read_job(id).await?.as_ref()))
    }

    /// Reads one job, decoded when it decodes; `None` when there is no such job: what
    /// [`status`](Self::status) and [`QueueOperator::job`](super::QueueOperator::job) tell of it.
    pub(crate) async fn read_job(&self, id: &JobId) -> Result<Option<JobInfo<T>>, QueueError> {
        let raw = self.store.inspect(self.shards.of(id), id).await?;
        if raw.state == RawJobState::Missing && raw.envelope.is_none() {
            return Ok(None);
        }
        Ok(Some(JobInfo {
            state: raw.state,
            envelope: raw.envelope.map(|bytes| self.decode(id, &bytes)),
        }))
    }
}
