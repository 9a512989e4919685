//! What a scheduler did, counted.

use serde::Serialize;

/// How one job's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JobEnd {
    /// Handled and acknowledged (or moved by its strategy into another queue).
    Acked,
    /// Failed; waits for another attempt.
    Retrying,
    /// Failed its last attempt; in the dead-letter set.
    Buried,
    /// Given back to the queue unfinished at shutdown.
    Returned,
    /// The store failed under it; put back to wait with a backoff, its attempt not used.
    Postponed,
    /// Its lock was held; it waits in the key's line, its attempt not used.
    Waiting,
    /// The lease ran out before the job was settled; another claimer has it.
    LeaseLost,
    /// The store failed while settling; the job is delivered again after its lease.
    Unsettled,
}

/// What a scheduler did with the jobs it claimed, counted over its run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SchedulerReport {
    /// Jobs handled and acknowledged.
    pub acked: u64,
    /// Failed attempts put back to wait.
    pub retried: u64,
    /// Jobs buried after their last attempt.
    pub buried: u64,
    /// Unfinished jobs given back to the queue at shutdown.
    pub returned: u64,
    /// Jobs put back to wait because the store failed under them (their attempt not used).
    pub postponed: u64,
    /// Runs that met their lock held and went back to wait in line, or their key over its rate
    /// and went back to wait for their slot (their attempt not used).
    pub waited: u64,
    /// Jobs whose lease ran out under us.
    pub lease_lost: u64,
    /// Jobs left to their lease because the store failed while settling them.
    pub unsettled: u64,
}

impl SchedulerReport {
    pub(super) fn record(&mut self, end: JobEnd) {
        let counter = match end {
            JobEnd::Acked => &mut self.acked,
            JobEnd::Retrying => &mut self.retried,
            JobEnd::Buried => &mut self.buried,
            JobEnd::Returned => &mut self.returned,
            JobEnd::Postponed => &mut self.postponed,
            JobEnd::Waiting => &mut self.waited,
            JobEnd::LeaseLost => &mut self.lease_lost,
            JobEnd::Unsettled => &mut self.unsettled,
        };
        *counter += 1;
    }

    /// Adds the counts of `other` (the acker's, of the acks it settled).
    pub(super) fn add(&mut self, other: SchedulerReport) {
        let SchedulerReport {
            acked,
            retried,
            buried,
            returned,
            postponed,
            waited,
            lease_lost,
            unsettled,
        } = other;
        self.acked += acked;
        self.retried += retried;
        self.buried += buried;
        self.returned += returned;
        self.postponed += postponed;
        self.waited += waited;
        self.lease_lost += lease_lost;
        self.unsettled += unsettled;
    }
}
