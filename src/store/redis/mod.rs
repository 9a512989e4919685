//! The Redis store: Lua scripts over any async redis-rs connection, single node or cluster.

mod announcements;
pub(crate) mod claim_reply;
mod conditional;
mod connection;
mod counted;
mod eviction;
mod footprint;
mod idempotency;
pub(crate) mod keys;
pub(crate) mod listed_replies;
pub(crate) mod lock;
mod lock_store;
pub(crate) mod locks;
pub(crate) mod lossy_text;
mod managed_connection;
mod pending;
mod queue;
mod queue_operator;
pub(crate) mod releasing;
pub(crate) mod script_call;
pub(crate) mod scripts;
mod url;
mod wake;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::{ClusterClient, ClusterConfig};

use self::announcements::Announcements;
use self::conditional::Conditional;
pub use self::connection::{ClusterNodesConnection, RedisConnection, SingleServerConnection};
use self::counted::CountedKeys;
pub use self::managed_connection::{ManagedClusterConnection, ManagedConnection};
use self::releasing::Releasing;
pub use self::url::without_password;
use crate::error::{KeyError, StoreError};
use crate::key::Prefix;
use crate::lock::Handoffs;
use crate::store::DEFAULT_RESERVATION;

/// A store in Redis, over any async connection of the redis crate that can be cloned cheaply:
/// the [`ManagedConnection`] [`connect`](RedisStore::connect) makes (it reconnects by itself,
/// also when the server goes silent), redis-rs's [`ConnectionManager`](redis::aio::ConnectionManager) or the cluster
/// connection.
///
/// Every script declares all its keys, and the keys one script touches share a hash tag, so the
/// same store runs on Redis Cluster unchanged.
///
/// ```no_run
/// use redefer::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), redefer::StoreError> {
/// // `rediss://` (with the `tls` feature) and `redis://user:password@host` work too.
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore<Conn = ManagedConnection> {
    pub(crate) conn: Conn,
    pub(crate) prefix: Prefix,
    /// Where to open the pub/sub connections that wake schedulers (any node of a cluster will
    /// do, so several are tried in turn); without one, schedulers wake on their timers only.
    pubsub: Option<Arc<[redis::Client]>>,
    /// After an acquire, wait for this many replicas to acknowledge it, for at most this long.
    replication: Option<(u32, Duration)>,
    /// How long a released key stays reserved for the first in its line.
    pub(crate) reservation: Duration,
    /// The subscriber that tells waiting callers who a key was handed to, started on first use
    /// and shared by the store's clones; started again on the runtime of the day when the
    /// runtime it ran on was shut down.
    announcements: Arc<Mutex<Option<Arc<Announcements>>>>,
    /// The scripts loaded and the server's conditional commands found: when connecting, or
    /// (a store over a connection of the user's) by the first acquire, push or claim.
    prepared: Arc<tokio::sync::OnceCell<Conditional>>,
    /// The releases sent and not yet answered, shared by the store's clones.
    pub(crate) releasing: Arc<Releasing>,
    /// The lock keys seen with a raised fencing counter, shared by the store's clones: their
    /// fenced acquires go by plain commands, the others' by the acquire script.
    pub(crate) counted: Arc<CountedKeys>,
    /// The semaphore keys seen with a raised fencing counter, as `counted` for the lock keys:
    /// the first permit of such a key goes by plain commands.
    pub(crate) counted_permits: Arc<CountedKeys>,
    /// The semaphore keys this store found held by others a moment ago (their first permit,
    /// or entries of their set; the same table, another meaning): a busy key's acquires go to
    /// the free-key script at once rather than first trying the plain commands.
    pub(crate) busy_permits: Arc<CountedKeys>,
    /// Which store this is ([`Sealed::instance`](crate::store::Sealed::instance)): every call
    /// asks, so it is worked out when the store or its prefix is made, not per call.
    instance: u64,
}

