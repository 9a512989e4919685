//! The delay queue that deferred requests wait in: a sorted set of job ids by due time, the
//! jobs' envelopes, leases for claimed jobs, and a dead-letter set.
//!
//! Everything a user of the queue needs is here: [`DelayQueue`] and its results, the
//! [`QueueStore`] operations a store provides, and their vocabulary.

mod activity;
mod codec;
mod controls;
mod delay_queue;
mod envelope;
mod error;
mod job_id;
mod name;
mod pending;
mod policy;
mod retention;
pub(crate) mod rules;
mod shards;
mod status;
mod store;
mod wakeups;

pub use self::activity::{ACTIVITY_MINUTES, Counters, MinuteActivity};
pub use self::codec::{Codec, Json};
pub use self::delay_queue::{
    AfterFailure, Claimed, ClaimedJob, DEFAULT_MAX_PAYLOAD, DelayQueue, JobInfo, Lease, ListedEntry,
    Scheduled,
};
pub use self::envelope::Envelope;
pub use self::error::QueueError;
pub use self::job_id::JobId;
pub use self::name::{MAX_QUEUE_NAME_LEN, QueueName};
pub(crate) use self::pending::Joining;
pub use self::pending::{Coalesced, Keep, PendingPush, PendingRules, PendingStore};
pub use self::policy::RetryPolicy;
pub use self::retention::Retention;
pub use self::rules::{MAX_JOB_ID_LEN, MAX_LEASE, MAX_PAGE};
pub use self::shards::MAX_SHARDS;
pub(crate) use self::shards::Shards;
pub use self::status::{JobStatus, attempts_in};
pub use self::store::{
    Cancelled, Due, JobSet, ListCursor, QueueStats, QueueStore, RawJobState, RegisteredQueue,
};
#[doc(hidden)]
pub use self::store::{ClaimBatch, ClaimLimits, ListedJob, RawClaim, RawJob};
pub use self::wakeups::Wakeups;
