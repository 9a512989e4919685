//! Where a deferring strategy ([`Defer`](super::Defer), [`Coalesce`](super::Coalesce)) puts a
//! request's job: its queue, in the request's group, within the key's line's cap.

use std::sync::Arc;

use crate::guard::LineCap;
use crate::queue::{DelayQueue, JobGroup};

/// Derives the group of a request's job (its tenant): `None` leaves the job ungrouped.
type GroupOf<Req> = Arc<dyn Fn(&Req) -> Option<JobGroup> + Send + Sync>;

/// Where a deferral puts its jobs: what the deferring strategies share.
pub(super) struct JobTarget<Req, St, Enc> {
    pub(super) queue: DelayQueue<Req, St, Enc>,
    group_of: Option<GroupOf<Req>>,
    pub(super) line_cap: Option<LineCap>,
}

impl<Req, St, Enc> JobTarget<Req, St, Enc> {
    /// Jobs in `queue`, ungrouped, the line uncapped.
    pub(super) fn new(queue: DelayQueue<Req, St, Enc>) -> Self {
        JobTarget {
            queue,
            group_of: None,
            line_cap: None,
        }
    }

    /// Each job in the group `group_of` gives for its request.
    pub(super) fn grouped(self, group_of: impl Fn(&Req) -> Option<JobGroup> + Send + Sync + 'static) -> Self {
        JobTarget {
            group_of: Some(Arc::new(group_of)),
            ..self
        }
    }

    /// The key's line capped at `cap`.
    pub(super) fn capped(self, cap: LineCap) -> Self {
        JobTarget {
            line_cap: Some(cap),
            ..self
        }
    }

    /// The queue handle a deferral of `request` pushes with: in the request's group when it
    /// has one.
    pub(super) fn queue_for(&self, request: &Req) -> DelayQueue<Req, St, Enc>
    where
        St: Clone,
        Enc: Clone,
    {
        match self.group_of.as_ref().and_then(|group_of| group_of(request)) {
            Some(group) => self.queue.in_group(group),
            None => self.queue.clone(),
        }
    }
}

impl<Req, St: Clone, Enc: Clone> Clone for JobTarget<Req, St, Enc> {
    fn clone(&self) -> Self {
        JobTarget {
            queue: self.queue.clone(),
            group_of: self.group_of.clone(),
            line_cap: self.line_cap,
        }
    }
}

impl<Req, St, Enc> std::fmt::Debug for JobTarget<Req, St, Enc> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTarget")
            .field("queue", &self.queue)
            .field("group_of", &self.group_of.is_some())
            .field("line_cap", &self.line_cap)
            .finish()
    }
}
