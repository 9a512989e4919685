//! Fair shares across groups in the queue's model: the same steps as the groups' part of
//! `queue_prelude.lua` (READY, READY_DUE, GROUPS, GROUP_TAGS, GROUP_WAITING), on maps.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use crate::queue::{JobGroup, JobId, QueueGroups};

/// A start tag: the order in which ready jobs are claimed. `-inf` for a job handed its key.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tag(f64);

impl Eq for Tag {}

impl PartialOrd for Tag {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Tag {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The groups of one queue and its ready jobs.
#[derive(Debug, Clone, Default)]
pub(crate) struct FairShares {
    /// Due jobs of a queue with groups, by start tag (ties by id), and each one's tag.
    ready: BTreeSet<(Tag, JobId)>,
    tag_of: HashMap<JobId, Tag>,
    /// The ready jobs by due time, for listings.
    pub(crate) ready_due: BTreeSet<(i64, JobId)>,
    /// A grouped job's group and weight, while the job is stored.
    groups: HashMap<JobId, (String, u32)>,
    /// The tag of each group's next ready job, by group and weight (`GROUP_TAGS`).
    next_tags: HashMap<(String, u32), f64>,
    /// The virtual time `next_tags` was last pruned at: pruned again only once it moved on.
    pruned_at: f64,
}

impl FairShares {
    /// Whether the queue has groups: grouped jobs stored, or jobs ready. Without, claims take
    /// jobs in due order and nothing here is touched.
    pub(crate) fn on(&self) -> bool {
        !self.groups.is_empty() || !self.ready.is_empty()
    }

    /// Records the group of a new job.
    pub(crate) fn join(&mut self, id: &JobId, group: &JobGroup) {
        self.groups
            .insert(id.clone(), (group.name().to_string(), group.share()));
    }

    /// Forgets the group of a job no longer stored.
    pub(crate) fn forget(&mut self, id: &JobId) {
        self.groups.remove(id);
    }

    /// Makes waiting job `id`, due at `due`, ready: its group's next tag, at least the lowest
    /// tag ready (the virtual time), and its group's next tag `1 / weight` on.
    pub(crate) fn make_ready(&mut self, id: JobId, due: i64) {
        let virtual_time = match self.virtual_time() {
            Some(virtual_time) => {
                if virtual_time > self.pruned_at {
                    self.next_tags.retain(|_, next| *next >= virtual_time);
                    self.pruned_at = virtual_time;
                }
                virtual_time
            }
            None => {
                // Nothing ready: the groups' past turns are forgotten.
                self.next_tags.clear();
                self.pruned_at = 0.0;
                0.0
            }
        };
        // The ungrouped share the turns of one group, with no name.
        let flow = self.groups.get(&id).cloned().unwrap_or((String::new(), 1));
        let weight = f64::from(flow.1);
        let next = self.next_tags.entry(flow).or_insert(virtual_time);
        let tag = next.max(virtual_time);
        *next = tag + 1.0 / weight;
        self.insert(id, Tag(tag), due);
    }

    /// Makes waiting job `id`, due at `due`, ready ahead of every group's turn (its key was
    /// handed to it).
    pub(crate) fn hand_now(&mut self, id: JobId, due: i64) {
        self.unready_at(&id, due);
        self.insert(id, Tag(f64::NEG_INFINITY), due);
    }

    fn insert(&mut self, id: JobId, tag: Tag, due: i64) {
        self.ready.insert((tag, id.clone()));
        self.ready_due.insert((due, id.clone()));
        self.tag_of.insert(id, tag);
    }

    /// Takes `id`, due at `due`, out of the ready jobs; whether it was ready.
    pub(crate) fn unready_at(&mut self, id: &JobId, due: i64) -> bool {
        match self.tag_of.remove(id) {
            Some(tag) => {
                self.ready.remove(&(tag, id.clone()));
                self.ready_due.remove(&(due, id.clone()));
                true
            }
            None => false,
        }
    }

    /// The ready jobs in fair order.
    pub(crate) fn in_order(&self) -> impl Iterator<Item = &JobId> {
        self.ready.iter().map(|(_, id)| id)
    }

    /// How many jobs are ready.
    pub(crate) fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// The `most` largest groups by due jobs waiting for their turn, and how many groups have
    /// due jobs: read from the groups' next tags, as `queue_groups.lua` does.
    pub(crate) fn largest(&self, most: usize) -> QueueGroups {
        let Some(virtual_time) = self.virtual_time() else {
            return QueueGroups::default();
        };
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for ((group, weight), next) in &self.next_tags {
            let count = ((next - virtual_time) * f64::from(*weight) + 1e-6).floor();
            if !group.is_empty() && count >= 1.0 {
                *counts.entry(group).or_default() += count as u64;
            }
        }
        QueueGroups::largest_of(counts, most)
    }

    /// The lowest tag ready (handed jobs aside): the virtual time.
    fn virtual_time(&self) -> Option<f64> {
        self.ready
            .iter()
            .map(|(tag, _)| tag.0)
            .find(|tag| tag.is_finite())
    }
}
