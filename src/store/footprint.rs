//! What a store holds under its prefix, by kind of key: how an operator checks that Redis
//! keeps only what is in use (see [`lifetimes`](super::lifetimes)).

use std::collections::BTreeMap;

use std::future::Future;

use serde::Serialize;

use super::lifetimes::{Lifetime, lifetime_of};

/// The keys found under a prefix, by kind ([`RedisStore::footprint`](super::RedisStore::footprint)).
///
/// ```
/// use redefer::store::footprint::Footprint;
///
/// let mut footprint = Footprint::default();
/// footprint.count("redefer", "redefer:fence:{order-1}", Some(60_000));
/// footprint.count("redefer", "redefer:q:{mail}:delayed", None);
/// assert_eq!(footprint.kinds["fence"].keys, 1);
/// assert_eq!(footprint.never_expire(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Footprint {
    /// Kind (`fence`, `q:delayed`, ...; see the guide's key tables) -> what was found of it.
    pub kinds: BTreeMap<String, KindFootprint>,
    /// Keys looked at under the prefix.
    pub scanned: u64,
    /// Whether the scan went through the whole keyspace (`false`: it stopped at its bound).
    pub complete: bool,
}

/// The keys of one kind under a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct KindFootprint {
    /// How many keys of the kind were found.
    pub keys: u64,
    /// How many of them have no expiry.
    pub never_expire: u64,
    /// The longest time to live among those with an expiry, in ms (0: none has one).
    pub longest_ttl_ms: u64,
    /// How long a key of the kind is meant to live.
    #[serde(serialize_with = "as_text")]
    pub lifetime: Lifetime,
}

fn as_text<S: serde::Serializer>(lifetime: &Lifetime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(lifetime)
}

impl Footprint {
    /// Counts the key `name` found under `prefix`, which expires in `ttl_ms` (`None`: never).
    /// A name that is not one of redefer's is counted under `other`.
    pub fn count(&mut self, prefix: &str, name: &str, ttl_ms: Option<u64>) {
        let kind = super::lifetimes::kind_of(prefix, name).unwrap_or_else(|| "other".to_string());
        let lifetime = lifetime_of(&kind);
        let entry = self.kinds.entry(kind).or_insert(KindFootprint {
            keys: 0,
            never_expire: 0,
            longest_ttl_ms: 0,
            lifetime,
        });
        entry.keys += 1;
        match ttl_ms {
            Some(ttl) => entry.longest_ttl_ms = entry.longest_ttl_ms.max(ttl),
            None => entry.never_expire += 1,
        }
        self.scanned += 1;
    }

    /// Keys found in all.
    pub fn keys(&self) -> u64 {
        self.kinds.values().map(|kind| kind.keys).sum()
    }

    /// Keys found without an expiry.
    pub fn never_expire(&self) -> u64 {
        self.kinds.values().map(|kind| kind.never_expire).sum()
    }

    /// Keys without an expiry whose kind is meant to expire: what would grow with the keys
    /// used, should there be any.
    pub fn unbounded(&self) -> u64 {
        self.kinds
            .values()
            .filter(|kind| !matches!(kind.lifetime, Lifetime::WithQueue))
            .map(|kind| kind.never_expire)
            .sum()
    }
}

/// A store whose footprint can be counted: [`RedisStore`](super::RedisStore) on one server
/// (its [`footprint`](super::RedisStore::footprint)) or on a cluster (its
/// [`cluster_footprint`](super::RedisStore::cluster_footprint)), for tools that take either.
pub trait ScanFootprint {
    /// Every key under the store's prefix, counted by kind, looking at `max_keys` at most.
    fn scan_footprint(
        &self,
        max_keys: u64,
    ) -> impl Future<Output = Result<Footprint, crate::StoreError>> + Send;

    /// The prefixes (any, not only the store's) under which queues registered, looking at
    /// `max_keys` keys at most: where to look when a prefix holds nothing.
    fn scan_prefixes(
        &self,
        max_keys: u64,
    ) -> impl Future<Output = Result<std::collections::BTreeSet<String>, crate::StoreError>> + Send;
}
