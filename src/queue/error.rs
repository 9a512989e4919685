//! Errors of the delay queue.

use thiserror::Error;

use super::JobId;
use crate::error::{BoxError, StoreError};

/// A delay-queue operation failed. A failed push wrote nothing.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The store failed.
    #[error("queue store failed: {0}")]
    Store(#[from] StoreError),
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
