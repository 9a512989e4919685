//! Reading the locks a Redis store holds, for operators: a `SCAN` of one server, or of every
//! master of a cluster.

use std::time::Duration;

use std::future::Future;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::listed_replies::ListedReplies;
use super::{ClusterNodesConnection, ManagedClusterConnection, RedisStore, keys};
use crate::error::StoreError;
use crate::key::decode_tag;
use crate::store::LockInfo;
use crate::store::RedisConnection;

/// `*`, `?`, `[`, `]` and `\` escaped for a SCAN pattern.
pub(super) fn glob_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            matches!(c, '*' | '?' | '[' | ']' | '\\')
                .then_some('\\')
                .into_iter()
                .chain([c])
        })
        .collect()
}

/// One page of a `SCAN`: the cursor to go on from, and the names found, as bytes: a name that
/// is not UTF-8 (no redefer process writes one: another tool's key, or a damaged one) must
/// not fail the scan, nor hide the keys after it.
pub(super) type ScanPage = (u64, Vec<Vec<u8>>);

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// Up to `limit` held locks (mutexes and semaphores) and throttled keys, found by `SCAN` on the server this store is connected to (on
    /// Redis Cluster, use [`cluster_locks`](RedisStore::cluster_locks), which scans every
    /// master). A key whose hash tag no lock key encodes to is reported under its raw name.
    pub async fn locks(&self, limit: usize) -> Result<Vec<LockInfo>, StoreError> {
        let conn = self.conn.clone();
        let keys = self
            .scan_lock_keys(limit, |scan| {
                let mut conn = conn.clone();
                async move { scan.query_async::<ScanPage>(&mut conn).await }
            })
            .await?;
        self.describe_locks(keys).await
    }

    /// The `SCAN` from `cursor` for the keys that start with `namespace` and a hash tag.
    fn lock_scan(namespace: &str, cursor: u64) -> redis::Cmd {
        let pattern = format!("{}{{*", glob_escape(namespace));
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(500);
        scan
    }

    /// Up to `limit` lock keys (mutexes, then semaphores, then throttles), scanning with `run` until the
    /// cursor comes back to 0.
    async fn scan_lock_keys<Run, Fut>(&self, limit: usize, mut run: Run) -> Result<Vec<Vec<u8>>, StoreError>
    where
        Run: FnMut(redis::Cmd) -> Fut,
        Fut: Future<Output = redis::RedisResult<ScanPage>>,
    {
        let mut keys = Vec::new();
        for namespace in [
            keys::lock_namespace(&self.prefix),
            keys::permits_namespace(&self.prefix),
            keys::throttles_namespace(&self.prefix),
            // Lines whose key has no holder (a reservation ran out unused): their waiters wait.
            keys::waiters_namespace(&self.prefix),
            keys::permit_waiters_namespace(&self.prefix),
            // Semaphores held by their first permit alone have no set of permits.
            keys::permit_first_namespace(&self.prefix),
        ] {
            let mut cursor = 0u64;
            loop {
                let (next, found) = run(Self::lock_scan(&namespace, cursor)).await?;
                keys.extend(found);
                cursor = next;
                if cursor == 0 || keys.len() >= limit {
                    break;
                }
            }
        }
        keys.truncate(limit);
        Ok(keys)
    }

    /// The locks of `names`: TTL, fence, line and reservation of each still held. A name that
    /// is not UTF-8 is listed as far as it reads, with nothing else read
    /// ([`unreadable_name`]).
    async fn describe_locks(&self, names: Vec<Vec<u8>>) -> Result<Vec<LockInfo>, StoreError> {
        let mut locks = Vec::with_capacity(names.len());
        let mut keys = Vec::with_capacity(names.len());
        for name in names {
            match String::from_utf8(name) {
                Ok(key) => keys.push(key),
                Err(error) => locks.push(unreadable_name(error.as_bytes())),
            }
        }
        let lock_prefix = keys::lock_namespace(&self.prefix);
        let permits_prefix = keys::permits_namespace(&self.prefix);
        let throttles_prefix = keys::throttles_namespace(&self.prefix);
        let waiters_prefix = keys::waiters_namespace(&self.prefix);
        let permit_waiters_prefix = keys::permit_waiters_namespace(&self.prefix);
        let permit_first_prefix = keys::permit_first_namespace(&self.prefix);
        let found: std::collections::HashSet<String> = keys.iter().cloned().collect();
        for key in keys {
            // A line is described with its key: on its own only when the key was not found.
            let key = if let Some(tag) = key.strip_prefix(&waiters_prefix) {
                let lock = format!("{lock_prefix}{tag}");
                if found.contains(&lock) {
                    continue;
                }
                lock
            } else if let Some(tag) = key
                .strip_prefix(&permit_waiters_prefix)
                .or_else(|| key.strip_prefix(&permit_first_prefix))
            {
                let permits = format!("{permits_prefix}{tag}");
                let line = format!("{permit_waiters_prefix}{tag}");
                // Described once: with its set of permits, else with its line, else alone.
                if found.contains(&permits)
                    || (key.starts_with(&permit_first_prefix) && found.contains(&line))
                {
                    continue;
                }
                permits
            } else {
                key
            };
            let described = if let Some(tag) = key.strip_prefix(&permits_prefix) {
                self.describe_semaphore(&key, tag).await?
            } else if let Some(tag) = key.strip_prefix(&throttles_prefix) {
                self.describe_throttle(&key, tag).await?
            } else {
                self.describe_mutex(&key, key.strip_prefix(&lock_prefix).unwrap_or(&key))
                    .await?
            };
            locks.extend(described);
        }
        Ok(locks)
    }

    /// The mutex at `key`, whose hash tag is `tag`; `None` once released.
    async fn describe_mutex(&self, key: &str, tag: &str) -> Result<Option<LockInfo>, StoreError> {
        let found = keys::LockKeys::of_found_tag(&self.prefix, tag);
        let mut replies = ListedReplies::query(
            redis::pipe()
                .pttl(key)
                .get(found.fence())
                .zcard(found.waiters())
                .get(key),
            &mut self.conn.clone(),
        )
        .await?;
        let pttl: i64 = replies.next("its TTL").unwrap_or(-1);
        let fence: Option<u64> = replies.next("its fencing counter").flatten();
        let waiters: u64 = replies.next("its line").unwrap_or(0);
        let holder: Option<String> = replies.next("its holder").flatten();
        if pttl == -2 && waiters == 0 {
            return Ok(None); // released since the scan
        }
        let reserved_for = holder.and_then(|holder| holder.strip_prefix('@').map(str::to_string));
        // No holder, but a line (a reservation ran out unused): listed with its waiters.
        let held = pttl != -2 && reserved_for.is_none();
        let mut info = LockInfo::mutex(
            key_name(key, tag),
            u64::try_from(pttl).ok().map(Duration::from_millis),
            fence.unwrap_or(0),
            waiters,
            held,
            reserved_for,
        );
        info.unreadable = replies.unreadable();
        Ok(Some(info))
    }
}

