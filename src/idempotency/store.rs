//! What the idempotency guard needs of its store: a record per request id, beside the queue's
//! own records of its jobs.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;
use crate::guard::Seen;
use crate::lock::LockToken;
use crate::queue::{JobId, QueueName, QueueStore};

/// What beginning a request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// No request of this id is known: this one is recorded as running, and goes ahead.
    New,
    /// A request of this id is known, there.
    Duplicate(Seen),
}

/// The request records of a store, on a queue shard (the shard of the id's job).
///
/// Semantics both stores keep, pinned by the tests: `begin` is one atomic step that finds the
/// id as a job (waiting, in flight, dead, or done and retained) or as a request record
/// (running, finished), or records it running for `hold` (the record runs out should its
/// process die: the id is then new again); `extend` keeps a running record for another
/// `hold`; `end` records it finished for `keep`, or forgets it (`None`). A running record is
/// its request's: only that request extends or forgets it (see
/// [`RequestModel`](super::model::RequestModel), the model both keep).
///
/// Sealed, like [`QueueStore`]: the crate's two stores implement it.
pub trait IdempotencyStore: QueueStore {
    /// Finds request `id`, or records it running for `hold` as `request` (a token of the
    /// request's own).
    fn begin_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        hold: Duration,
    ) -> impl Future<Output = Result<Begun, StoreError>> + Send;

    /// Keeps `request`'s running record of `id` for another `hold`: `false` when it is no
    /// longer running (ended, run out, or another request's since).
    fn extend_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        hold: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records `request` of `id` finished for `keep`, or forgets it (`None`) unless the record
    /// is another request's (one that began after `request`'s hold lapsed, or finished).
    fn end_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        keep: Option<Duration>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
