//! What an operator reads of a queue: one job, the counts, a set page by page, the recent
//! activity.

use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{InspectQueue, JobSet, ListCursor, QueueOperator, QueueStats, RawJobState};
use crate::queue::{Codec, Envelope, JobId, MAX_PAGE, MinuteActivity, QueueError, QueueGroups};

/// One entry of [`QueueOperator::list`].
#[derive(Debug)]
pub struct ListedEntry<T> {
    /// The id as found (another client may have written one that is not a valid job id).
    pub id: String,
    /// When it is due, its lease runs out, it was buried or it finished, by set (see
    /// [`JobSet::time_label`]).
    pub at: SystemTime,
    /// Its envelope, or why it does not decode (`None` when it has no bytes).
    pub envelope: Option<Result<Envelope<T>, String>>,
    /// Why it was buried (dead set only).
    pub reason: Option<String>,
}

impl<T> ListedEntry<T> {
    /// Where the page after this entry starts (see [`QueueOperator::list_after`]).
    pub fn cursor(&self) -> ListCursor {
        ListCursor {
            at: self.at,
            id: self.id.clone(),
        }
    }
}

/// One job as read by [`QueueOperator::job`].
#[derive(Debug)]
pub struct JobInfo<T> {
    /// Where it is.
    pub state: RawJobState,
    /// Its envelope, or why it does not decode (`None` when it has no bytes).
    pub envelope: Option<Result<Envelope<T>, String>>,
}

impl<T, St, Enc> QueueOperator<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: InspectQueue,
    Enc: Codec,
{
    /// Reads one job, decoded when it decodes; `None` when there is no such job.
    pub async fn job(&self, id: &JobId) -> Result<Option<JobInfo<T>>, QueueError> {
        self.queue.read_job(id).await
    }

    /// Counts the queue's jobs, over all its shards.
    pub async fn stats(&self) -> Result<QueueStats, QueueError> {
        let mut total = QueueStats::default();
        for shard in self.queue.shards.names() {
            let stats = self.queue.store().stats(shard).await?;
            total.waiting += stats.waiting;
            total.due += stats.due;
            total.in_flight += stats.in_flight;
            total.dead += stats.dead;
            total.done += stats.done;
            total.paused |= stats.paused;
        }
        Ok(total)
    }

    /// How many due jobs wait for their turn per group ([`JobGroup`](crate::queue::JobGroup);
    /// see [`QueueGroups`] for how it is read), the `most` largest
    /// groups first, over all the queue's shards (a shard's jobs are its own: a group's count
    /// sums its shards'). Exact while each shard has at most [`MAX_PAGE`] groups waiting;
    /// beyond, the counts of the groups each shard reads among its [`MAX_PAGE`] largest.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::{DelayQueue, JobGroup};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "reports")?;
    /// queue.in_group(JobGroup::new("a")?).push_many(&[1, 2, 3], Duration::ZERO).await?;
    /// queue.in_group(JobGroup::new("b")?).push(&4, Duration::ZERO).await?;
    /// let groups = queue.operator().groups(10).await?;
    /// assert_eq!(groups.groups, 2);
    /// assert_eq!((groups.largest[0].group.as_str(), groups.largest[0].waiting), ("a", 3));
    /// # Ok(()) }
    /// ```
    pub async fn groups(&self, most: usize) -> Result<QueueGroups, QueueError> {
        let shards = self.queue.shards.names();
        if let [shard] = shards {
            return Ok(self.queue.store().groups(shard, most).await?);
        }
        let mut waiting: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for shard in shards {
            for group in self.queue.store().groups(shard, MAX_PAGE).await?.largest {
                *waiting.entry(group.group).or_default() += group.waiting;
            }
        }
        Ok(QueueGroups::largest_of(waiting, most))
    }

    /// Up to `limit` entries of `set` (of every shard), oldest first. Bytes that do not decode
    /// are reported as such, never as an error.
    pub async fn list(&self, set: JobSet, limit: usize) -> Result<Vec<ListedEntry<T>>, QueueError> {
        self.list_after(set, None, limit).await
    }

    /// Up to `limit` (at most [`MAX_PAGE`]) entries of `set` (of every shard) in time order,
    /// ties by id, from just after `after`: the last entry of the previous page. A page costs
    /// the same however deep it is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::{DelayQueue, JobSet};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u32, _>::new(MemoryStore::new(), "jobs")?;
    /// queue.push_many(&[1, 2, 3], Duration::from_secs(60)).await?;
    /// let first = queue.operator().list_after(JobSet::Waiting, None, 2).await?;
    /// let next = queue.operator().list_after(JobSet::Waiting, first.last().map(|e| e.cursor()).as_ref(), 2).await?;
    /// assert_eq!((first.len(), next.len()), (2, 1));
    /// # Ok(()) }
    /// ```
    pub async fn list_after(
        &self,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<ListedEntry<T>>, QueueError> {
        let limit = limit.min(MAX_PAGE);
        let mut entries = Vec::new();
        for shard in self.queue.shards.names() {
            for listed in self.queue.store().list(shard, set, after, limit).await? {
                let envelope = listed.envelope.map(|bytes| match JobId::new(listed.id.as_str()) {
                    Ok(id) => self.queue.decode(&id, &bytes),
                    Err(error) => Err(error.to_string()),
                });
                entries.push(ListedEntry {
                    id: listed.id,
                    at: listed.at,
                    envelope,
                    reason: listed.reason,
                });
            }
        }
        entries.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
        entries.truncate(limit);
        Ok(entries)
    }

    /// The queue's activity per minute over the last hour (every shard added up), oldest
    /// first; minutes with nothing counted are left out.
    pub async fn activity(&self) -> Result<Vec<MinuteActivity>, QueueError> {
        let mut minutes: Vec<MinuteActivity> = Vec::new();
        for shard in self.queue.shards.names() {
            for minute in self.queue.store().activity(shard).await? {
                match minutes.iter_mut().find(|known| known.minute == minute.minute) {
                    Some(known) => known.merge(&minute),
                    None => minutes.push(minute),
                }
            }
        }
        minutes.sort_by_key(|minute| minute.minute);
        Ok(minutes)
    }
}
