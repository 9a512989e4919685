//! The group a deferral puts its request's job in (`Defer::group`, `Coalesce::group`).

use std::sync::Arc;

use crate::queue::{DelayQueue, JobGroup};

/// Derives the group of a request's job (its tenant): `None` leaves the job ungrouped.
pub(crate) type GroupOf<Req> = Arc<dyn Fn(&Req) -> Option<JobGroup> + Send + Sync>;

/// The queue handle a deferral of `request` pushes with: in the request's group when
/// `group_of` gives one.
pub(crate) fn queue_for<Req, St: Clone, Enc: Clone>(
    queue: &DelayQueue<Req, St, Enc>,
    group_of: Option<&GroupOf<Req>>,
    request: &Req,
) -> DelayQueue<Req, St, Enc> {
    match group_of.and_then(|group_of| group_of(request)) {
        Some(group) => queue.in_group(group),
        None => queue.clone(),
    }
}