impl<Conn> std::fmt::Debug for RedisStore<Conn> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore<ManagedConnection> {
    /// Connects to one Redis server with the default settings of [`RedisStoreBuilder`].
    ///
    /// Fails with [`StoreError::Redis`] when the URL is malformed or the server cannot be
    /// reached now; once connected, the store reconnects by itself after the server restarts
    /// or closes the connection, and when commands time out twice in a row on a connection that
    /// went silent ([`ManagedConnection`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder().connect(url).await
    }

    /// Settings for [`connect`](RedisStoreBuilder::connect): prefix and timeouts.
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// A store over a connection you made, with the default prefix `redefer`.
    ///
    /// Its first acquire (or push, or claim) loads the scripts and finds out which conditional
    /// commands the server has, as [`connect`](RedisStore::connect) does, so that every later
    /// call is one request (a release keeps its place on the connection only as one request).
    pub fn new(conn: Conn) -> Self {
        let counted = Arc::default();
        let prefix = Prefix::default();
        RedisStore {
            conn,
            instance: instance_of(&counted, &prefix),
            prefix,
            pubsub: None,
            replication: None,
            reservation: DEFAULT_RESERVATION,
            announcements: Arc::default(),
            prepared: Arc::default(),
            releasing: Arc::default(),
            counted,
            counted_permits: Arc::default(),
            busy_permits: Arc::default(),
        }
    }

    /// A store over `conn`, prepared: its scripts loaded and the server's commands found.
    async fn prepared_now(conn: Conn, prefix: Prefix) -> Result<Self, StoreError> {
        let store = RedisStore::new(conn).with_prefix(prefix);
        store.prepare().await?;
        Ok(store)
    }

    /// Loads the scripts and finds the server's conditional commands, once per store (and its
    /// clones); a failure is tried again by the next call.
    pub(crate) async fn prepare(&self) -> Result<Conditional, StoreError> {
        let conditional = self
            .prepared
            .get_or_try_init(|| async {
                let mut conn = self.conn.clone();
                scripts::load_all(&mut conn).await?;
                Ok::<_, StoreError>(Conditional::detect(&mut conn, &keys::probe_key(&self.prefix)).await)
            })
            .await?;
        Ok(*conditional)
    }

    /// With [`wait_for_replicas`](RedisStore::wait_for_replicas): waits for the replicas to
    /// acknowledge the writes so far; [`StoreError::NotReplicated`] when too few did (the
    /// caller gives back what it took).
    pub(crate) async fn replicated(&self) -> Result<(), StoreError> {
        let Some((wanted, timeout)) = self.replication else {
            return Ok(());
        };
        let acked: u64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(crate::time::ttl_millis(timeout))
            .query_async(&mut self.conn.clone())
            .await?;
        if acked < u64::from(wanted) {
            return Err(StoreError::NotReplicated { acked, wanted });
        }
        Ok(())
    }

    /// The server's conditional commands, as far as known: none before the store is prepared.
    pub(crate) fn conditional(&self) -> Conditional {
        self.prepared.get().copied().unwrap_or_default()
    }

    /// How long a released key stays reserved for the first in its line (default 2 s): the
    /// time its job has to be claimed and take the key before the next in line gets it.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redefer::RedisStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), redefer::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379")
    ///     .await?
    ///     .with_reservation(Duration::from_millis(500));
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn with_reservation(self, reservation: Duration) -> Self {
        RedisStore { reservation, ..self }
    }

    /// The handoff subscriber, started on first use on the current runtime, and again when
    /// the runtime it ran on is gone (a store kept from one runtime to the next); `None`
    /// without pub/sub clients or outside a runtime.
    fn announcements(&self) -> Option<Arc<Announcements>> {
        let clients = self.pubsub.clone()?;
        let mut running = self.announcements.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(announcements) = running.as_ref().filter(|running| running.is_alive()) {
            return Some(Arc::clone(announcements));
        }
        tokio::runtime::Handle::try_current().ok()?;
        let started = Announcements::start(clients);
        *running = Some(Arc::clone(&started));
        Some(started)
    }

    /// The handoffs announced on `channel` (a mutex's or a semaphore's), from now on.
    pub(crate) fn announced_on(&self, channel: String) -> Handoffs {
        match self.announcements() {
            Some(announcements) => announcements.watch(channel),
            // Without pub/sub, the waiters poll on their backoff.
            None => Handoffs::new(tokio::sync::broadcast::channel(1).1, None, true),
        }
    }

    /// The same store under another key prefix.
    pub fn with_prefix(self, prefix: Prefix) -> Self {
        RedisStore {
            instance: instance_of(&self.counted, &prefix),
            prefix,
            ..self
        }
    }

    /// Lets schedulers on this store wake as soon as a job is pushed with an earlier due time,
    /// by any process, through a pub/sub connection opened with `client`. Set by
    /// [`connect`](RedisStore::connect); without it, schedulers wake on their own timers only.
    pub fn with_pubsub(self, client: redis::Client) -> Self {
        self.with_pubsub_nodes(vec![client])
    }

    /// Like [`with_pubsub`](Self::with_pubsub) with several nodes, tried in turn when the one in
    /// use fails: on Redis Cluster a message published on any node reaches every node.
    pub fn with_pubsub_nodes(self, clients: Vec<redis::Client>) -> Self {
        RedisStore {
            pubsub: (!clients.is_empty()).then(|| clients.into()),
            announcements: Arc::default(),
            ..self
        }
    }

    /// After each acquire, waits (`WAIT`) until `replicas` replicas acknowledged it, for at
    /// most `timeout`; when fewer did, releases the lock and fails with
    /// [`StoreError::NotReplicated`]. Narrows the window in which a failover loses a lock that
    /// was written to a primary but not yet copied (Redis replicates asynchronously); it does
    /// not close it, and costs a round trip per acquire. Fencing tokens keep downstream
    /// writes safe either way.
    pub fn wait_for_replicas(self, replicas: u32, timeout: Duration) -> Self {
        RedisStore {
            replication: Some((replicas, timeout)),
            ..self
        }
    }

    /// The prefix of every key this store writes.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// A clone of the underlying connection, for commands of your own (the crate re-exports
    /// the redis crate as [`redefer::redis`](crate::redis), so no version-matched dependency
    /// of your own is needed).
    pub fn connection(&self) -> Conn {
        self.conn.clone()
    }

    /// The Redis key that holds `key`'s lock under this store's prefix: for tools that inspect
    /// or repair locks by hand.
    ///
    /// ```no_run
    /// use redefer::{LockKey, RedisStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.lock_redis_key(&LockKey::new("order:42")?), "redefer:lock:{order:42}");
    /// # Ok(()) }
    /// ```
    pub fn lock_redis_key(&self, key: &crate::key::LockKey) -> String {
        keys::LockKeys::new(&self.prefix, key).lock().to_string()
    }
}

