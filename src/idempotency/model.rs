//! The request records' state machine, in plain Rust: what `lua/request_record.lua` does
//! beside a queue shard's jobs (its header names this model; `tests/queue_model.rs` checks the
//! two agree), and what the in-memory store keeps per queue under the queue's mutex.
//!
//! A request id is a job of the queue (the queue's own model says where), or has a record
//! (running for its hold, renewed while it runs; finished for the queue's retention), or is
//! new. A running record is its request's, by the request's token: only that request renews
//! or forgets it. (A request whose hold lapsed, paused past it, may find another's record
//! there when it comes back: forgetting it would let a third run beside that one.) A request
//! that finished is recorded finished whatever record was there. Time is the store's clock,
//! from any origin, passed in; a retention shorter than the hold would let a request run
//! beside one whose running record a finish replaced.

use std::collections::HashMap;
use std::time::Duration;

use super::{Begun, Seen};
use crate::lock::LockToken;
use crate::queue::{JobId, JobSet};

/// The request records of one queue shard: each id's record, the request it is of (a running
/// one's), and when it runs out.
#[derive(Debug, Clone, Default)]
pub struct RequestModel {
    records: HashMap<JobId, Record>,
    /// How many records the last sweep kept: the next sweeps when twice as many (at least
    /// 64) are kept, so that records of ids never asked again are forgotten.
    swept_at: usize,
}

impl RequestModel {
    /// Begins request `id` as `request`: a duplicate when the queue holds it as a job
    /// (`as_job`, the set it is in) or its record lives, else recorded running for `hold`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::idempotency::{Begun, Seen};
    /// use redefer::idempotency::model::RequestModel;
    /// use redefer::lock::LockToken;
    /// use redefer::queue::JobId;
    ///
    /// let (mut records, id, hold) = (RequestModel::default(), JobId::new("order-7")?, Duration::from_secs(30));
    /// let (first, second) = (LockToken::random(), LockToken::random());
    /// assert_eq!(records.begin(&id, None, first, hold, Duration::ZERO), Begun::New);
    /// assert_eq!(records.begin(&id, None, second, hold, Duration::from_secs(1)), Begun::Duplicate(Seen::Running));
    /// // A process that died mid-run leaves the id taken for one hold at most.
    /// assert_eq!(records.begin(&id, None, second, hold, Duration::from_secs(31)), Begun::New);
    /// // The first, back from a pause past its hold, neither renews nor ends the second's run.
    /// assert!(!records.extend(&id, first, hold, Duration::from_secs(32)));
    /// records.end(&id, first, None, Duration::from_secs(32));
    /// assert!(records.extend(&id, second, hold, Duration::from_secs(33)));
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn begin(
        &mut self,
        id: &JobId,
        as_job: Option<JobSet>,
        request: LockToken,
        hold: Duration,
        now: Duration,
    ) -> Begun {
        let found = as_job
            .map(seen_as_job)
            .or_else(|| self.live(id, now).map(|record| record.seen));
        match found {
            Some(seen) => Begun::Duplicate(seen),
            None => {
                self.set(id, Seen::Running, Some(request), now + hold, now);
                Begun::New
            }
        }
    }

    /// Keeps `request`'s running record of `id` for another `hold`; `false` when it has none
    /// (ended, run out, or another request's now).
    pub fn extend(&mut self, id: &JobId, request: LockToken, hold: Duration, now: Duration) -> bool {
        match self.records.get_mut(id) {
            Some(record) if record.until > now && record.request == Some(request) => {
                record.until = now + hold;
                true
            }
            _ => false,
        }
    }

    /// Ends `request` of `id`: finished for `keep` (whoever's record was there: the id ran to
    /// its end, which a later request must find), or forgotten (`None`, or no time to keep
    /// it), unless the live record is another request's (begun after ours lapsed, or finished
    /// since): forgetting it would let a third run beside that one, or run again.
    pub fn end(&mut self, id: &JobId, request: LockToken, keep: Option<Duration>, now: Duration) {
        match keep {
            Some(keep) if !keep.is_zero() => self.set(id, Seen::Finished, None, now + keep, now),
            _ => {
                if self
                    .live(id, now)
                    .is_none_or(|record| record.request == Some(request))
                {
                    self.records.remove(id);
                }
            }
        }
    }

    /// What the model holds of `id`: its record, the request it is of (a running one's), and
    /// when it runs out (perhaps already), if it has one.
    pub fn record(&self, id: &JobId) -> Option<(Seen, Option<LockToken>, Duration)> {
        self.records
            .get(id)
            .map(|record| (record.seen, record.request, record.until))
    }

    fn live(&self, id: &JobId, now: Duration) -> Option<&Record> {
        self.records.get(id).filter(|record| record.until > now)
    }

    fn set(&mut self, id: &JobId, seen: Seen, request: Option<LockToken>, until: Duration, now: Duration) {
        self.records.insert(id.clone(), Record { seen, request, until });
        if self.records.len() >= 2 * self.swept_at.max(64) {
            self.records.retain(|_, record| record.until > now);
            self.swept_at = self.records.len();
        }
    }
}

/// One id's record.
#[derive(Debug, Clone, Copy)]
struct Record {
    seen: Seen,
    /// The request a running record is of.
    request: Option<LockToken>,
    until: Duration,
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
