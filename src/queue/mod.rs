//! The delay queue that deferred requests wait in: a sorted set of job ids by due time, the
//! jobs' envelopes, leases for claimed jobs, and a dead-letter set.

mod codec;
mod delay_queue;
mod envelope;
mod error;
mod job_id;
mod name;
mod policy;
mod shards;

pub use self::codec::{Codec, Json};
pub use self::delay_queue::{
    AfterFailure, Claimed, ClaimedJob, DEFAULT_MAX_PAYLOAD, DelayQueue, JobInfo, Lease, ListedEntry,
    Scheduled,
};
pub use self::envelope::Envelope;
pub use self::error::QueueError;
pub use self::job_id::{JobId, MAX_JOB_ID_LEN};
pub(crate) use self::name::QueueKeys;
pub use self::name::{MAX_QUEUE_NAME_LEN, QueueName};
pub use self::policy::RetryPolicy;
pub use self::shards::MAX_SHARDS;
pub(crate) use self::shards::Shards;