/// A key found by a scan whose name is not UTF-8: listed under its name as far as it reads
/// (`U+FFFD` for the bytes that do not), held by nobody, with why nothing else was read. Its
/// records are not looked up: redefer writes no such key, so none of them is a lock.
fn unreadable_name(name: &[u8]) -> LockInfo {
    let mut info = LockInfo::mutex(
        String::from_utf8_lossy(name).into_owned(),
        None,
        0,
        0,
        false,
        None,
    );
    info.limit = None;
    info.unreadable = Some("its name is not UTF-8: not a key redefer writes".to_string());
    info
}

/// The lock key a Redis key found by a scan stands for: its hash tag decoded, or the raw name
/// of a key whose tag no lock key encodes to.
pub(crate) fn key_name(key: &str, tag: &str) -> String {
    tag.strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .and_then(decode_tag)
        .unwrap_or_else(|| key.to_string())
}

impl<Conn: ClusterNodesConnection> RedisStore<Conn> {
    /// Up to `limit` held locks on a Redis Cluster: `SCAN` runs on every master in turn (a
    /// `SCAN` sent through the cluster connection would see one node's keys only).
    pub async fn cluster_locks(&self, limit: usize) -> Result<Vec<LockInfo>, StoreError> {
        let mut conn = self.conn.cluster();
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await?;
        let mut keys = Vec::new();
        for (host, port) in masters(&nodes) {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
            let found = self
                .scan_lock_keys(limit - keys.len(), |scan| {
                    let mut conn = conn.clone();
                    let routing = routing.clone();
                    async move {
                        let reply = conn.route_command(scan, routing).await?;
                        Ok(redis::from_redis_value::<ScanPage>(reply)?)
                    }
                })
                .await?;
            keys.extend(found);
            if keys.len() >= limit {
                break;
            }
        }
        self.describe_locks(keys).await
    }
}

/// The host and port of each master that is up, from a `CLUSTER NODES` reply: lines of
/// `<id> <host>:<port>@<bus port>[,<hostname>] <flags> ...`.
pub(super) fn masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            let up_master = flags.split(',').any(|flag| flag == "master")
                && !flags.split(',').any(|flag| flag == "fail" || flag == "noaddr");
            if !up_master {
                return None;
            }
            let (host, port) = address.split(['@', ',']).next()?.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .collect()
}

impl<Conn: super::SingleServerConnection> crate::store::ListLocks for RedisStore<Conn> {
    async fn list_locks(&self, limit: usize) -> Result<Vec<LockInfo>, StoreError> {
        self.locks(limit).await
    }
}

// One impl per cluster connection: a second blanket impl beside the single server's would
// overlap in the compiler's eyes.
impl crate::store::ListLocks for RedisStore<ClusterConnection> {
    async fn list_locks(&self, limit: usize) -> Result<Vec<LockInfo>, StoreError> {
        self.cluster_locks(limit).await
    }
}

impl crate::store::ListLocks for RedisStore<ManagedClusterConnection> {
    async fn list_locks(&self, limit: usize) -> Result<Vec<LockInfo>, StoreError> {
        self.cluster_locks(limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::masters;

    #[test]
    fn the_masters_that_are_up_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,node-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7002@17002 master,fail - 0 0 3 connected 10923-16383
d4 127.0.0.1:7003@17003 slave a1 0 0 1 connected
";
        assert_eq!(
            masters(nodes),
            vec![("127.0.0.1".to_string(), 7000), ("127.0.0.1".to_string(), 7001)]
        );
        assert!(masters("garbage\n\n").is_empty());
    }
}
