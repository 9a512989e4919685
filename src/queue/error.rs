//! Errors of the delay queue.

use thiserror::Error;

use super::JobId;
use crate::error::{BoxError, StoreError};

/// A delay-queue operation failed.
///
/// What a failed push tells the caller: [`Unconfirmed`](QueueError::Unconfirmed) means the job
/// may be stored (and will then run); every other error means nothing was written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The store failed; for a push, it proves that nothing was written.
    #[error("queue store failed: {0}")]
    Store(#[from] StoreError),
    /// A push was sent but its reply never came (the connection dropped or timed out): the job
    /// may be stored. Pushed with an id of the caller's
    /// ([`push_with_id`](super::DelayQueue::push_with_id)), it is safe to push again: a second
    /// push stores nothing and fails with [`DuplicateId`](QueueError::DuplicateId) if the
    /// first one was stored.
    #[error("the push may or may not be stored (no reply from the store): {0}")]
    Unconfirmed(#[source] StoreError),
    /// The store is full (Redis at its `maxmemory`): the push was refused and wrote nothing.
    /// Locks, claims and acknowledgements still work, so the queue drains and room returns.
    #[error("the queue store is full, the job was not stored: {0}")]
    Full(#[source] StoreError),
    /// The job could not be encoded.
    #[error("cannot encode the job: {0}")]
    Encode(#[source] BoxError),
    /// The encoded job is over the queue's payload limit.
    #[error("the job is {size} bytes encoded, over the queue's limit of {max} bytes")]
    TooLarge {
        /// The encoded size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A job with this id is already in the queue.
    #[error("a job with id {0} is already in the queue")]
    DuplicateId(JobId),
}