impl<Conn> crate::store::Sealed for RedisStore<Conn> {
    fn under_prefix(self, prefix: Prefix) -> Self {
        RedisStore {
            instance: instance_of(&self.counted, &prefix),
            prefix,
            ..self
        }
    }

    fn instance(&self) -> u64 {
        self.instance
    }
}

/// Which store has `counted` (its clones share it) under `prefix` (which tells a store under
/// another prefix apart).
fn instance_of(counted: &Arc<CountedKeys>, prefix: &Prefix) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (Arc::as_ptr(counted) as usize).hash(&mut hasher);
    prefix.as_str().hash(&mut hasher);
    hasher.finish()
}

/// How many commands the connection queues for its writer (redis-rs's default is 50): with
/// the queue full, a command waits for room in its caller's task, and at concurrency 64 the
/// default made three requests in a hundred wait (when releases were answered in the
/// background, such a release went out behind the caller's next acquire of its key). A queued
/// command costs a few dozen bytes.
const PIPELINE_BUFFER: usize = 1024;

/// Settings for [`RedisStore::connect`].
///
/// ```no_run
/// use std::time::Duration;
/// use redefer::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::builder()
///     .prefix("billing")?
///     .response_timeout(Duration::from_millis(500))
///     .connect("redis://127.0.0.1:6379")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    prefix: Prefix,
    response_timeout: Duration,
    connection_timeout: Duration,
    reconnect_attempts: usize,
    refuse_eviction: bool,
}

