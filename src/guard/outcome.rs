//! What a locked call produced when it did not fail.

use std::time::SystemTime;

use crate::queue::{JobId, QueueName};

/// The result of a call through [`LockService`](crate::LockService) that did not fail: either
/// the inner service's response, or a deferral of the request to run later, or (behind an
/// [`IdempotencyLayer`](crate::idempotency::IdempotencyLayer)) the news that a request of the
/// same id was already taken.
///
/// `#[non_exhaustive]`: the guards to come may report outcomes of their own, so a `match` has
/// a last arm for them.
///
/// ```
/// use redefer::Outcome;
/// use redefer::idempotency::Seen;
///
/// fn status(outcome: &Outcome<String>) -> u16 {
///     match outcome {
///         Outcome::Done(_) => 200,
///         Outcome::Deferred(_) => 202, // stored: it will run later
///         // Already taken: it ran (success), or is in progress (try again later).
///         Outcome::Duplicate(duplicate) if matches!(duplicate.seen, Seen::Finished | Seen::Done) => 200,
///         Outcome::Duplicate(_) => 409,
///         _ => 202,
///     }
/// }
/// assert_eq!(status(&Outcome::Done("ok".to_string())), 200);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a deferred request has not run yet"]
#[non_exhaustive]
pub enum Outcome<R> {
    /// The request ran under the lock (or needed none) and this is its response.
    Done(R),
    /// The lock was held; the request is stored in a delay queue and will run later.
    Deferred(Deferred),
    /// A request of the same id was already taken (it runs, ran, or waits as a job): this one
    /// did not run.
    Duplicate(Duplicate),
}

/// A request answered as a duplicate of an earlier one of the same id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Duplicate {
    /// The id: the first request's job id, when it was deferred.
    pub job_id: JobId,
    /// Where the first request is.
    pub seen: Seen,
}

impl Duplicate {
    pub(crate) fn new(job_id: JobId, seen: Seen) -> Self {
        Duplicate { job_id, seen }
    }
}

impl<R> Outcome<R> {
    /// The response, if the request ran.
    pub fn done(self) -> Option<R> {
        match self {
            Outcome::Done(response) => Some(response),
            Outcome::Deferred(_) | Outcome::Duplicate(_) => None,
        }
    }

    /// The deferral, if the request was deferred.
    pub fn deferred(&self) -> Option<&Deferred> {
        match self {
            Outcome::Done(_) | Outcome::Duplicate(_) => None,
            Outcome::Deferred(deferred) => Some(deferred),
        }
    }
}

/// A request stored in a delay queue: reported only once the store has it.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deferred {
    /// The job that will carry the request; stays the same across re-deferrals.
    pub job_id: JobId,
    /// When the job becomes due, by the store's clock.
    pub due: SystemTime,
    /// How many times the job was deferred before (0 the first time).
    pub attempt: u32,
    /// The (physical) queue the job is stored on; with it, the job waits in the key's line
    /// and runs as soon as the key is handed to it, its due time being only the fallback.
    pub queue: Option<QueueName>,
    /// The request was already deferred under this job id (an idempotent deferral), or was
    /// dropped as a duplicate of its key's waiting job
    /// ([`Coalesce::first`](crate::strategy::Coalesce::first)): nothing new was stored, and this
    /// describes the existing job.
    pub duplicate: bool,
    /// How many requests the job has carried, this one included when it was kept: 1 for a job
    /// of its own; above 1 when this request replaced an older one's payload in its key's
    /// waiting job ([`Coalesce::latest`](crate::strategy::Coalesce::latest)): the older
    /// request will not run.
    pub revision: u64,
    /// The strategy put the job in its key's line itself (within a cap): the layer does not.
    pub(crate) in_line: bool,
}

/// Every public field; not whether the strategy or the layer put the job in line (it is in its
/// key's line either way when it has a `queue`).
impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("job_id", &self.job_id)
            .field("due", &self.due)
            .field("attempt", &self.attempt)
            .field("queue", &self.queue)
            .field("duplicate", &self.duplicate)
            .field("revision", &self.revision)
            .finish()
    }
}

impl Deferred {
    /// A deferral record, for strategies that store requests themselves.
    pub fn new(job_id: JobId, due: SystemTime, attempt: u32) -> Self {
        Deferred {
            job_id,
            due,
            attempt,
            queue: None,
            duplicate: false,
            revision: 1,
            in_line: false,
        }
    }

    /// The same, stored on `queue`: the job waits in the key's line.
    pub fn in_queue(self, queue: QueueName) -> Self {
        Deferred {
            queue: Some(queue),
            ..self
        }
    }

    /// The same, as the `revision`-th request its job carries.
    pub fn with_revision(self, revision: u64) -> Self {
        Deferred { revision, ..self }
    }

    /// The same, its job already in its key's line.
    pub(crate) fn already_in_line(self) -> Self {
        Deferred {
            in_line: true,
            ..self
        }
    }

    /// The same, marked as a deferral that already existed.
    pub fn as_duplicate(self) -> Self {
        Deferred {
            duplicate: true,
            ..self
        }
    }
}

/// Where the first request of an id is, as a later one finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Seen {
    /// It is being handled now, outside the queue: it runs (its key was free), waits in place
    /// for its key (`Retry`), or is on its way to wait as a job (its key was held; a request
    /// after that finds the job `Waiting`). Its record lives while it does: a process that
    /// dies mid-run leaves the id taken for one hold at most
    /// ([`DEFAULT_HOLD`](crate::idempotency::DEFAULT_HOLD)).
    Running,
    /// It ran directly and finished; kept for the queue's retention.
    Finished,
    /// It is a job waiting to run (deferred, or waiting for another attempt).
    Waiting,
    /// It is a job a scheduler is running.
    InFlight,
    /// It is a job in the dead-letter set.
    Dead,
    /// It is a finished job the queue's retention keeps.
    Done,
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::Deferred;
    use crate::queue::{JobId, QueueName};

    /// A job in its key's line reads as one: the Debug output shows what a caller can read,
    /// not the crate's note of who put the job in line (`in_line: false` misled a reader).
    #[test]
    fn a_deferral_shows_its_public_fields_only() {
        let queue = QueueName::new("orders").unwrap();
        let deferred = Deferred::new(JobId::new("j-1").unwrap(), SystemTime::UNIX_EPOCH, 0)
            .in_queue(queue)
            .already_in_line();
        let shown = format!("{deferred:?}");
        assert!(shown.contains("job_id") && shown.contains("orders") && shown.contains("revision: 1"));
        assert!(!shown.contains("in_line"), "{shown}");
    }
}
