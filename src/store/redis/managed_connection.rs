//! The connections [`RedisStore::connect`](super::RedisStore::connect) and
//! [`connect_cluster`](super::RedisStoreBuilder::connect_cluster) make: redis-rs's own (a
//! [`ConnectionManager`], a [`ClusterConnection`]), given up for a new one when its server stops
//! answering on it.
//!
//! redis-rs reconnects when a connection is closed or a reply does not parse, not when commands
//! time out (it takes a timeout for a slow server; a cluster's connection retries the command on
//! the same node). A connection whose server vanished without a reset (its host gone, in a
//! failover or not; the connection's state dropped by a firewall or NAT; a server process
//! frozen) then times out every command until the operating system gives the socket up (about
//! 15 minutes with Linux's defaults, and never while something still acknowledges the bytes):
//! no lock renewed, no job claimed, though the server may be reachable again on a new
//! connection, or its replica promoted in its place. Here a connection is replaced by a new one
//! when commands time out on it twice in a row, with no reply between: on one server, any two
//! commands; on a cluster, two commands for the same hash slot (the cluster's other nodes go on
//! answering; a new cluster connection learns the slots anew, a promoted replica's too).
//!
//! Why two: one command may time out on a connection that still answers the others (a slow
//! script, a large listing); two in a row with no reply between means the connection answered
//! nothing for a whole response timeout. Replacing a connection to a server that is merely
//! stalled costs one reconnection: the commands in flight on the old one time out as they
//! would have.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::key::key_slot;

/// How many commands must time out in a row on one connection (on a cluster, for one hash
/// slot), with no reply between, before it is replaced (see the module's header).
const TIMEOUTS_BEFORE_REPLACING: u8 = 2;

/// A connection that reconnects by itself: redis-rs's connection of `Kind`, replaced by a new
/// one when commands time out twice in a row on it (a server that went silent). Cloned per
/// command, as cheaply as redis-rs's own. Named by its aliases,
/// [`ManagedConnection`] and [`ManagedClusterConnection`].
pub struct Managed<Kind: Reconnect> {
    /// The connection this handle sends on: the shared one as it stood when this handle last
    /// looked (a handle is cloned per command, so it looks again at nearly every command).
    conn: Kind::Conn,
    /// Which of the shared connections `conn` is.
    generation: u64,
    shared: Arc<Shared<Kind>>,
}

/// A connection to one Redis server that reconnects by itself: redis-rs's
/// [`ConnectionManager`] (which reconnects after the server closed the connection), replaced by
/// a new one when commands time out twice in a row on it. What
/// [`RedisStore::connect`](super::RedisStore::connect) and
/// [`RedisStoreBuilder::connect`](super::RedisStoreBuilder::connect) connect over.
///
/// ```no_run
/// use redefer::RedisStore;
/// use redefer::store::ManagedConnection;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), redefer::StoreError> {
/// let store: RedisStore<ManagedConnection> = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// # Ok(()) }
/// ```
pub type ManagedConnection = Managed<OneServer>;

/// A connection to a Redis Cluster that reconnects by itself: redis-rs's
/// [`ClusterConnection`], replaced by a new one (which learns the cluster's slots anew) when
/// two commands for one hash slot time out in a row. What
/// [`RedisStoreBuilder::connect_cluster`](super::RedisStoreBuilder::connect_cluster) connects
/// over.
///
/// ```no_run
/// use redefer::RedisStore;
/// use redefer::store::ManagedClusterConnection;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), redefer::StoreError> {
/// let store: RedisStore<ManagedClusterConnection> =
///     RedisStore::builder().connect_cluster(&["redis://127.0.0.1:7000"]).await?;
/// # Ok(()) }
/// ```
pub type ManagedClusterConnection = Managed<Cluster>;

