//! Fair shares across tenants: the group a job is pushed in, and what operators read of the
//! groups.
//!
//! A queue hands out due jobs in due order, so one tenant's backlog makes every other
//! tenant's job wait behind all of it. A job pushed in a [`JobGroup`] waits, once due, in its
//! group's turn instead: claims take the groups' due jobs in turn (start-time fair queuing:
//! each job gets a tag `1 / weight` after its group's previous one, from the lowest tag
//! waiting on), so a group of weight 3 gets three jobs for every one of a group of weight 1
//! while both have due jobs, and a group alone takes every claim (work-conserving). A claim's
//! work is bounded whatever the number of groups and the size of their backlogs: one sorted
//! set of due jobs by tag, read from its head.
//!
//! Every guarantee of the queue stays: one claimer at a time per job, leases, recovery after a
//! crash, the dead-letter set, the key's line; a job handed its key runs at once, ahead of
//! every group's turn (the key is held for it). A queue without grouped jobs runs as before,
//! with no step of the groups'.

use std::fmt;

use crate::error::KeyError;

/// The longest group name, in bytes.
pub const MAX_GROUP_LEN: usize = 256;

/// The largest weight of a group (the Lua scripts apply it too: `MAX_GROUP_WEIGHT`).
pub const MAX_GROUP_WEIGHT: u32 = 1000;

/// The group a job is pushed in (its tenant, customer, account), with the group's weight: the
/// share of the claims it gets while other groups have due jobs too.
///
/// Given at push ([`DelayQueue::in_group`](super::DelayQueue::in_group)) or at deferral
/// ([`Defer::group`](crate::strategy::Defer::group),
/// [`Coalesce::group`](crate::strategy::Coalesce::group)); a job keeps its group across its
/// attempts. The weight is the job's: jobs of one group pushed with different weights each
/// count with their own.
///
/// ```
/// use redefer::queue::JobGroup;
///
/// let tenant = JobGroup::new("tenant-7")?.weight(3)?;
/// assert_eq!((tenant.name(), tenant.share()), ("tenant-7", 3));
/// assert!(JobGroup::new("").is_err());
/// # Ok::<(), redefer::KeyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobGroup {
    name: String,
    weight: u32,
}

impl JobGroup {
    /// The group `name` (any UTF-8 text of 1 to [`MAX_GROUP_LEN`] bytes), of weight 1.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        crate::key::validate_name("job group", &name, MAX_GROUP_LEN)?;
        Ok(JobGroup { name, weight: 1 })
    }

    /// The group with weight `weight`, 1 to [`MAX_GROUP_WEIGHT`]; a weight out of that range
    /// is an error ([`KeyError::GroupWeight`]), not brought into it: a group meant to get
    /// nothing (0) or a share no group can get would run with another than its caller meant.
    ///
    /// ```
    /// use redefer::queue::JobGroup;
    ///
    /// assert_eq!(JobGroup::new("tenant-7")?.weight(3)?.share(), 3);
    /// assert!(JobGroup::new("tenant-7")?.weight(0).is_err());
    /// assert!(JobGroup::new("tenant-7")?.weight(5_000).is_err());
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn weight(self, weight: u32) -> Result<Self, KeyError> {
        if !(1..=MAX_GROUP_WEIGHT).contains(&weight) {
            return Err(KeyError::GroupWeight {
                weight,
                max: MAX_GROUP_WEIGHT,
            });
        }
        Ok(JobGroup { weight, ..self })
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The group's weight.
    pub fn share(&self) -> u32 {
        self.weight
    }

    /// The group as the stores keep it with each job: `<weight> <name>`.
    pub(crate) fn stored(&self) -> String {
        format!("{} {}", self.weight, self.name)
    }
}

impl fmt::Display for JobGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// One group's backlog (see [`QueueGroups`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupWaiting {
    /// The group's name, as found (another client may have written any text).
    pub group: String,
    /// How many of its jobs are due and wait for their group's turn (a job due later counts
    /// once due).
    pub waiting: u64,
}

/// The backlog of a queue per group, the largest groups first (ties by name, the last first):
/// what [`QueueOperator::groups`](super::QueueOperator::groups) reads.
///
/// Read from the groups' turns, not counted job by job (a claim touches no state per group):
/// a group's due jobs hold the start tags from about the lowest tag waiting up to its next
/// tag, `1 / weight` apart, so they number `(next tag - lowest tag) * weight`. Exact while
/// none of a group's due jobs left out of its turn (cancelled, buried or purged while
/// waiting, moved by a debounce, handed its key): such a job counts until its group's turns
/// pass it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueGroups {
    /// How many groups have due jobs (read among the 1,000 groups with the latest turns;
    /// beyond, an upper bound).
    pub groups: u64,
    /// The largest groups, at most as many as asked for.
    pub largest: Vec<GroupWaiting>,
}

impl QueueGroups {
    /// The groups' counts, the largest first.
    pub fn new(groups: u64, largest: Vec<GroupWaiting>) -> Self {
        QueueGroups { groups, largest }
    }

    /// The `most` largest of `counts` (group -> due jobs), ties by name, the last first (as
    /// Redis reads a sorted set backwards), and how many there are: what a store reads, and
    /// what the shards' readings add up to.
    pub(crate) fn largest_of<G: Into<String> + Ord>(
        counts: impl IntoIterator<Item = (G, u64)>,
        most: usize,
    ) -> Self {
        let mut groups: Vec<(G, u64)> = counts.into_iter().collect();
        groups.sort_by(|(a, m), (b, n)| n.cmp(m).then_with(|| b.cmp(a)));
        let total = groups.len() as u64;
        let largest = groups
            .into_iter()
            .take(most)
            .map(|(group, waiting)| GroupWaiting::new(group, waiting))
            .collect();
        QueueGroups::new(total, largest)
    }
}

impl GroupWaiting {
    /// `group` with `waiting` jobs.
    pub fn new(group: impl Into<String>, waiting: u64) -> Self {
        GroupWaiting {
            group: group.into(),
            waiting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_is_brought_into_its_range() {
        let group = JobGroup::new("a").unwrap();
        assert!(group.clone().weight(0).is_err());
        assert!(group.clone().weight(MAX_GROUP_WEIGHT + 1).is_err());
        assert_eq!(
            group.clone().weight(MAX_GROUP_WEIGHT).unwrap().share(),
            MAX_GROUP_WEIGHT
        );
        assert_eq!(group.weight(3).unwrap().stored(), "3 a");
    }

    #[test]
    fn the_lua_side_has_the_same_largest_weight() {
        let prelude = include_str!("../store/redis/lua/queue_prelude.lua");
        assert!(prelude.contains(&format!("local MAX_GROUP_WEIGHT = {MAX_GROUP_WEIGHT}\n")));
    }
}