impl Default for RedisStoreBuilder {
    fn default() -> Self {
        RedisStoreBuilder {
            prefix: Prefix::default(),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(2),
            reconnect_attempts: 2,
            refuse_eviction: false,
        }
    }
}

impl RedisStoreBuilder {
    /// The prefix of every key (default `redefer`); rejected when empty or braced.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Result<Self, KeyError> {
        self.prefix = Prefix::new(prefix)?;
        Ok(self)
    }

    /// How long a command may wait for its reply before it fails (default 2 s). Keep it well
    /// under the lock TTL: lock renewal must learn of a dead server before the lock expires.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long opening a connection may take (default 2 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How many times one reconnection retries before the commands waiting on it fail
    /// (default 2, 50 ms then 100 ms apart). Kept low so that calls fail promptly while Redis
    /// is down instead of queueing behind a long reconnect schedule; the next command starts
    /// a new reconnection.
    pub fn reconnect_attempts(mut self, attempts: usize) -> Self {
        self.reconnect_attempts = attempts;
        self
    }

    /// Whether [`connect`](Self::connect) fails with [`StoreError::EvictionPolicy`] when the
    /// server's `maxmemory-policy` can evict keys (anything but `noeviction`); by default it
    /// connects and logs the danger at error level. Either way the policy is read once, at
    /// connect, with `CONFIG GET`; a server whose ACL forbids that is not checked.
    ///
    /// ```no_run
    /// use redefer::{RedisStore, StoreError};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// match RedisStore::builder().refuse_eviction(true).connect("redis://127.0.0.1:6379").await {
    ///     // maxmemory-policy is noeviction (or could not be read).
    ///     Ok(store) => drop(store),
    ///     Err(StoreError::EvictionPolicy { policy }) => eprintln!("refusing to run on {policy}"),
    ///     Err(other) => eprintln!("cannot connect: {other}"),
    /// }
    /// # }
    /// ```
    pub fn refuse_eviction(mut self, refuse: bool) -> Self {
        self.refuse_eviction = refuse;
        self
    }

    /// Connects to the server at `url` (`redis://`, `rediss://` with the `tls` feature,
    /// `redis://user:password@host:port/db`).
    pub async fn connect(self, url: &str) -> Result<RedisStore<ManagedConnection>, StoreError> {
        let client = url::client_of(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connection_timeout))
            .set_number_of_retries(self.reconnect_attempts)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        let mut conn = ManagedConnection::connect(client.clone(), config).await?;
        eviction::check_eviction_policy(&mut conn, self.refuse_eviction).await?;
        Ok(RedisStore::prepared_now(conn, self.prefix)
            .await?
            .with_pubsub(client))
    }

    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port` each); the
    /// client learns the rest of the cluster from them and follows it through failovers.
    pub async fn connect_cluster(
        self,
        nodes: &[&str],
    ) -> Result<RedisStore<ManagedClusterConnection>, StoreError> {
        if nodes.is_empty() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no cluster nodes given",
            ))
            .into());
        }
        let pubsub = nodes
            .iter()
            .map(|node| url::client_of(node))
            .collect::<Result<Vec<_>, _>>()?;
        let client = ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(self.connection_timeout)
            .response_timeout(self.response_timeout)
            .build()?;
        let config = ClusterConfig::new()
            .set_connection_timeout(self.connection_timeout)
            .set_response_timeout(self.response_timeout);
        let mut conn = ManagedClusterConnection::connect(client, config).await?;
        // Any node's answer stands for the cluster's: the nodes of one cluster share a config.
        eviction::check_eviction_policy(&mut conn, self.refuse_eviction).await?;
        Ok(RedisStore::prepared_now(conn, self.prefix)
            .await?
            .with_pubsub_nodes(pubsub))
    }
}