/// What a [`Managed`] connection is made of: redis-rs's connection, how a new one is made, and
/// which commands' timeouts are counted together. Sealed: [`OneServer`] and [`Cluster`].
pub trait Reconnect: crate::sealed::SealedReconnect + Send + Sync + 'static {
    /// redis-rs's connection.
    #[doc(hidden)]
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;
    /// How many scopes timeouts are counted in, apart.
    #[doc(hidden)]
    const SCOPES: usize;
    /// A new connection that connects at its first command, so that no caller waits for it.
    #[doc(hidden)]
    fn connect_lazy(&self) -> RedisResult<Self::Conn>;
    /// The scope whose count a command's timeout or reply goes to.
    #[doc(hidden)]
    fn scope(cmd: &Cmd) -> usize;
    /// Sends one command (by redis-rs's `ConnectionLike`, unless the kind has a cheaper way).
    #[doc(hidden)]
    fn send<'a>(
        conn: &'a mut Self::Conn,
        cmd: &'a Cmd,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a {
        conn.req_packed_command(cmd)
    }
    /// Sends `count` commands of `pipeline` from `offset` (likewise).
    #[doc(hidden)]
    fn send_pipeline<'a>(
        conn: &'a mut Self::Conn,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> impl Future<Output = RedisResult<Vec<Value>>> + Send + 'a {
        conn.req_packed_commands(pipeline, offset, count)
    }
}

/// The [`Reconnect`] of one server: any two commands count together.
pub struct OneServer {
    client: redis::Client,
    config: ConnectionManagerConfig,
}

/// The [`Reconnect`] of a Redis Cluster: commands count by the hash slot of their first key.
pub struct Cluster {
    client: ClusterClient,
    config: ClusterConfig,
}

impl crate::sealed::SealedReconnect for OneServer {}
impl crate::sealed::SealedReconnect for Cluster {}

impl Reconnect for OneServer {
    type Conn = ConnectionManager;
    const SCOPES: usize = 1;

    fn connect_lazy(&self) -> RedisResult<ConnectionManager> {
        ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
    }

    fn scope(_: &Cmd) -> usize {
        0
    }

    // The manager's inherent methods: its `ConnectionLike` would box each command a second time.
    fn send<'a>(
        conn: &'a mut ConnectionManager,
        cmd: &'a Cmd,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a {
        conn.send_packed_command(cmd)
    }

    fn send_pipeline<'a>(
        conn: &'a mut ConnectionManager,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> impl Future<Output = RedisResult<Vec<Value>>> + Send + 'a {
        conn.send_packed_commands(pipeline, offset, count)
    }
}

impl Reconnect for Cluster {
    type Conn = ClusterConnection;
    const SCOPES: usize = 16384;

    fn connect_lazy(&self) -> RedisResult<ClusterConnection> {
        Ok(self
            .client
            .get_pending_async_connection_with_config(self.config.clone()))
    }

    /// The slot of the command's first key: the argument after the name, or for a script call
    /// (`EVALSHA sha numkeys key ...`) the one after the count. A command without keys (`PING`,
    /// `SCRIPT LOAD`) counts for the slot its first argument would be: any node that times out
    /// says little, and a reply resets one slot's count at most.
    fn scope(cmd: &Cmd) -> usize {
        let mut args = cmd.args_iter();
        let key_at = match args.next() {
            Some(Arg::Simple(name)) if name.len() >= 4 && name[..4].eq_ignore_ascii_case(b"EVAL") => 2,
            _ => 0,
        };
        match args.nth(key_at) {
            Some(Arg::Simple(key)) => usize::from(key_slot(key)),
            _ => 0,
        }
    }
}

impl ManagedConnection {
    /// Connects to `client`'s server (failing as the manager does when it cannot).
    pub(crate) async fn connect(client: redis::Client, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Managed::over(OneServer { client, config }, manager))
    }
}

impl ManagedClusterConnection {
    /// Connects to the cluster `client` names (failing as redis-rs does when it cannot).
    pub(crate) async fn connect(client: ClusterClient, config: ClusterConfig) -> RedisResult<Self> {
        let conn = client.get_async_connection_with_config(config.clone()).await?;
        Ok(Managed::over(Cluster { client, config }, conn))
    }

    /// The cluster connection commands go to now, for what needs redis-rs's routing by node
    /// (a listing scans each master in turn).
    pub(crate) fn current(&self) -> ClusterConnection {
        let mut handle = self.clone();
        handle.take_up_current();
        handle.conn
    }
}

impl<Kind: Reconnect> Managed<Kind> {
    fn over(kind: Kind, conn: Kind::Conn) -> Self {
        Managed {
            conn: conn.clone(),
            generation: 0,
            shared: Arc::new(Shared {
                kind,
                current: Mutex::new((0, conn)),
                generation: AtomicU64::new(0),
                timeouts_in_a_row: (0..Kind::SCOPES).map(|_| AtomicU8::new(0)).collect(),
            }),
        }
    }

