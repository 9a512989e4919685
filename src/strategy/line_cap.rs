//! A deferring strategy's cap on its key's line: the job it stored takes a place within the
//! cap, or the request is refused (the job deleted), or the oldest jobs make room.

use super::{Conflict, Decision};
use crate::error::BoxError;
use crate::guard::{LineCap, LineJoin, SUPERSEDED_BY_NEWER, Waiter};
use crate::metric_names;
use crate::queue::{Cancelled, Codec, DelayQueue, JobId, QueueName, QueueStore};

/// Puts the job `id`, just stored on `shard`, in the line of `conflict`'s key within `cap`.
/// `None` when it is in line (the jobs evicted for it buried with
/// [`SUPERSEDED_BY_NEWER`]); the [`Decision::LineFull`] to answer when the line is full, the job
/// then deleted (unless a scheduler claimed it meanwhile: then it runs, and `None`).
///
/// The layer must not put the job in line again
/// ([`Deferred::already_in_line`](crate::guard::Deferred::already_in_line)): evicted
/// meanwhile by a newer request, it would come back behind it, over the cap. The job is
/// stored either way, so a store that fails here fails nothing: the job runs at its fallback
/// due time, and a job it could not bury runs too (at-least-once, never lost).
pub(super) async fn take_place<Req, St, Enc>(
    queue: &DelayQueue<Req, St, Enc>,
    conflict: &Conflict,
    cap: LineCap,
    shard: &QueueName,
    id: &JobId,
) -> Result<Option<Decision>, BoxError>
where
    St: QueueStore,
    Enc: Codec,
{
    // A throttle has no line: its bookings are its order.
    let Some(line) = conflict.line() else {
        return Ok(None);
    };
    let joined = match line.join(Waiter::job(shard, id), cap).await {
        Ok(joined) => joined,
        Err(error) => {
            tracing::warn!(%error, key = %conflict.key, "the deferred job could not join the line");
            return Ok(None);
        }
    };
    match joined {
        LineJoin::Joined { evicted, .. } => {
            for gone in evicted {
                let Some((gone_id, gone_queue)) = gone.as_job() else {
                    continue;
                };
                let store = queue.store();
                match store
                    .bury_waiting(&gone_queue, &gone_id, SUPERSEDED_BY_NEWER, queue.counters())
                    .await
                {
                    Ok(true) => metric_names::line_dropped(),
                    // Claimed meanwhile: it runs.
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, job = %gone_id, "a job dropped from a full line could not be buried; it runs at its fallback");
                    }
                }
            }
            Ok(None)
        }
        LineJoin::Full { waiting } => match queue.store().cancel(shard, id).await? {
            Cancelled::InFlight => Ok(None),
            Cancelled::Deleted | Cancelled::NotFound => Ok(Some(Decision::LineFull {
                waiting,
                retry_after: conflict.retry_after,
            })),
        },
    }
}
