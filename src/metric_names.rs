//! Metrics, through the [`metrics`] facade: install any recorder (Prometheus, StatsD, ...) and
//! these appear; without one they cost next to nothing.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `redefer_lock_acquired_total` | counter | | locks taken |
//! | `redefer_lock_conflicts_total` | counter | `decision`: `retry`, `reject`, `defer`, `line_full`, `superseded` | held locks met, by what the strategy decided |
//! | `redefer_lock_lost_total` | counter | | handlers stopped because their lock was lost |
//! | `redefer_lock_hold_seconds` | histogram | | from acquire to release |
//! | `redefer_lock_handoffs_total` | counter | | keys handed to the first in line at release |
//! | `redefer_lock_handoff_seconds` | histogram | | from a handoff to the waiter taking the key |
//! | `redefer_lock_reservations_expired_total` | counter | | handoffs whose waiter never came |
//! | `redefer_lock_waiters` | gauge | | the line of the last key a conflict met |
//! | `redefer_permits_in_use` | gauge | | semaphore permits this process holds (a read-write lock's readers and writers too) |
//! | `redefer_read_write_acquired_total` | counter | `access`: `read`, `write` | keys a read-write lock's requests took, by what they do to them |
//! | `redefer_throttle_conflicts_total` | counter | `decision`: `retry`, `reject`, `defer`, `line_full`, `superseded` | requests over their key's rate, by what the strategy decided |
//! | `redefer_throttle_booked_total` | counter | | slots booked ahead (by `Retry` callers and `Defer` jobs) |
//! | `redefer_throttle_delay_seconds` | histogram | | from booking a slot to the slot |
//! | `redefer_throttle_closed_total` | counter | | keys closed by their handlers (an upstream's "retry after") |
//! | `redefer_coalesced_total` | counter | `keep`: `latest`, `first` | deferrals that joined their key's waiting job instead of adding one |
//! | `redefer_debounced_total` | counter | `burst`: `new`, `joined` | requests a debounce deferred, by whether they started a burst's job or joined it |
//! | `redefer_supersede_requests_total` | counter | | requests that asked their key's holders to stop (`Supersede`) |
//! | `redefer_line_dropped_total` | counter | | waiting jobs dropped from a full line to make room for a newer request (buried) |
//! | `redefer_jobs_reinjected_total` | counter | `queue` | jobs a scheduler ran through the stack |
//! | `redefer_jobs_acked_total` | counter | `queue` | jobs handled and acknowledged |
//! | `redefer_jobs_retried_total` | counter | `queue` | failed attempts put back to wait |
//! | `redefer_jobs_lock_waits_total` | counter | `queue` | runs that met their lock held (or their key over its rate) and went back to wait, using no attempt |
//! | `redefer_jobs_buried_total` | counter | `queue` | jobs moved to the dead-letter set |
//! | `redefer_jobs_store_errors_total` | counter | `queue` | runs the store failed under (Redis down, out of memory): not counted as attempts |
//! | `redefer_jobs_postponed_total` | counter | `queue` | jobs put back to wait after a store error, their attempt not used |
//! | `redefer_promotion_lag_seconds` | histogram | `queue` | start of handling minus due time |
//! | `redefer_queue_jobs` | gauge | `queue`, `state`: `waiting`, `in_flight`, `dead` | a scheduler's last look at its queue |
//!
//! `examples/http.rs` serves them in Prometheus's text format.

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use crate::queue::QueueName;
use crate::queue::QueueStats;

pub(crate) const LOCK_ACQUIRED: &str = "redefer_lock_acquired_total";
pub(crate) const LOCK_CONFLICTS: &str = "redefer_lock_conflicts_total";
pub(crate) const LOCK_LOST: &str = "redefer_lock_lost_total";
pub(crate) const LOCK_HOLD: &str = "redefer_lock_hold_seconds";
pub(crate) const LOCK_WAITERS: &str = "redefer_lock_waiters";

/// A key handed to the first in line.
pub(crate) fn handoff() {
    counter!("redefer_lock_handoffs_total").increment(1);
}

/// A waiter took the key reserved for it, `waited` after the handoff.
pub(crate) fn handoff_taken(waited: std::time::Duration) {
    histogram!("redefer_lock_handoff_seconds").record(waited.as_secs_f64());
}

/// A reservation ran out with its waiter never coming.
pub(crate) fn reservation_expired() {
    counter!("redefer_lock_reservations_expired_total").increment(1);
}

/// A conflict, counted by what the strategy decided.
pub(crate) fn conflict(decision: &'static str) {
    counter!(LOCK_CONFLICTS, "decision" => decision).increment(1);
}

/// A deferral that joined its key's waiting job.
pub(crate) fn coalesced(keep: crate::queue::Keep) {
    counter!("redefer_coalesced_total", "keep" => keep.as_str()).increment(1);
}

/// A request a debounce deferred: a new burst's job, or one joined.
pub(crate) fn debounced(joined: bool) {
    let burst = if joined { "joined" } else { "new" };
    counter!("redefer_debounced_total", "burst" => burst).increment(1);
}

/// A request that asked its key's holders to stop.
pub(crate) fn supersede_asked() {
    counter!("redefer_supersede_requests_total").increment(1);
}

/// A waiting job dropped from a full line for a newer request.
pub(crate) fn line_dropped() {
    counter!("redefer_line_dropped_total").increment(1);
}

/// One queue's handles, registered once per scheduler so that the queue label is not built
/// again for every job.
#[derive(Clone)]
pub(crate) struct QueueMetrics {
    pub(crate) reinjected: Counter,
    pub(crate) acked: Counter,
    pub(crate) retried: Counter,
    pub(crate) buried: Counter,
    pub(crate) store_errors: Counter,
    pub(crate) postponed: Counter,
    pub(crate) lock_waits: Counter,
    pub(crate) lag: Histogram,
    waiting: Gauge,
    in_flight: Gauge,
    dead: Gauge,
}

impl QueueMetrics {
    pub(crate) fn new(queue: &QueueName) -> Self {
        let name = queue.as_str().to_string();
        let state =
            |state: &'static str| gauge!("redefer_queue_jobs", "queue" => name.clone(), "state" => state);
        QueueMetrics {
            reinjected: counter!("redefer_jobs_reinjected_total", "queue" => name.clone()),
            acked: counter!("redefer_jobs_acked_total", "queue" => name.clone()),
            retried: counter!("redefer_jobs_retried_total", "queue" => name.clone()),
            buried: counter!("redefer_jobs_buried_total", "queue" => name.clone()),
            store_errors: counter!("redefer_jobs_store_errors_total", "queue" => name.clone()),
            postponed: counter!("redefer_jobs_postponed_total", "queue" => name.clone()),
            lock_waits: counter!("redefer_jobs_lock_waits_total", "queue" => name.clone()),
            lag: histogram!("redefer_promotion_lag_seconds", "queue" => name.clone()),
            waiting: state("waiting"),
            in_flight: state("in_flight"),
            dead: state("dead"),
        }
    }

    pub(crate) fn record_stats(&self, stats: QueueStats) {
        self.waiting.set(stats.waiting as f64);
        self.in_flight.set(stats.in_flight as f64);
        self.dead.set(stats.dead as f64);
    }
}
