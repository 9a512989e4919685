//! One logical queue over several physical queues ("shards"), each under its own hash tag, so
//! that on Redis Cluster the shards live on different nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{JobId, QueueName};
use crate::error::KeyError;
use crate::key::{HASH_SLOTS, LockKey, hash_slot};

/// The most shards a queue may have.
pub const MAX_SHARDS: usize = 1024;

/// The physical queues of one logical queue, and where the next claim round starts.
#[derive(Debug, Clone)]
pub(crate) struct Shards {
    names: Arc<[QueueName]>,
    next_claim: Arc<AtomicUsize>,
}

impl Shards {
    /// One shard: the queue itself, under its own name.
    pub(crate) fn single(name: QueueName) -> Self {
        Shards {
            names: Arc::from([name]),
            next_claim: Arc::default(),
        }
    }

    /// `count` shards of `name`. Shard `i` is named `<name>#<i>.<k>`, with the smallest `k` that
    /// puts its hash slot in the `i`-th `count`-th of the slot space: `redis-cli --cluster
    /// create` gives masters equal ranges of slots, so the shards spread over the masters. The
    /// names depend on `name` and `count` only, so every process computes the same ones.
    pub(crate) fn split(name: &QueueName, count: usize) -> Result<Self, KeyError> {
        if !(1..=MAX_SHARDS).contains(&count) {
            return Err(KeyError::ShardCount {
                count,
                max: MAX_SHARDS,
            });
        }
        if count == 1 {
            return Ok(Shards::single(name.clone()));
        }
        let slots = usize::from(HASH_SLOTS);
        let names = (0..count)
            .map(|i| {
                let range = i * slots / count..(i + 1) * slots / count;
                let shard = |k: usize| format!("{name}#{i}.{k}");
                // About `count` tries each; the bound only guards against the impossible.
                let k = (0..count * 1000)
                    .find(|&k| range.contains(&usize::from(hash_slot(&shard(k)))))
                    .unwrap_or(0);
                QueueName::new(shard(k))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Shards {
            names: names.into(),
            next_claim: Arc::default(),
        })
    }

    pub(crate) fn names(&self) -> &[QueueName] {
        &self.names
    }

    /// The shard a job lives on: a stable hash of its id (FNV-1a), the same in every process.
    pub(crate) fn of(&self, id: &JobId) -> &QueueName {
        &self.names[self.index_of(id)]
    }

    /// The position in [`names`](Self::names) of the shard a job lives on.
    pub(crate) fn index_of(&self, id: &JobId) -> usize {
        self.index_of_text(id.as_str())
    }

    /// The shard that holds `key`'s pending job (see [`PendingStore`](super::PendingStore)):
    /// the same stable hash, of the key, so that every deferral for it looks in one place.
    pub(crate) fn of_key(&self, key: &LockKey) -> &QueueName {
        &self.names[self.index_of_text(key.as_str())]
    }

    /// A fresh random job id that lives on `key`'s shard: random ids, drawn until one hashes
    /// there (about as many draws as there are shards; a few nanoseconds each).
    pub(crate) fn random_id_for_key(&self, key: &LockKey) -> JobId {
        let shard = self.index_of_text(key.as_str());
        loop {
            let id = JobId::random();
            if self.index_of(&id) == shard {
                return id;
            }
        }
    }

    /// FNV-1a of `text`, modulo the shard count.
    fn index_of_text(&self, text: &str) -> usize {
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        (hash % self.names.len() as u64) as usize
    }

    /// The shards in the order the next claim round visits them: each round starts one shard
    /// further, so that none is always served last.
    pub(crate) fn claim_order(&self) -> impl Iterator<Item = &QueueName> {
        let start = self.next_claim.fetch_add(1, Ordering::Relaxed);
        let count = self.names.len();
        (0..count).map(move |k| &self.names[(start + k) % count])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_the_slot_space_evenly_and_deterministically() {
        let name = QueueName::new("orders").unwrap();
        let shards = Shards::split(&name, 3).unwrap();
        let slots: Vec<u16> = shards.names().iter().map(|n| hash_slot(n.as_str())).collect();
        assert!(
            slots[0] < 5461 && (5461..10923).contains(&slots[1]) && slots[2] >= 10923,
            "{slots:?}"
        );
        let again = Shards::split(&name, 3).unwrap();
        assert_eq!(shards.names(), again.names());
        assert_eq!(Shards::split(&name, 1).unwrap().names(), [name]);
        assert!(Shards::split(&QueueName::new("q").unwrap(), 0).is_err());
    }

    #[test]
    fn jobs_spread_over_shards_and_claims_rotate() {
        let shards = Shards::split(&QueueName::new("orders").unwrap(), 4).unwrap();
        let mut per_shard = std::collections::HashMap::new();
        for _ in 0..4000 {
            *per_shard.entry(shards.of(&JobId::random()).clone()).or_insert(0) += 1;
        }
        assert_eq!(per_shard.len(), 4);
        assert!(per_shard.values().all(|&n| n > 800), "{per_shard:?}");
        let key = LockKey::new("order:7").unwrap();
        for _ in 0..100 {
            assert_eq!(shards.of(&shards.random_id_for_key(&key)), shards.of_key(&key));
        }
        let first: Vec<_> = shards.claim_order().cloned().collect();
        let second: Vec<_> = shards.claim_order().cloned().collect();
        assert_eq!(first[1], second[0]);
    }
}
