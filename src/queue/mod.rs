//! The delay queue that deferred requests wait in.

mod job_id;

pub use self::job_id::JobId;
