//! Fair shares across groups in the memory store: the same steps as the groups' part of
//! `queue_prelude.lua` (READY, READY_DUE, GROUPS, GROUP_TAGS, GROUP_WAITING), on maps.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use crate::queue::{GroupWaiting, JobGroup, JobId, MAX_GROUP_WEIGHT, QueueGroups};

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
#[derive(Default)]
pub(super) struct FairShares {
    /// Due jobs of a queue with groups, by start tag (ties by id), and each one's tag.
    ready: BTreeSet<(Tag, JobId)>,
    tag_of: HashMap<JobId, Tag>,
    /// The ready jobs by due time, for listings.
    pub(super) ready_due: BTreeSet<(i64, JobId)>,
    /// A grouped job's group and weight, while the job is stored.
    groups: HashMap<JobId, (String, u32)>,
    /// The tag of each group's next ready job.
    next_tags: HashMap<String, f64>,
    /// How many jobs of each group wait.
    waiting: HashMap<String, u64>,
}

impl FairShares {
    /// Whether the queue has groups: grouped jobs stored, or jobs ready. Without, claims take
    /// jobs in due order and nothing here is touched.
    pub(super) fn on(&self) -> bool {
        !self.groups.is_empty() || !self.ready.is_empty()
    }

    /// Records the group of a new job.
    pub(super) fn join(&mut self, id: &JobId, group: &JobGroup) {
        self.groups.insert(
            id.clone(),
            (group.name().to_string(), group.share().min(MAX_GROUP_WEIGHT)),
        );
    }

    /// Forgets the group of a job no longer stored.
    pub(super) fn forget(&mut self, id: &JobId) {
        self.groups.remove(id);
    }

    /// Counts `id` in (or out of) its group's waiting jobs.
    pub(super) fn count(&mut self, id: &JobId, entering: bool) {
        let Some((group, _)) = self.groups.get(id) else {
            return;
        };
        if entering {
            *self.waiting.entry(group.clone()).or_default() += 1;
        } else if let Some(count) = self.waiting.get_mut(group) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.waiting.remove(group);
            }
        }
    }

    /// Makes waiting job `id`, due at `due`, ready: its group's next tag, at least the lowest
    /// tag ready (the virtual time), and its group's next tag `1 / weight` on.
    pub(super) fn make_ready(&mut self, id: JobId, due: i64) {
        let virtual_time = match self.ready.iter().find(|(tag, _)| tag.0.is_finite()) {
            Some((tag, _)) => {
                let virtual_time = tag.0;
                self.next_tags.retain(|_, next| *next >= virtual_time);
                virtual_time
            }
            None => {
                // Nothing ready: the groups' past turns are forgotten.
                self.next_tags.clear();
                0.0
            }
        };
        let (group, weight) = self
            .groups
            .get(&id)
            .map_or((String::new(), 1), |(group, weight)| (group.clone(), *weight));
        let next = self.next_tags.entry(group).or_insert(virtual_time);
        let tag = next.max(virtual_time);
        *next = tag + 1.0 / f64::from(weight);
        self.insert(id, Tag(tag), due);
    }

    /// Makes waiting job `id`, due at `due`, ready ahead of every group's turn (its key was
    /// handed to it).
    pub(super) fn hand_now(&mut self, id: JobId, due: i64) {
        self.unready_at(&id, due);
        self.insert(id, Tag(f64::NEG_INFINITY), due);
    }

    fn insert(&mut self, id: JobId, tag: Tag, due: i64) {
        self.ready.insert((tag, id.clone()));
        self.ready_due.insert((due, id.clone()));
        self.tag_of.insert(id, tag);
    }

    /// Takes `id`, due at `due`, out of the ready jobs; whether it was ready.
    pub(super) fn unready_at(&mut self, id: &JobId, due: i64) -> bool {
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
    pub(super) fn in_order(&self) -> impl Iterator<Item = &JobId> {
        self.ready.iter().map(|(_, id)| id)
    }

    /// How many jobs are ready.
    pub(super) fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// The `most` largest groups by waiting jobs (ties by name, the last first, as Redis
    /// reads a sorted set backwards), and how many groups wait.
    pub(super) fn largest(&self, most: usize) -> QueueGroups {
        let mut groups: Vec<_> = self.waiting.iter().collect();
        groups.sort_by(|(a, m), (b, n)| n.cmp(m).then_with(|| b.cmp(a)));
        let largest = groups
            .into_iter()
            .take(most)
            .map(|(group, waiting)| GroupWaiting::new(group.clone(), *waiting))
            .collect();
        QueueGroups::new(self.waiting.len() as u64, largest)
    }
}
