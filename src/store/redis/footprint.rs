//! The footprint of a Redis store: every key under its prefix, counted by kind, with how many
//! have no expiry. A bounded `SCAN` (pages of 1,000, at most `max_keys` keys), so it is safe
//! to run against a large production Redis.

use std::collections::BTreeSet;
use std::future::Future;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;

use super::locks::{ScanPage, glob_escape, masters};
use super::{ClusterNodesConnection, ManagedClusterConnection, RedisStore};
use crate::error::StoreError;
use crate::store::RedisConnection;
use crate::store::footprint::{Footprint, ScanFootprint};

/// Keys per `SCAN` page, and per pipeline of `PTTL`s.
const PAGE: usize = 1000;

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// Every key under this store's prefix on the server it is connected to, counted by kind,
    /// looking at `max_keys` keys at most (on Redis Cluster, use
    /// [`cluster_footprint`](RedisStore::cluster_footprint), which scans every master).
    ///
    /// ```no_run
    /// use redefer::RedisStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), redefer::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let footprint = store.footprint(1_000_000).await?;
    /// for (kind, found) in &footprint.kinds {
    ///     println!("{kind}: {} keys, {} without expiry", found.keys, found.never_expire);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn footprint(&self, max_keys: u64) -> Result<Footprint, StoreError> {
        let mut footprint = Footprint::default();
        let conn = self.conn.clone();
        self.scan_into(&mut footprint, max_keys, |commands| {
            let mut conn = conn.clone();
            async move { conn.req_packed_commands(&commands, 0, commands.len()).await }
        })
        .await?;
        Ok(footprint)
    }

    /// Scans the keys under the prefix into `footprint`, sending each pipeline with `run` (to
    /// one server), until the cursor comes back to 0 or `max_keys` were looked at.
    async fn scan_into<Run, Fut>(
        &self,
        footprint: &mut Footprint,
        max_keys: u64,
        mut run: Run,
    ) -> Result<(), StoreError>
    where
        Run: FnMut(redis::Pipeline) -> Fut,
        Fut: Future<Output = redis::RedisResult<Vec<redis::Value>>>,
    {
        let prefix = self.prefix.as_str();
        let pattern = format!("{}:*", glob_escape(prefix));
        let mut cursor = 0u64;
        loop {
            let (next, found) = scan_page(&mut run, &pattern, cursor).await?;
            if !found.is_empty() {
                // The TTLs of a page in one round trip.
                let mut ttls = redis::pipe();
                for name in &found {
                    ttls.cmd("PTTL").arg(name);
                }
                let ttls = run(ttls).await?;
                for (name, ttl) in found.iter().zip(ttls) {
                    let ttl: i64 = redis::from_redis_value(ttl).map_err(unexpected)?;
                    // Counted by what of its name reads (its kind is in the ASCII part).
                    let name = String::from_utf8_lossy(name);
                    // -2: gone since the scan; -1: no expiry.
                    match ttl {
                        -2 => {}
                        -1 => footprint.count(prefix, &name, None),
                        ttl => footprint.count(prefix, &name, Some(ttl.unsigned_abs())),
                    }
                }
            }
            cursor = next;
            if cursor == 0 {
                footprint.complete = true;
                return Ok(());
            }
            if footprint.scanned >= max_keys {
                return Ok(());
            }
        }
    }
}

/// One page of `SCAN` from `cursor` for the keys matching `pattern`.
async fn scan_page<Run, Fut>(run: &mut Run, pattern: &str, cursor: u64) -> Result<ScanPage, StoreError>
where
    Run: FnMut(redis::Pipeline) -> Fut,
    Fut: Future<Output = redis::RedisResult<Vec<redis::Value>>>,
{
    let mut scan = redis::pipe();
    scan.cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(PAGE);
    let page = run(scan).await?.pop().unwrap_or(redis::Value::Nil);
    redis::from_redis_value(page).map_err(unexpected)
}

