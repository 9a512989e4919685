//! The request records' state machine, in plain Rust: what `lua/request_record.lua` does
//! beside a queue shard's jobs (its header names this model; `tests/queue_model.rs` checks the
//! two agree), and what the in-memory store keeps per queue under the queue's mutex.
//!
//! A request id is a job of the queue (the queue's own model says where), or has a record
//! (running for its hold, renewed while it runs; finished for the queue's retention), or is
//! new. Time is the store's clock, from any origin, passed in.

use std::collections::HashMap;
use std::time::Duration;

use super::{Begun, Seen};
use crate::queue::{JobId, JobSet};

/// The request records of one queue shard: each id's record and when it runs out.
#[derive(Debug, Clone, Default)]
pub struct RequestModel {
    records: HashMap<JobId, (Seen, Duration)>,
    /// How many records the last sweep kept: the next sweeps when twice as many (at least
    /// 64) are kept, so that records of ids never asked again are forgotten.
    swept_at: usize,
}

impl RequestModel {
    /// Begins request `id`: a duplicate when the queue holds it as a job (`as_job`, the set it
    /// is in) or its record lives, else recorded running for `hold`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::idempotency::{Begun, Seen};
    /// use redefer::idempotency::model::RequestModel;
    /// use redefer::queue::JobId;
    ///
    /// let (mut records, id, hold) = (RequestModel::default(), JobId::new("order-7")?, Duration::from_secs(30));
    /// assert_eq!(records.begin(&id, None, hold, Duration::ZERO), Begun::New);
    /// assert_eq!(records.begin(&id, None, hold, Duration::from_secs(1)), Begun::Duplicate(Seen::Running));
    /// // A process that died mid-run leaves the id taken for one hold at most.
    /// assert_eq!(records.begin(&id, None, hold, Duration::from_secs(31)), Begun::New);
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn begin(&mut self, id: &JobId, as_job: Option<JobSet>, hold: Duration, now: Duration) -> Begun {
        let found = as_job.map(seen_as_job).or_else(|| {
            self.records
                .get(id)
                .filter(|(_, until)| *until > now)
                .map(|(seen, _)| *seen)
        });
        match found {
            Some(seen) => Begun::Duplicate(seen),
            None => {
                self.set(id, Seen::Running, now + hold, now);
                Begun::New
            }
        }
    }

    /// Keeps request `id`'s running record for another `hold`; `false` when it has none.
    pub fn extend(&mut self, id: &JobId, hold: Duration, now: Duration) -> bool {
        match self.records.get_mut(id) {
            Some((Seen::Running, until)) if *until > now => {
                *until = now + hold;
                true
            }
            _ => false,
        }
    }

    /// Ends request `id`: finished for `keep`, or forgotten (`None`, or no time to keep it).
    pub fn end(&mut self, id: &JobId, keep: Option<Duration>, now: Duration) {
        match keep {
            Some(keep) if !keep.is_zero() => self.set(id, Seen::Finished, now + keep, now),
            _ => {
                self.records.remove(id);
            }
        }
    }

    /// What the model holds of `id`: its record and when it runs out (perhaps already), if it
    /// has one.
    pub fn record(&self, id: &JobId) -> Option<(Seen, Duration)> {
        self.records.get(id).copied()
    }

    fn set(&mut self, id: &JobId, seen: Seen, until: Duration, now: Duration) {
        self.records.insert(id.clone(), (seen, until));
        if self.records.len() >= 2 * self.swept_at.max(64) {
            self.records.retain(|_, (_, until)| *until > now);
            self.swept_at = self.records.len();
        }
    }
}

/// What a request finds of an id that is a job in `set`.
fn seen_as_job(set: JobSet) -> Seen {
    match set {
        JobSet::Waiting => Seen::Waiting,
        JobSet::InFlight => Seen::InFlight,
        JobSet::Dead => Seen::Dead,
        JobSet::Done => Seen::Done,
    }
}