    /// Takes up the shared connection when it was replaced since this handle last looked.
    fn take_up_current(&mut self) {
        if self.shared.generation.load(Ordering::Acquire) != self.generation {
            let current = self.shared.current.lock().unwrap_or_else(PoisonError::into_inner);
            (self.generation, self.conn) = (current.0, current.1.clone());
        }
    }
}

impl<Kind: Reconnect> Clone for Managed<Kind> {
    fn clone(&self) -> Self {
        Managed {
            conn: self.conn.clone(),
            generation: self.generation,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// What the clones of one [`Managed`] connection share.
struct Shared<Kind: Reconnect> {
    /// How a replacement connects.
    kind: Kind,
    /// The connection commands go to now, and its generation (one more at each replacement).
    current: Mutex<(u64, Kind::Conn)>,
    /// The generation of `current`, read without its lock by every command.
    generation: AtomicU64,
    /// Per scope, the commands of the current connection that timed out since its last reply.
    timeouts_in_a_row: Box<[AtomicU8]>,
}

impl<Kind: Reconnect> Shared<Kind> {
    /// Counts how a command for `scope` sent on generation `generation` ended, and replaces
    /// that generation's connection when it answered nothing for too long.
    fn heard<T>(&self, generation: u64, scope: usize, result: &RedisResult<T>) {
        if generation != self.generation.load(Ordering::Acquire) {
            // A late word from a connection already replaced: it says nothing of the current one.
            return;
        }
        let Some(count) = self.timeouts_in_a_row.get(scope) else {
            return;
        };
        match result {
            Err(error) if error.is_timeout() => {
                let in_a_row = count.fetch_add(1, Ordering::AcqRel).saturating_add(1);
                if in_a_row >= TIMEOUTS_BEFORE_REPLACING {
                    self.replace(generation);
                }
            }
            // An answer (a server's error is one too): the connection is alive. Read before it
            // is written, so that the common case does not write a line every core reads.
            _ => {
                if count.load(Ordering::Relaxed) != 0 {
                    count.store(0, Ordering::Relaxed);
                }
            }
        }
    }

    /// Replaces generation `silent`'s connection by a new one, unless another command did.
    fn replace(&self, silent: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.0 != silent {
            return;
        }
        match self.kind.connect_lazy() {
            Ok(conn) => {
                *current = (silent + 1, conn);
                for count in self.timeouts_in_a_row.iter() {
                    count.store(0, Ordering::Relaxed);
                }
                self.generation.store(silent + 1, Ordering::Release);
                tracing::warn!(
                    timeouts = TIMEOUTS_BEFORE_REPLACING,
                    "Redis answered nothing on its connection; connecting anew"
                );
            }
            Err(error) => {
                tracing::warn!(%error, "Redis answered nothing on its connection; connecting anew failed")
            }
        }
    }
}

impl<Kind: Reconnect> ConnectionLike for Managed<Kind> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.take_up_current();
        let scope = Kind::scope(cmd);
        Box::pin(async move {
            let result = Kind::send(&mut self.conn, cmd).await;
            self.shared.heard(self.generation, scope, &result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.take_up_current();
        let scope = pipeline.cmd_iter().next().map_or(0, Kind::scope);
        Box::pin(async move {
            let result = Kind::send_pipeline(&mut self.conn, pipeline, offset, count).await;
            self.shared.heard(self.generation, scope, &result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::{Cluster, Reconnect};
    use crate::key::key_slot;

    #[test]
    fn a_cluster_command_counts_for_the_slot_of_its_first_key() {
        let mut script = redis::cmd("EVALSHA");
        script
            .arg("0123abcd")
            .arg(2)
            .arg("redefer:q:{orders}:ready")
            .arg("other");
        assert_eq!(Cluster::scope(&script), usize::from(key_slot(b"{orders}")));
        let mut set = redis::cmd("SET");
        set.arg("redefer:lock:{order:7}").arg("token");
        assert_eq!(Cluster::scope(&set), usize::from(key_slot(b"{order:7}")));
        assert_ne!(Cluster::scope(&script), Cluster::scope(&set));
        assert_eq!(Cluster::scope(&redis::cmd("PING")), 0);
    }
}