/// The prefixes under which queues registered (their registry, `<prefix>:queues`), found by a
/// `SCAN` of at most `max_keys` keys with `run`: for a tool pointed at a prefix that holds
/// nothing, where to look instead.
async fn scan_prefixes<Run, Fut>(
    max_keys: u64,
    mut run: Run,
    found: &mut BTreeSet<String>,
) -> Result<(), StoreError>
where
    Run: FnMut(redis::Pipeline) -> Fut,
    Fut: Future<Output = redis::RedisResult<Vec<redis::Value>>>,
{
    let (mut cursor, mut looked) = (0u64, 0u64);
    loop {
        let (next, names) = scan_page(&mut run, "*:queues", cursor).await?;
        // COUNT is how many keys a page looks at, matching or not.
        looked += PAGE as u64;
        // A prefix that is not UTF-8 is not one a tool could be pointed at: left out.
        found.extend(names.iter().filter_map(|name| {
            std::str::from_utf8(name)
                .ok()?
                .strip_suffix(":queues")
                .map(str::to_string)
        }));
        cursor = next;
        if cursor == 0 || looked >= max_keys {
            return Ok(());
        }
    }
}

/// A reply of `SCAN` or `PTTL` of another shape than theirs.
fn unexpected(error: redis::ParsingError) -> StoreError {
    StoreError::Protocol(format!("a footprint scan's reply: {error}"))
}

impl<Conn: ClusterNodesConnection> RedisStore<Conn> {
    /// [`footprint`](RedisStore::footprint) on a Redis Cluster: every master in turn.
    pub async fn cluster_footprint(&self, max_keys: u64) -> Result<Footprint, StoreError> {
        let mut conn = self.conn.cluster();
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await?;
        let mut footprint = Footprint::default();
        let mut complete = true;
        for (host, port) in masters(&nodes) {
            let routing = SingleNodeRoutingInfo::ByAddress { host, port };
            footprint.complete = false;
            self.scan_into(&mut footprint, max_keys, |commands| {
                let mut conn = conn.clone();
                let routing = routing.clone();
                let count = commands.len();
                async move { conn.route_pipeline(commands, 0, count, routing).await }
            })
            .await?;
            complete &= footprint.complete;
            if footprint.scanned >= max_keys {
                break;
            }
        }
        footprint.complete = complete && footprint.scanned < max_keys;
        Ok(footprint)
    }
}

impl<Conn: super::SingleServerConnection> ScanFootprint for RedisStore<Conn> {
    async fn scan_footprint(&self, max_keys: u64) -> Result<Footprint, StoreError> {
        self.footprint(max_keys).await
    }

    async fn scan_prefixes(&self, max_keys: u64) -> Result<BTreeSet<String>, StoreError> {
        let mut found = BTreeSet::new();
        let conn = self.conn.clone();
        scan_prefixes(
            max_keys,
            |commands| {
                let mut conn = conn.clone();
                async move { conn.req_packed_commands(&commands, 0, commands.len()).await }
            },
            &mut found,
        )
        .await?;
        Ok(found)
    }
}

impl<Conn: ClusterNodesConnection> RedisStore<Conn> {
    /// The prefixes of redefer's keys on a Redis Cluster: every master in turn.
    async fn cluster_prefixes(&self, max_keys: u64) -> Result<BTreeSet<String>, StoreError> {
        let mut conn = self.conn.cluster();
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await?;
        let mut found = BTreeSet::new();
        for (host, port) in masters(&nodes) {
            let routing = SingleNodeRoutingInfo::ByAddress { host, port };
            let run = |commands: redis::Pipeline| {
                let mut conn = conn.clone();
                let routing = routing.clone();
                let count = commands.len();
                async move { conn.route_pipeline(commands, 0, count, routing).await }
            };
            scan_prefixes(max_keys, run, &mut found).await?;
        }
        Ok(found)
    }
}

// One impl per cluster connection: a second blanket impl beside the single server's would
// overlap in the compiler's eyes.
impl ScanFootprint for RedisStore<ClusterConnection> {
    async fn scan_footprint(&self, max_keys: u64) -> Result<Footprint, StoreError> {
        self.cluster_footprint(max_keys).await
    }

    async fn scan_prefixes(&self, max_keys: u64) -> Result<BTreeSet<String>, StoreError> {
        self.cluster_prefixes(max_keys).await
    }
}

impl ScanFootprint for RedisStore<ManagedClusterConnection> {
    async fn scan_footprint(&self, max_keys: u64) -> Result<Footprint, StoreError> {
        self.cluster_footprint(max_keys).await
    }

    async fn scan_prefixes(&self, max_keys: u64) -> Result<BTreeSet<String>, StoreError> {
        self.cluster_prefixes(max_keys).await
    }
}
