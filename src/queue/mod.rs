//! The delay queue that deferred requests wait in: a sorted set of job ids by due time, the
//! jobs' envelopes, leases for claimed jobs, and a dead-letter set.
//!
//! Producers and workers use [`DelayQueue`] (`produce.rs`: push, cancel; `work.rs`: claim and
//! settle under a [`Lease`]) over the store's [`QueueCore`]; operators use [`QueueOperator`]
//! (the `operator` module: read, pause, requeue, purge) over the store's operator
//! capabilities. [`QueueStore`] is the store with all of them.

mod activity;
mod codec;
pub(crate) mod debounce;
mod delay_queue;
mod envelope;
mod error;
mod group;
mod job_id;
mod lease;
pub mod model;
mod name;
pub mod operator;
mod pending;
mod policy;
mod produce;
mod retention;
pub(crate) mod rules;
mod shards;
mod status;
mod store;
mod wakeups;
mod work;

pub use self::activity::{ACTIVITY_MINUTES, Counters, MinuteActivity};
pub use self::codec::{Codec, Json};
// One public path: `redefer::debounce`.
pub(crate) use self::debounce::Debounce;
pub use self::delay_queue::{DEFAULT_MAX_PAYLOAD, DelayQueue};
pub use self::envelope::Envelope;
pub use self::error::QueueError;
pub use self::group::{GroupWaiting, JobGroup, MAX_GROUP_LEN, MAX_GROUP_WEIGHT, QueueGroups};
pub use self::job_id::JobId;
pub use self::lease::{Claimed, ClaimedJob, Hold, Lease};
pub use self::name::{MAX_QUEUE_NAME_LEN, QueueName};
pub use self::operator::{
    ControlQueue, InspectQueue, JobInfo, JobSet, ListCursor, ListedEntry, QueueOperator, QueueRegistry,
    QueueStats, RawJobState, RegisteredQueue,
};
pub use self::operator::{ListedJob, RawJob};
pub(crate) use self::pending::Joining;
pub use self::pending::{Coalesced, Keep, PendingJob, PendingPush, PendingRules, PendingStore};
pub use self::policy::RetryPolicy;
pub use self::produce::Scheduled;
pub(crate) use self::produce::push_error;
pub use self::retention::Retention;
pub use self::rules::{MAX_JOB_ID_LEN, MAX_LEASE, MAX_PAGE};
pub use self::shards::MAX_SHARDS;
pub(crate) use self::shards::Shards;
pub use self::status::{JobStatus, attempts_in};
pub use self::store::{Cancelled, Due, QueueCore, QueueStore};
pub use self::store::{ClaimBatch, ClaimLimits, RawClaim};
pub use self::wakeups::Wakeups;
pub use self::work::AfterFailure;
